"""What the report aggregates and samples: exact over every row, bounded in what it keeps."""

import numpy as np
import orjson
import pandas as pd

from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from trajectory_assets.exports.families.frames import FrameTable
from trajectory_assets.exports.export_scan import ExportScan
from trajectory_assets.report.report_data import (
    MAX_GROUPS,
    QuarantineExamples,
    dpo_margins,
    export_lengths,
    failing_tasks,
    grpo_spread,
    histogram,
    message_facts,
    pass_rate_buckets,
    reward_by_group,
)


def scan_of(name, family, rows, samples=2, seed="s"):
    scan = ExportScan(name, family, samples, seed)
    for position, row in enumerate(rows):
        scan.add("train", position, row)
    return scan


def test_samples_are_seeded_and_the_same_trajectories_across_a_family():
    ids = [f"t{i}" for i in range(50)]
    sft = scan_of("sft", "sft", [{"trajectory_id": i} for i in ids], samples=3)
    # another flavor of the family: other row shape, rows in another order, one row missing
    hermes = scan_of("sft_hermes", "sft", [{"conversations": [], "trajectory_id": i} for i in reversed(ids[1:])],
                     samples=3)
    def picked(scan):
        return [row["trajectory_id"] for _, _, row in scan.picked()]

    assert len(picked(sft)) == 3 and picked(sft) == picked(scan_of("sft", "sft", [{"trajectory_id": i} for i in ids],
                                                                   samples=3))
    # the order of the rows does not matter, only their ids
    assert picked(hermes) == picked(scan_of("sft", "sft", [{"trajectory_id": i} for i in ids[1:]], samples=3))
    assert [position for _, position, _ in hermes.picked()] == [48 - ids.index(i) + 1 for i in picked(hermes)]
    other_seed = [row["trajectory_id"] for _, _, row in scan_of(
        "sft", "sft", [{"trajectory_id": i} for i in ids], samples=3, seed="other").picked()]
    assert other_seed != picked(sft)
    assert scan_of("sft", "sft", [{"trajectory_id": i} for i in ids], samples=0).picked() == []


def test_a_scan_collects_ids_pairs_and_tasks():
    dpo = scan_of("dpo", "dpo", [{"chosen_id": "a", "rejected_id": "b", "quality_difference": 0.5},
                                 {"chosen_id": "c", "rejected_id": "d"}])
    assert dpo.trajectory_ids == {"a", "b", "c", "d"} and dpo.pairs == {("a", "b"): 0.5, ("c", "d"): None}
    verl = scan_of("verl", "grpo", [{"extra_info": {"task_key": "k", "trajectory_ids": ["a", "b"]}}])
    assert verl.tasks == {"k": ("a", "b")} and verl.rows == {"train": 1}


def frame():
    rows = [make_rollout([call_item("f", "{}", "c"), output_item("c", "error: no"), message_item("x")],
                         request_input="t0", reward=0.0, _ng_task_index=0, _ng_rollout_index=0,
                         agent_ref={"name": "a1"}),
            make_rollout(request_input="t0", reward=0.0, _ng_task_index=0, _ng_rollout_index=1,
                         agent_ref={"name": "a1"}),
            make_rollout(request_input="t1", reward=1.0, _ng_task_index=1, agent_ref={"name": "a2"},
                         response={"status": "completed", "output": [message_item("y")],
                                   "usage": {"total_tokens": 40}})]
    return trajectory_frame(rows)


def test_histograms_give_discrete_rewards_a_bar_each_and_bin_continuous_ones():
    discrete = histogram(np.array([0.0, 1.0, 1.0, 0.5]))
    assert discrete["value"].tolist() == [0.0, 0.5, 1.0] and discrete["count"].tolist() == [1, 1, 2]
    assert (discrete["start"] < discrete["value"]).all() and (discrete["value"] < discrete["end"]).all()
    continuous = histogram(np.linspace(0, 1, 1000))
    assert len(continuous) == 20 and continuous["count"].sum() == 1000
    assert histogram(np.array([np.nan])).empty


