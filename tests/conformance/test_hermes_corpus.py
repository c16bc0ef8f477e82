"""Conformance over the real Hermes Agent files in ../shared/corpus/hermes."""

import json

import pytest

from tests.split_files import split_text
from tests.conftest import shared_data
from tests.spec_checks import CHECKERS
from trajectory_assets.cli import main

MARKUP = ("<think>", "</think>", "<tool_call>", "<tool_response>", "<tools>")


@pytest.fixture(scope="module")
def hermes_run(tmp_path_factory):
    folder = shared_data("corpus/hermes")
    storage = tmp_path_factory.mktemp("hermes")
    assert main(["run", "--source", str(folder), "--storage", str(storage)]) == 0
    return folder, storage


def test_every_record_is_accounted_for(hermes_run):
    folder, storage = hermes_run
    lines = sum(1 for path in folder.glob("*.jsonl") for line in path.read_bytes().split(b"\n") if line.strip())
    stats = json.loads((storage / "reports" / "stats.json").read_text())
    assert stats["records_read"] == lines == stats["records_valid"] + stats["records_rejected"]
    assert stats["hermes"]["trajectories"] == stats["records_valid"]


def test_exports_carry_structure_and_no_markup(hermes_run):
    _, storage = hermes_run
    sft = [json.loads(line) for split in ("train", "validation")
           for line in split_text(storage / "exports" / "sft", split).splitlines()]
    assert sft
    assert any(m.get("reasoning_content") for row in sft for m in row["messages"])
    assert any(row.get("tools") for row in sft)  # recovered from the <tools> block
    for row in sft:
        for message in row["messages"]:
            assert not any(tag in (message.get("content") or "") for tag in MARKUP)
    for export, check in CHECKERS.items():
        for split in ("train", "validation"):
            for line in split_text(storage / "exports" / export, split).splitlines():
                check(line)
