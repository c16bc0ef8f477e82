"""Builds a benchmark corpus of a given size from real-shaped NeMo Gym rollouts.

The rows of ``../shared/corpus/nemo_gym`` that are real rollouts are replicated with
distinct tasks (a new ``_ng_task_index`` and a marked prompt, so neither task key form
collides) and 1-5 rollouts per task with varied rewards and marked outputs, then written to several files
(each one batch / partition) until the target size is reached. Deterministic for a seed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

FILE_BYTES = 64 << 20  # one batch file per ~64 MB, as a collector would roll its output


def seed_rows(corpus: Path) -> list[dict]:
    rows = []
    for path in sorted(corpus.glob("*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            output = (row.get("response") or {}).get("output") if isinstance(row, dict) else None
            request_input = (row.get("responses_create_params") or {}).get("input") if isinstance(row, dict) else None
            if output and request_input and isinstance(row.get("reward"), (int, float)):
                rows.append(row)
    if not rows:
        raise SystemExit(f"no rollouts found under {corpus}")
    return rows


def _mark_prompt(row: dict, task: int) -> None:
    request = row["responses_create_params"]
    marker = f" [bench task {task}]"
    if isinstance(request["input"], str):
        request["input"] += marker
        return
    for item in request["input"]:
        if isinstance(item, dict) and item.get("role") == "user":
            if isinstance(item.get("content"), str):
                item["content"] += marker
                return
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    part["text"] += marker
                    return


def _mark_output(row: dict, rollout: int) -> None:
    """Rollouts of one task differ in what the model said (real ones do; identical copies
    would be de-duplicated and never paired): mark the last text the model produced."""
    marker = f" [bench rollout {rollout}]"
    for item in reversed(row["response"]["output"]):
        if not isinstance(item, dict):
            continue
        parts = item.get("content") if item.get("type") == "message" else item.get("summary")
        for part in reversed(parts if isinstance(parts, list) else []):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                part["text"] += marker
                return


def _mark_every_output_text(row: dict, task: int, rollout: int) -> None:
    """Every text the model produced (message parts, reasoning summaries, tool-call
    arguments) made distinct to this rollout, as a real rollout's are: in
    ``../shared/corpus`` 98% of the bytes of user and assistant turns are distinct. (The
    replicated templates otherwise repeat them across tasks, and a cost that follows distinct
    texts, as decontamination's does, would look far smaller than it is.)"""
    marker = f" [bench task {task} rollout {rollout}]"
    for item in row["response"]["output"]:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("arguments"), str):
            try:
                arguments = json.loads(item["arguments"])
            except ValueError:
                arguments = None
            if isinstance(arguments, dict):
                item["arguments"] = json.dumps({**arguments, "bench_marker": marker.strip()})
            else:
                item["arguments"] += marker
        for key in ("content", "summary"):
            for part in item.get(key) if isinstance(item.get(key), list) else []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    part["text"] += marker


def build_corpus(target_bytes: int, out: Path, corpus: Path, seed: int = 7, file_bytes: int = FILE_BYTES,
                 distinct_turns: bool = False) -> dict:
    """Writes ``out/batch_NNN.jsonl`` files of about ``file_bytes`` each; returns {files,
    bytes, rows, tasks}. ``distinct_turns``: every text of every rollout's output is its own
    (``_mark_every_output_text``); otherwise only the last one is marked."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("batch_*.jsonl"):
        old.unlink()
    rng = random.Random(seed)
    templates = seed_rows(corpus)
    written = rows = tasks = 0
    file_index = 0
    handle = None
    in_file = 0
    while written < target_bytes:
        template = templates[tasks % len(templates)]
        if handle is None or in_file >= file_bytes:  # a task's rollouts stay in one file
            if handle:
                handle.close()
            handle = open(out / f"batch_{file_index:03d}.jsonl", "wb")
            file_index += 1
            in_file = 0
        for rollout in range(rng.randint(1, 5)):
            row = json.loads(json.dumps(template))
            row["_ng_task_index"] = tasks
            row["_ng_rollout_index"] = rollout
            row["reward"] = rng.choice([0.0, 0.25, 0.5, 1.0])
            _mark_prompt(row, tasks)
            if distinct_turns:
                _mark_every_output_text(row, tasks, rollout)
            else:
                _mark_output(row, rollout)
            line = (json.dumps(row, ensure_ascii=False) + "\n").encode()
            handle.write(line)
            in_file += len(line)
            written += len(line)
            rows += 1
        tasks += 1
    if handle:
        handle.close()
    return {"files": file_index, "bytes": written, "rows": rows, "tasks": tasks}