def test_reward_groups_are_bounded():
    many = pd.DataFrame({"reward": np.arange(40.0) % 3, "agent_name": [f"a{i}" for i in range(40)],
                         "source_format": "nemo_gym"})
    groups = reward_by_group(many)["group"].unique()
    assert len(groups) == MAX_GROUPS and "(other)" in groups


def test_pass_rate_buckets_and_tasks_that_never_pass():
    tasks = [{"task_key": "a", "rollouts": 4, "passes": 0}, {"task_key": "b", "rollouts": 2, "passes": 0},
             {"task_key": "c", "rollouts": 4, "passes": 1}, {"task_key": "d", "rollouts": 3, "passes": 3},
             {"task_key": "e", "rollouts": 4, "passes": 3}]
    buckets = dict(zip(*pass_rate_buckets(tasks).to_dict("list").values()))
    assert buckets == {"never passes": 2, "0–25%": 0, "25–50%": 1, "50–75%": 0, "75–<100%": 1,
                       "always passes": 1}
    assert [task["task_key"] for task in failing_tasks(tasks)] == ["a", "b"]  # most tried first


def test_lengths_margins_and_spread_come_from_the_referenced_trajectories():
    trajectories = frame()
    ids = trajectories["trajectory_id"].tolist()
    sft = scan_of("sft", "sft", [{"trajectory_id": ids[2]}])
    grpo = scan_of("grpo", "grpo", [{"task_key": "t0", "trajectory_ids": ids[:2]},
                                    {"task_key": "t1", "trajectory_ids": ids[2:]}])
    lengths = export_lengths([sft, grpo], trajectories).set_index(["export", "measure"])
    assert lengths.loc[("sft", "tokens"), "max"] == 40 and lengths.loc[("sft", "tokens"), "trajectories"] == 1
    assert lengths.loc[("grpo", "assistant turns"), "trajectories"] == 3
    dpo = scan_of("dpo", "dpo", [{"chosen_id": ids[2], "rejected_id": ids[0]}])
    trl = scan_of("trl_dpo", "dpo", [{"chosen_id": ids[2], "rejected_id": ids[0], "quality_difference": 1.0}])
    margins = dpo_margins([dpo, trl], trajectories)  # one pair in two flavors counts once
    assert margins[["value", "count"]].values.tolist() == [[1.0, 1]]
    spread = grpo_spread([grpo], trajectories, seed="s")
    assert spread.total_tasks == 2 and spread.std["count"].sum() == 2
    assert sorted(spread.tasks["rollouts"]) == [1, 2]


def test_message_facts_count_tool_errors_per_tool_and_keep_wanted_prompts():
    frame = trajectory_frame([
        make_rollout([call_item("f", "{}", "c"), output_item("c", "error: no"), message_item("x")],
                     request_input="find it"),
        make_rollout([call_item("f", "{}", "c"), output_item("c", '{"ok": true}'), call_item("g", "{}", "d"),
                      output_item("d", ""), message_item("y")], request_input="other"),
        make_rollout([message_item("no tools")], request_input="third"),
    ])
    first = frame["trajectory_id"][0]
    facts = message_facts(FrameTable(frame), frame, {first})
    assert facts.tools() == {"f": {"calls": 2, "failures": 1, "failure_rate": 0.5},
                             "g": {"calls": 1, "failures": 1, "failure_rate": 1.0}}  # an empty result failed
    assert facts.tools("hermes") == {} and facts.prompts == {first: "find it"}


def test_quarantine_examples_are_few_per_reason_cut_and_stop_early():
    lines = b"".join(orjson.dumps({"source": "s", "line": i, "reason": "invalid_json" if i % 2 else "not_a_rollout",
                                   "detail": "d", "raw": "x" * 5000}) + b"\n" for i in range(10))
    examples = QuarantineExamples(2, {"invalid_json": 5, "not_a_rollout": 5})
    examples.add_lines(lines)
    assert {reason: len(kept) for reason, kept in examples.examples.items()} == {"not_a_rollout": 2, "invalid_json": 2}
    assert examples.complete and examples.examples["invalid_json"][0]["raw"].hidden == 5000 - 1500
    examples.add_lines(b"not even json\n")  # complete: nothing more is read
