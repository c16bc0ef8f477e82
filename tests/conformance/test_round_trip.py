"""Every export reads back as the conversation it was made from: over the whole corpus,
each written row, read as its trainer's loader reads the file (JSON lines parsed, Parquet
through Arrow), goes through its export's ``read_back`` and is compared with the validated
trajectory (or trajectories) it names.

Compared as a conversation: each message's role, text, reasoning, each call's name and
arguments (as JSON values), which call each tool message answers (by position: ShareGPT
formats carry no call ids), and the tools offered. Forms of the same content compare equal
(an assistant turn's null content and ``""``; arguments as a JSON string and as the object).

The markup formats (Hermes ``<think>`` / ``<tool_call>`` / ``<tool_response>``, LLaMA-Factory
turns) carry less, by their own rules, and are compared on what they carry: their readers
strip the whitespace around tags (a turn's leading and trailing whitespace is not kept), a
JSON tool result is embedded as its value (compared as JSON), and a tool is the function a
model sees (name, description, parameters; not OpenAI's ``strict`` request option).
"""

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from tests.split_files import split_paths
from trajectory_assets.cli import main
from trajectory_assets.exports.registry import EXPORTS

MARKUP_EXPORTS = {"sft_hermes", "llama_factory"}


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory) -> Path:
    from tests.conftest import shared_data

    storage = tmp_path_factory.mktemp("round_trip")
    sources = [shared_data("corpus/nemo_gym"), shared_data("corpus/hermes")]
    assert main(["run", "--source", str(sources[0]), "--source", str(sources[1]), "--storage", str(storage)]) == 0
    return storage


@pytest.fixture(scope="module")
def trajectories(corpus_run) -> dict[str, dict[str, Any]]:
    """Every validated trajectory: its messages, prompt and tools, by trajectory_id."""
    found = {}
    for path in sorted((corpus_run / "trajectories" / "batches").glob("*.parquet")):
        table = pq.read_table(path, columns=["trajectory_id", "messages", "prompt_length", "tools"])
        for row in table.to_pylist():
            messages = orjson.loads(row["messages"])
            found[row["trajectory_id"]] = {"messages": messages, "prompt": messages[: row["prompt_length"]],
                                           "tools": orjson.loads(row["tools"]) if row["tools"] else None}
    return found


def written_rows(storage: Path, export) -> list[dict[str, Any]]:
    rows = []
    for path in (path for split in ("train", "validation") for path in split_paths(storage / "exports" / export.name, split)):
        if export.file_format == "parquet":
            rows += pq.read_table(path).to_pylist()
        else:
            rows += [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return rows


def arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def conversation(messages: list[Mapping[str, Any]], markup: bool = False) -> list[tuple]:
    """Messages as the comparison sees them (see the module docstring)."""
    position: dict[Any, int] = {}
    seen = []
    for message in messages:
        calls = []
        for call in message.get("tool_calls") or []:
            position[call.get("id")] = len(position)
            calls.append((call["function"]["name"], arguments(call["function"].get("arguments"))))
        text, reasoning = message.get("content") or "", message.get("reasoning_content") or ""
        answers = position.get(message.get("tool_call_id")) if message.get("role") == "tool" else None
        if markup:
            text, reasoning = text.strip(), reasoning.strip()
            if answers is not None or message.get("role") == "tool":
                text = orjson.dumps(arguments(text), option=orjson.OPT_SORT_KEYS).decode()
        seen.append((message["role"], text, reasoning or None,
                     tuple(orjson.dumps(call, option=orjson.OPT_SORT_KEYS) for call in calls), answers))
    return seen


def tools(offered: list[Mapping[str, Any]] | None, markup: bool = False) -> list[bytes]:
    functions = [tool.get("function", tool) for tool in offered or []]
    if markup:
        functions = [{key: function.get(key) for key in ("name", "description", "parameters")}
                     for function in functions]
    return [orjson.dumps(function, option=orjson.OPT_SORT_KEYS) for function in functions]


@pytest.mark.parametrize("export", EXPORTS, ids=lambda export: export.name)
def test_every_written_row_reads_back_as_what_it_was_made_from(export, corpus_run, trajectories):
    rows = written_rows(corpus_run, export)
    if export.name != "on_policy_tokens":  # no file of the corpus records token ids
        assert rows, f"the corpus yields no {export.name} rows"
    markup = export.name in MARKUP_EXPORTS
    mismatches: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        back = export.read_back(row)
        if export.family == "sft":
            source = trajectories[row["trajectory_id"]]
            if back.calls is not None:
                continue  # a token row holds no text (tests/exports/test_families.py checks its calls)
            if conversation(back.messages, markup) != conversation(source["messages"], markup):
                mismatches["messages"].append(row["trajectory_id"])
            if tools(back.tools, markup) != tools(source["tools"], markup):
                mismatches["tools"].append(row["trajectory_id"])
        elif export.family == "dpo":
            for side, trajectory_id in ((back.chosen, row["chosen_id"]), (back.rejected, row["rejected_id"])):
                if conversation(back.messages + side) != conversation(trajectories[trajectory_id]["messages"]):
                    mismatches["pair side"].append(trajectory_id)
        else:
            first = (row.get("trajectory_ids") or row.get("extra_info", {}).get("trajectory_ids"))[0]
            if conversation(back.messages) != conversation(trajectories[first]["prompt"]):
                mismatches["prompt"].append(first)
            if tools(back.tools) != tools(trajectories[first]["tools"]):
                mismatches["tools"].append(first)
    assert not mismatches, {what: (len(ids), ids[:3]) for what, ids in mismatches.items()}
