"""Multi-objective rewards (``reward_components``) through the DPO and GRPO families."""

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import make_rollout, shared_data, message_item, trajectory_frame
from tests.exports.rendering import build
from trajectory_assets.chat.reward_components import dominates
from trajectory_assets.config import DpoConfig, GrpoConfig, SplitConfig

ALL_TRAIN = SplitConfig(validation_fraction=0.0)
MULTIREWARD = "corpus/nemo_gym/resources_servers__example_tool_call_multireward__example_rollouts.jsonl"


def scored(index, answer, **components):
    """A rollout of task ``index`` whose reward is the sum of its components (NeMo Gym's example)."""
    return make_rollout([message_item(answer)], request_input=f"task {index}", reward=float(sum(components.values())),
                        reward_components=components, _ng_task_index=index, agent_ref={"name": "agent"},
                        **components)


def rows_of(result):
    return [json.loads(line) for line in result.lines()]


def test_dominance_pairs_only_rollouts_at_least_as_good_on_every_objective():
    frame = trajectory_frame([
        scored(0, "best", correctness=1.0, format=1.0),
        scored(0, "right_but_unformatted", correctness=1.0, format=0.0),
        scored(0, "formatted_but_wrong", correctness=0.0, format=1.0),
        scored(0, "worst", correctness=0.0, format=0.0),
    ])
    result = build("dpo", frame, DpoConfig(pairing="dominance", max_pairs_per_task=10), ALL_TRAIN)
    answers = dict(zip(frame["trajectory_id"], ["best", "right_but_unformatted", "formatted_but_wrong", "worst"]))
    pairs = {(answers[row["chosen_id"]], answers[row["rejected_id"]]) for row in rows_of(result)}
    # 6 pairs of 4 rollouts: the two single-objective winners tie on the scalar, a tie as in
    # every pairing (not "not dominant", which would depend on which id sorts first)
    assert pairs == {("best", "right_but_unformatted"), ("best", "formatted_but_wrong"), ("best", "worst"),
                     ("right_but_unformatted", "worst"), ("formatted_but_wrong", "worst")}
    assert result.excluded == {"tied_rewards": 1}
    for row in rows_of(result):
        assert all(margin >= 0 for margin in row["component_margins"].values())
        assert any(margin > 0 for margin in row["component_margins"].values())
        assert row["pairing"] == "dominance"


def test_a_higher_scalar_reward_without_dominance_makes_no_dominance_pair():
    # correctness traded for two format points: the sum prefers the wrong answer
    frame = trajectory_frame([scored(0, "right", correctness=1.0, format=0.0),
                              scored(0, "wrong", correctness=0.0, format=2.0)])
    assert len(build("dpo", frame, DpoConfig(), ALL_TRAIN).rows) == 1  # best_vs_worst follows the scalar
    result = build("dpo", frame, DpoConfig(pairing="dominance"), ALL_TRAIN)
    assert result.rows.empty and result.excluded == {"not_dominant": 1}


def test_rollouts_scored_on_no_or_different_objectives_are_not_comparable():
    frame = trajectory_frame([
        scored(0, "a", correctness=1.0), scored(0, "b", format=0.0),  # different objectives
        make_rollout([message_item("c")], request_input="task 1", reward=1.0, _ng_task_index=1),
        make_rollout([message_item("d")], request_input="task 1", reward=0.0, _ng_task_index=1),
    ])
    result = build("dpo", frame, DpoConfig(pairing="dominance"), ALL_TRAIN)
    assert result.rows.empty and result.excluded == {"no_comparable_objectives": 2}


def test_every_preference_export_carries_the_component_margins():
    frame = trajectory_frame([scored(0, "good", correctness=1.0, format=1.0),
                              scored(0, "bad", correctness=0.0, format=1.0)])
    expected = {"correctness": 1.0, "format": 0.0}
    (dpo,) = rows_of(build("dpo", frame, DpoConfig(), ALL_TRAIN))
    assert dpo["component_margins"] == expected
    for name in ("trl_dpo", "nemo_rl_dpo"):
        (record,) = build(name, frame, DpoConfig(), ALL_TRAIN).records
        assert record["component_margins"] == expected, name


def test_pairs_without_components_say_so_with_null():
    frame = trajectory_frame([make_rollout([message_item(a)], reward=r, _ng_task_index=0)
                              for a, r in (("x", 1.0), ("y", 0.0))])
    (row,) = rows_of(build("dpo", frame, DpoConfig(), ALL_TRAIN))
    assert row["component_margins"] is None


def test_grpo_rows_summarize_each_objective_over_the_task_rollouts():
    frame = trajectory_frame([scored(0, "a", correctness=1.0, format=0.0), scored(0, "b", correctness=0.0, format=0.0),
                              scored(1, "c", correctness=1.0, format=1.0), scored(1, "d", correctness=1.0, format=0.0)])
    expected = [
        {"correctness": {"count": 2, "mean": 0.5, "std": 0.5}, "format": {"count": 2, "mean": 0.0, "std": 0.0}},
        {"correctness": {"count": 2, "mean": 1.0, "std": 0.0}, "format": {"count": 2, "mean": 0.5, "std": 0.5}},
    ]
    assert [row["reward_components"] for row in rows_of(build("grpo", frame, GrpoConfig(), ALL_TRAIN))] == expected
    assert [r["reward_components"] for r in build("trl_grpo", frame, GrpoConfig(), ALL_TRAIN).records] == expected
    verl = build("verl", frame, GrpoConfig(), ALL_TRAIN).records
    assert [record["extra_info"]["reward_components"] for record in verl] == expected


def test_the_multireward_corpus_file_reaches_every_task_export(tmp_path: Path):
    rows = [json.loads(line) for line in shared_data(MULTIREWARD).read_text().splitlines()]
    frame = trajectory_frame(rows)
    tasks = rows_of(build("grpo", frame, GrpoConfig(zero_variance_groups="keep"), ALL_TRAIN))
    assert len(tasks) == 5
    for task in tasks:
        assert task["reward_components"] == {"correctness": {"count": 1, "mean": 1.0, "std": 0.0},
                                             "schema_valid": {"count": 1, "mean": 1.0, "std": 0.0},
                                             "format": {"count": 1, "mean": 0.0, "std": 0.0}}


objective_scores = st.sampled_from([0.0, 0.5, 1.0])
components = st.fixed_dictionaries({"correctness": objective_scores, "format": objective_scores,
                                    "safety": objective_scores})


@settings(max_examples=40, deadline=None)
@given(st.lists(components, min_size=2, max_size=6))
def test_generated_groups_pair_exactly_the_dominating_rollouts(group):
    frame = trajectory_frame([scored(0, f"answer {i}", **c) for i, c in enumerate(group)])
    config = DpoConfig(pairing="dominance", min_margin=0.0, max_pairs_per_task=100)
    result = build("dpo", frame, config, ALL_TRAIN)
    by_id = dict(zip(frame["trajectory_id"], group))
    pairs = {(row["chosen_id"], row["rejected_id"]) for row in rows_of(result)}
    ids = list(frame.drop_duplicates("content_hash")["trajectory_id"])  # identical answers are de-duplicated
    expected = {(a, b) for a in ids for b in ids if dominates(by_id[a], by_id[b])}
    assert pairs == expected
    for row in rows_of(result):
        chosen, rejected = by_id[row["chosen_id"]], by_id[row["rejected_id"]]
        assert row["component_margins"] == {name: chosen[name] - rejected[name] for name in chosen}
