"""A new export and a new source format are each one module plus one registry line.

The test copies the two packages, adds a toy export (``exports/toy_pairs.py``: each SFT
trajectory as one prompt/answer pair, checked by the SFT contract's rules) and a toy source
format (``sources/toy_qa.py``: ``{"question", "answer", "score", "tokens"}`` lines), one line
each in the registries, and runs that copy: both show up in the definitions, the CLI's
``--exports``, the run's outputs, the report and its viewer, and the toy source's rows go
through every export. No export asks which format a row came from by its name: what an export
needs of a row's source, its ``FORMAT`` declares (``sources/format.py``).
"""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from trajectory_assets import PROJECT_ROOT
from trajectory_assets.chat.messages import prompt_key
from trajectory_assets.exports.registry import EXPORTS
from trajectory_assets.sources import SOURCES

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
    tokens = record["tokens"]  # the answer's token ids, as a model server would record them
    return Trajectory(source_format="toy_qa", messages=[*prompt, {"role": "assistant", "content": record["answer"]}],
                      prompt_length=1, task_key=prompt_key(prompt, None), reward=record.get("score"),
                      request={"input": record["question"]},
                      token_data=[{"message_index": 1, "prompt_token_ids": [1, 2], "generation_token_ids": tokens,
                                   "generation_log_probs": [-0.5] * len(tokens)}])


# no agent_ref_setting: its GRPO tasks go to grpo.default_agent_ref
FORMAT = SourceFormat(name="toy_qa", shape="a toy question and answer", detect=looks_like_toy, convert=convert_toy,
                      report_section="Toy questions")
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


QUESTIONS = {f"What is {n} + {n}?": (str(2 * n), str(2 * n + 1)) for n in range(4)}  # -> (right, wrong) answer
TOKENS = {answer: [100 + int(answer)] for answers in QUESTIONS.values() for answer in answers}
TOY_TASKS = {prompt_key([{"role": "user", "content": question}], None): question for question in QUESTIONS}


def _last_text(messages) -> str:
    return messages[-1]["content"]


def _sharegpt_last(turns) -> str:
    return turns[-1]["value"]


def _sft(row, question):
    right, _ = QUESTIONS[question]
    return _last_text(row["messages"]) == right and row["reward"] == 1.0


def _pair(chosen, rejected, question):
    return (_last_text(chosen), _last_text(rejected)) == QUESTIONS[question]


def _task_of(row):  # verl keeps the task in extra_info
    return row["task_key"] if "task_key" in row else row["extra_info"]["task_key"]


AGENT = {"type": "responses_api_agents", "name": "toy_agent"}
# export -> what one of its rows made from the toy source must hold (row, the toy question)
CHECKS = {
    "sft": _sft,
    "trl_sft": _sft,
    "nemo_rl_sft": _sft,
    "axolotl": lambda row, q: _sft(row, q) and row["messages"][-1]["train"] is True,
    # Hermes Agent writes every gpt turn with its (here empty) reasoning block
    "sft_hermes": lambda row, q: _sharegpt_last(row["conversations"]) == f"<think>\n</think>\n{QUESTIONS[q][0]}",
    "llama_factory": lambda row, q: _sharegpt_last(row["conversations"]) == QUESTIONS[q][0],
    "on_policy_tokens": lambda row, q: row["calls"][0]["generation_token_ids"] == TOKENS[QUESTIONS[q][0]],
    "dpo": lambda row, q: _pair(row["chosen"], row["rejected"], q) and row["quality_difference"] == 1.0,
    "trl_dpo": lambda row, q: _pair(row["chosen"], row["rejected"], q) and row["quality_difference"] == 1.0,
    "nemo_rl_dpo": lambda row, q: _pair(*[c["completion"] for c in sorted(row["completions"],
                                                                        key=lambda c: c["rank"])], q),
    # a toy format declares no agent setting: its tasks go to grpo.default_agent_ref
    "grpo": lambda row, q: row["agent_ref"] == AGENT and row["num_rollouts"] == 2 and row["mean_reward"] == 0.5,
    "trl_grpo": lambda row, q: row["agent_name"] == "toy_agent" and _last_text(row["prompt"]) == q,
    "verl": lambda row, q: row["data_source"] == "toy_agent" and _last_text(row["prompt"]) == q,
    "toy_pairs": lambda row, q: [m["content"] for m in row["messages"]] == [q, QUESTIONS[q][0]],
}


