"""Hermes end to end: every variant in one folder, through the CLI."""

import gzip
import json

from tests.split_files import split_rows, split_text
from tests.conftest import write_jsonl
from tests.fixtures import hermes_rows as rows
from tests.spec_checks import CHECKERS
from trajectory_assets.cli import main

MARKUP = ("<think>", "</think>", "<tool_call>", "<tool_response>", "<tools>")


def hermes_folder(root):
    write_jsonl(root / "trajectory_samples.jsonl", [rows.tool_run(), *rows.anomalies()])
    failed = rows.tool_run()
    failed["completed"] = False
    write_jsonl(root / "failed_trajectories.jsonl", [failed])
    write_jsonl(root / "data" / "run1" / "batch_0.jsonl", rows.batch_runner_rows())
    # newer Hermes appends to .jsonl.gz one gzip member at a time
    members = [gzip.compress((json.dumps(row, ensure_ascii=False) + "\n").encode()) for row in rows.anomalies()[:2]]
    (root / "more_samples.jsonl.gz").write_bytes(b"".join(members))
    return root


def test_every_hermes_variant_is_accounted_for_and_exported_as_structure(tmp_path):
    source = hermes_folder(tmp_path / "in")
    out = tmp_path / "out"
    assert main(["run", "--source", str(source), "--storage", str(out)]) == 0
    stats = json.loads((out / "reports" / "stats.json").read_text())
    # 1 + 8 + 1 + 3 + 2 records; the tombstone is quarantined with its own reason
    assert stats["records_read"] == 15
    assert stats["records_read"] == stats["records_valid"] + stats["records_rejected"]
    assert stats["rejected_by_reason"] == {"hermes_discarded": 1}
    # the .gz file's two members repeat two lines of another file: used once, counted
    assert stats["duplicates_across_batches"] == 2
    assert stats["hermes"]["trajectories"] == 12
    assert stats["hermes"]["quality_flags"]["unbalanced_think_tags"] == 2
    assert stats["hermes"]["tools"]["terminal"]["failures"] >= 1

    sft = [row for split in ("train", "validation") for row in split_rows(out / "exports" / "sft", split)]
    assert all(row["trajectory_id"] for row in sft)
    messages = [m for row in sft for m in row["messages"]]
    assert any(m.get("tool_calls") for m in messages) and any(m.get("reasoning_content") for m in messages)
    for message in messages:
        assert not any(tag in (message.get("content") or "") for tag in MARKUP)
    for export, check in CHECKERS.items():
        for split in ("train", "validation"):
            for line in split_text(out / "exports" / export, split).splitlines():
                check(line)
    # the failed run (completed: false) is kept as a trajectory but not trained on
    sft_ids = {row["trajectory_id"] for row in sft}
    manifest = json.loads((out / "exports" / "sft" / "manifest.json").read_text())
    # 12 trajectories minus: the incomplete one; the one saved as completed whose final turn
    # is an API error; two whose last calls no tool answered (one of them answered only by a
    # late response, which is not moved next to its call); the one with an unparseable call
    # (excluded by default); and one whose conversation repeats another's exactly (the
    # batch-runner copy of a CLI row). Each row counts once, under the first rule it fails,
    # so the 0.0-reward batch rollout is among the above.
    assert manifest["excluded"] == {"not_completed": 1, "failure_saved_as_completed": 1, "unanswered_tool_calls": 2,
                                    "quality_flags": 1, "duplicate_content": 1}
    assert len(sft_ids) == 12 - 6
    # Hermes prompts become GRPO rows routed to the configured agent; supplied rewards make DPO pairs
    grpo = [row for split in ("train", "validation") for row in split_rows(out / "exports" / "grpo", split)]
    assert grpo and all(row["agent_ref"] == {"type": "responses_api_agents", "name": "hermes_agent"} for row in grpo)
    dpo = [row for split in ("train", "validation") for row in split_rows(out / "exports" / "dpo", split)]
    assert [(row["reward_chosen"], row["reward_rejected"]) for row in dpo] == [(1.0, 0.0)]


def test_quality_flags_work_as_sft_filters(tmp_path):
    source = hermes_folder(tmp_path / "in")
    config = tmp_path / "c.yaml"
    config.write_text("sft:\n  exclude_quality_flags: [unbalanced_think_tags, error_in_final_turn]\n")
    out = tmp_path / "out"
    assert main(["run", "--source", str(source), "--storage", str(out), "--config", str(config)]) == 0
    manifest = json.loads((out / "exports" / "sft" / "manifest.json").read_text())
    # the two flags catch 3 rows, one of them (the API error saved as completed) first caught by
    # require_completed; the configured list replaces the default, so the row with an
    # unparseable call is now kept: 12 - 1 incomplete - 1 failure - 2 unanswered - 2 flagged
    # - 1 duplicate
    assert manifest["excluded"]["failure_saved_as_completed"] == 1
    assert manifest["excluded"]["quality_flags"] == 2
    assert sum(manifest["rows"].values()) == 5
