"""Conformance over the real NeMo Gym files in ../shared/corpus/nemo_gym."""

import json

import pytest

from tests.spec_checks import CHECKERS
from trajectory_assets.cli import main

# the two files NOTICE.md describes as deliberately not rollouts, and the shapes seen in
# the corpus that cannot become a trainable trajectory
EXPECTED_REASONS = {"invalid_json", "not_a_rollout", "no_model_output", "no_prompt"}


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory, request):
    folder = request.getfixturevalue("corpus_nemo_gym")
    storage = tmp_path_factory.mktemp("corpus")
    assert main(["run", "--source", str(folder), "--storage", str(storage)]) == 0
    return folder, storage


@pytest.fixture(scope="module")
def corpus_nemo_gym():
    from tests.conftest import CORPUS

    folder = CORPUS / "nemo_gym"
    if not folder.is_dir():
        pytest.skip(f"conformance corpus not present at {folder}")
    return folder


def test_every_record_is_accounted_for(corpus_run):
    folder, storage = corpus_run
    lines = sum(1 for path in folder.glob("*.jsonl") for line in path.read_bytes().split(b"\n") if line.strip())
    stats = json.loads((storage / "reports" / "stats.json").read_text())
    assert stats["records_read"] == lines
    assert stats["records_read"] == stats["records_valid"] + stats["records_rejected"]
    assert stats["sources"] == len(list(folder.glob("*.jsonl")))
    assert set(stats["rejected_by_reason"]) <= EXPECTED_REASONS


def test_files_that_are_not_rollouts_are_quarantined_whole(corpus_run):
    _, storage = corpus_run
    rows = [json.loads(line) for line in (storage / "quarantine" / "rejected.jsonl").read_text().splitlines()]
    by_file = {}
    for row in rows:
        by_file.setdefault(row["source"].rsplit("/", 1)[1], set()).add(row["reason"])
    assert by_file["resources_servers__bbq__example_rollouts.jsonl"] == {"not_a_rollout"}
    assert by_file["resources_servers__browsecomp_advanced_harness__example_rollouts.jsonl"] == {"invalid_json"}
    assert all(row["raw"] for row in rows)


def test_every_export_line_obeys_the_spec(corpus_run):
    _, storage = corpus_run
    counts = {}
    for export, check in CHECKERS.items():
        for split in ("train", "validation"):
            lines = (storage / "exports" / export / f"{split}.jsonl").read_text().splitlines()
            for line in lines:
                check(line)
            counts[export] = counts.get(export, 0) + len(lines)
    # the corpus holds tool-using rollouts and multi-rollout tasks: every export is non-empty
    assert counts["sft"] > 100 and counts["grpo"] > 100 and counts["dpo"] >= 1


def test_sft_keeps_tool_calls_and_reasoning_as_structure(corpus_run):
    _, storage = corpus_run
    rows = [json.loads(line) for line in (storage / "exports" / "sft" / "train.jsonl").read_text().splitlines()]
    messages = [m for row in rows for m in row["messages"]]
    assert any(m.get("tool_calls") for m in messages)
    assert any(m.get("reasoning_content") for m in messages)
    assert any(m["role"] == "tool" for m in messages)