def rows_of(export_folder: Path) -> list[dict]:
    """Every row of an export's splits, as its reader gets it."""
    rows = []
    for path in sorted(export_folder.iterdir()):
        if path.suffix == ".jsonl":
            rows += [json.loads(line) for line in path.read_text().splitlines()]
        elif path.suffix == ".parquet":
            rows += pq.read_table(path).to_pylist()
    return rows


def test_the_toy_source_goes_through_every_export_into_the_report_and_its_viewer(extended, tmp_path):
    """All exports (the seed ones, DPO and GRPO, the trainer flavors, the toy one) and the
    report, with the sample rollouts beside the toy source's."""
    sources = tmp_path / "in"
    shutil.copytree(PROJECT_ROOT / "samples" / "rollouts", sources)
    (sources / "toy.jsonl").write_text("".join(
        json.dumps({"question": question, "answer": answer, "score": score, "tokens": TOKENS[answer]}) + "\n"
        for question, answers in QUESTIONS.items() for answer, score in zip(answers, (1.0, 0.0))))
    config = tmp_path / "config.yaml"
    config.write_text("grpo:\n  default_agent_ref: toy_agent\n")
    home = tmp_path / "home"
    home.mkdir()
    python(extended, f"from trajectory_assets.cli import main\n"
                     f"raise SystemExit(main(['run', '--source', {str(sources)!r}, '--storage', {str(tmp_path / 'out')!r},"
                     f" '--config', {str(config)!r}]))", DAGSTER_HOME=str(home))
    out = tmp_path / "out"
    names = [export.name for export in EXPORTS] + ["toy_pairs"]
    assert sorted(CHECKS) == sorted(names)  # a new export gets its check here
    for name in names:
        toy_rows = [row for row in rows_of(out / "exports" / name) if _task_of(row) in TOY_TASKS]
        questions = {TOY_TASKS[_task_of(row)] for row in toy_rows}
        assert questions == set(QUESTIONS), f"{name}: the toy's tasks {questions}"
        wrong = [row for row in toy_rows if not CHECKS[name](row, TOY_TASKS[_task_of(row)])]
        assert not wrong, f"{name}: {wrong[0]}"
    stats = json.loads((out / "reports" / "stats.json").read_text())
    by_format = {row["name"]: row for row in stats["by_source_format"]}
    assert by_format["toy_qa"]["trajectories"] == 8
    assert set(stats["exports"]) == set(names)
    # the section the toy format declares (report_section), as the Hermes one
    assert stats["toy_qa"] == {"trajectories": 8, "completed": 8, "reasoning_coverage": 0.0, "quality_flags": {},
                               "tools": {}}
    assert "## Toy questions\n\n- trajectories: 8 (completed 8)" in (out / "reports" / "stats.md").read_text()
    page = (out / "reports" / "index.html").read_text()
    assert 'data-export="toy_pairs" data-shape="chat"' in page  # the viewer read its rows back
    assert all(f'data-export="{name}"' in page for name in names)


def test_no_export_or_report_module_names_a_source_format():
    """What an export or the report needs to know of a row's source (where its GRPO task goes,
    a section of its own) is declared on its ``FORMAT`` and asked of the registry, so a new
    format needs no change there: no module of theirs holds a format's name."""
    names = {source.name for source in SOURCES}
    found = []
    for room in ("exports", "report"):
        for path in sorted((PROJECT_ROOT / "trajectory_assets" / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}: {node.value!r}")
    assert not found
