"""Shared fixtures: paths, and a small builder of NeMo Gym rollout rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SAMPLE = PROJECT_ROOT / "samples" / "rollouts"
CORPUS = PROJECT_ROOT.parent / "shared" / "corpus"


@pytest.fixture(autouse=True)
def no_project_instance(monkeypatch):
    """Tests never write to the project's dagster_home: each uses a temporary instance."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)


def message_item(text: str, role: str = "assistant") -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "output_text", "text": text}]}


def call_item(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": arguments, "call_id": call_id}


def output_item(call_id: str, output: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def make_rollout(
    output: list[dict[str, Any]] | None = None,
    *,
    request_input: Any = "Say hi.",
    reward: Any = 1.0,
    legacy: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    output = output if output is not None else [message_item("Hi!")]
    row: dict[str, Any] = {"responses_create_params": {"input": request_input}, "reward": reward}
    if legacy:
        row["output"] = output
    else:
        row["response"] = {"status": "completed", "model": "m", "output": output}
    row.update(extra)
    return row


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path




def trajectory_frame(rows: list[dict[str, Any]], source_id: str = "src.jsonl"):
    """The validated-trajectory table (as the exports read it) for in-memory rollout rows."""
    import pandas as pd
    import pyarrow as pa

    from trajectory_assets.formats.jsonutil import dumps, sha256_hex
    from trajectory_assets.formats.records import convert_record
    from trajectory_assets.ingest import TRAJECTORY_ARROW_SCHEMA, trajectory_row
    from trajectory_assets.io.sources import SourceFile

    source = SourceFile(uri=f"/data/{source_id}", source_id=source_id)
    table_rows = []
    for line, row in enumerate(rows, start=1):
        raw = dumps(row)
        trajectory = convert_record(raw, source_id=source_id)
        table_rows.append(trajectory_row(trajectory, trajectory_id=sha256_hex(raw)[:32], source=source, line=line))
    return pa.Table.from_pylist(table_rows, schema=TRAJECTORY_ARROW_SCHEMA).to_pandas()
