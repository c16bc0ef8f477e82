"""A Harbor job whose trials' results name no tool call (``source_call_id``), through the CLI:
each agent's passing trial reaches the SFT family with every call answered, the pass and the
failure of a task make a DPO pair, and each task a GRPO row. The trials: mini-swe-agent's text
protocol and terminus-2's keystroke batch (built from Harbor's converters,
``tests/fixtures/atif/built/README.md``), terminus-2's real golden file of single commands
before harbor#2087, and swe-agent's one call and one result per step."""

import json

import pyarrow.parquet as pq

from tests.split_files import split_text
from tests.fixtures.harbor_jobs import text_protocol_job
from trajectory_assets.chat.messages import unanswered_tool_calls
from trajectory_assets.cli import main


def rows_of(folder):
    return [json.loads(line) for split in ("train", "validation")
            for line in split_text(folder, split).splitlines()]


def test_trials_without_call_ids_reach_sft_dpo_and_grpo(tmp_path):
    jobs = text_protocol_job(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("grpo:\n  atif_agent_ref: terminal_agent\n")
    out = tmp_path / "out"
    assert main(["run", "--source", str(jobs), "--storage", str(out), "--exports", "sft,dpo,grpo",
                 "--config", str(config)]) == 0
    trajectories = {row["trajectory_id"]: row for path in (out / "trajectories" / "batches").glob("*.parquet")
                    for row in pq.read_table(path).to_pylist()}
    assert len(trajectories) == 8 and all(row["unanswered_tool_calls"] == 0 for row in trajectories.values())
    sft = rows_of(out / "exports" / "sft")
    assert sorted(trajectories[row["trajectory_id"]]["rollout_id"] for row in sft) == [
        "hello-msa__msa0000", "hello-swe__swe0000", "hello-t2b__t2b0000", "hello-t2t__t2t0000"]
    assert all(unanswered_tool_calls(row["messages"]) == 0 for row in sft)
    assert len(rows_of(out / "exports" / "dpo")) == 4  # one pair per task: its pass against its failure
    assert len(rows_of(out / "exports" / "grpo")) == 4
    # every observation's text is in the conversation
    for row in trajectories.values():
        trial = json.loads(row["metadata"])["harbor"]["record"]
        steps = json.loads((jobs / "2026-09-01__08-00-00" / trial / "agent" / "trajectory.json").read_text())["steps"]
        texts = [m["content"] for m in json.loads(row["messages"]) if m["role"] in ("tool", "user")]
        results = [r["content"] for step in steps for r in (step.get("observation") or {}).get("results", [])
                   if r.get("content") is not None]
        assert all(result in texts for result in results), trial
