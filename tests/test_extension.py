"""A new export and a new source format are each one module plus one registry line.

The test copies the two packages, adds a toy export (``exports/toy_pairs.py``: each SFT
trajectory as one prompt/answer pair, checked by the SFT contract's rules) and a toy source
format (``sources/toy_qa.py``: ``{"question", "answer", "score"}`` lines), one line each in
the registries, and runs that copy: both show up in the definitions, the CLI's
``--exports``, the run's outputs, the report and its viewer.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trajectory_assets import PROJECT_ROOT

TOY_EXPORT = '''"""``toy_pairs``: each SFT trajectory as its first question and last answer."""

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from schemas.sft import SftSchema
from trajectory_assets.exports.columns import FIELDS, LINEAGE
from trajectory_assets.exports.export import Export, ReadBack
from trajectory_assets.io.arrow_rows import JSON

SCHEMA = pa.schema([("messages", JSON), *LINEAGE])


def render(item) -> dict[str, Any]:
    users = [m for m in item.messages if m["role"] == "user"]
    answers = [m for m in item.messages if m["role"] == "assistant" and not m.get("tool_calls")]
    return {"messages": [users[0], answers[-1]], "trajectory_id": item.row.trajectory_id,
            "task_key": item.row.task_key}


def read_back(row: Mapping[str, Any]) -> ReadBack:
    return ReadBack(messages=list(row["messages"]))


EXPORT = Export(name="toy_pairs", family="sft", render=render, read_back=read_back, contract=SftSchema,
                arrow_schema=SCHEMA, lineage={"messages": ["messages"]}, fields=FIELDS,
                description="A toy: each trajectory's first question and last answer.")
'''

TOY_SOURCE = '''"""``toy_qa``: one question, its answer and a score per line."""

from typing import Any

from trajectory_assets.chat.messages import prompt_key
from trajectory_assets.chat.trajectory import Rejection, Trajectory
from trajectory_assets.sources.format import SourceFormat


def looks_like_toy(record: dict[str, Any]) -> bool:
    return "question" in record and "answer" in record


def convert_toy(record: dict[str, Any], *, source_id: str, **_: Any) -> Trajectory:
    if not isinstance(record["question"], str) or not isinstance(record["answer"], str):
        raise Rejection("invalid_structure", "question and answer must be text")
    prompt = [{"role": "user", "content": record["question"]}]
    return Trajectory(source_format="toy_qa", messages=[*prompt, {"role": "assistant", "content": record["answer"]}],
                      prompt_length=1, task_key=prompt_key(prompt, None), reward=record.get("score"),
                      request={"input": record["question"]})


FORMAT = SourceFormat(name="toy_qa", shape="a toy question and answer", detect=looks_like_toy, convert=convert_toy)
'''


def add_line(path: Path, after: str, line: str) -> None:
    text = path.read_text()
    assert after in text, f"{path}: {after!r} not found"
    path.write_text(text.replace(after, after + line, 1))


@pytest.fixture(scope="module")
def extended(tmp_path_factory) -> Path:
    """A copy of the project's packages with the toy export and the toy source added."""
    root = tmp_path_factory.mktemp("extended")
    for package in ("trajectory_assets", "schemas"):
        shutil.copytree(PROJECT_ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT_ROOT / "workspace.yaml", root)  # how the runs name their code location
    (root / "trajectory_assets" / "exports" / "toy_pairs.py").write_text(TOY_EXPORT)
    (root / "trajectory_assets" / "sources" / "toy_qa.py").write_text(TOY_SOURCE)
    # the one line each registry gets (and its module among the imports)
    add_line(root / "trajectory_assets" / "exports" / "registry.py", "    on_policy_tokens.EXPORT,\n",
             "    toy_pairs.EXPORT,\n")
    add_line(root / "trajectory_assets" / "exports" / "registry.py", "    on_policy_tokens,\n", "    toy_pairs,\n")
    add_line(root / "trajectory_assets" / "sources" / "__init__.py", "    hermes.FORMAT,\n", "    toy_qa.FORMAT,\n")
    add_line(root / "trajectory_assets" / "sources" / "__init__.py", "import atif, hermes, nemo_gym", ", toy_qa")
    return root


def python(root: Path, code: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(root), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_both_show_up_in_the_definitions_and_the_cli(extended):
    out = python(extended, "from trajectory_assets.definitions import defs\n"
                           "graph = defs.resolve_asset_graph()\n"
                           "print(graph.get(__import__('dagster').AssetKey('toy_pairs_dataset')).description)\n"
                           "print(graph.get(__import__('dagster').AssetKey('raw_rollouts')).description)")
    assert "first question and last answer" in out and "``toy_qa``: a toy question and answer" in out
    assert "toy_pairs" in python(extended, "from trajectory_assets.cli import main\n"
                                           "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass")


def test_both_go_through_a_run_into_the_report_and_its_viewer(extended, tmp_path):
    sources = tmp_path / "in"
    shutil.copytree(PROJECT_ROOT / "samples" / "rollouts", sources)
    (sources / "toy.jsonl").write_text("".join(json.dumps({"question": f"What is {n} + {n}?", "answer": str(2 * n),
                                                           "score": 1.0}) + "\n" for n in range(4)))
    home = tmp_path / "home"
    home.mkdir()
    python(extended, f"from trajectory_assets.cli import main\n"
                     f"raise SystemExit(main(['run', '--source', {str(sources)!r}, '--storage', {str(tmp_path / 'out')!r},"
                     f" '--exports', 'sft,toy_pairs']))", DAGSTER_HOME=str(home))
    out = tmp_path / "out"
    rows = [json.loads(line) for split in ("train", "validation")
            for line in (out / "exports" / "toy_pairs" / f"{split}.jsonl").read_text().splitlines()]
    assert any(row["messages"][0]["content"] == "What is 3 + 3?" for row in rows)  # the toy source's rows
    stats = json.loads((out / "reports" / "stats.json").read_text())
    by_format = {row["name"]: row for row in stats["by_source_format"]}
    assert by_format["toy_qa"]["trajectories"] == 4
    assert "toy_pairs" in stats["exports"]
    page = (out / "reports" / "index.html").read_text()
    assert 'data-export="toy_pairs" data-shape="chat"' in page  # the viewer read its rows back
