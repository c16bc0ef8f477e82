"""The flags producers write on a run (did it complete, was it verified, may it be trained on,
was it compressed) through curation: each one left out where it must be, under its own reason."""

from tests.conftest import make_rollout, message_item, trajectory_frame
from tests.exports.rendering import build
from tests.exports.test_families import tool_rollout
from tests.fixtures import hermes_rows as hermes
from trajectory_assets.config import DpoConfig, GrpoConfig, SftConfig, SplitConfig

ALL_TRAIN = SplitConfig(validation_fraction=0.0)
HANDOFF = "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary below."


def hermes_run(answer="<think>\nx\n</think>\nThe answer is 4.", question="2+2?", **extra):
    return hermes.cli_row([hermes.human(question), hermes.gpt(answer)], **extra)


def test_runs_that_did_not_really_complete_leave_sft_each_under_its_reason():
    frame = trajectory_frame([
        hermes_run(),
        hermes_run(question="a", completed=False, partial=True),
        hermes_run(question="b", completed=False),
        hermes_run(answer="<think>\n</think>\n(empty)", question="c"),
        hermes_run(answer="<think>\n</think>\nI apologize, but I encountered repeated errors: Error code: 500",
                   question="d"),
    ])
    result = build("sft", frame, SftConfig(), ALL_TRAIN)
    assert len(result.rows) == 1
    assert result.excluded == {"partial_run": 1, "not_completed": 1, "failure_saved_as_completed": 2}
    # every run stays in the trajectory table, and the switch keeps them all
    assert len(frame) == 5 and len(build("sft", frame, SftConfig(require_completed=False), ALL_TRAIN).rows) == 5


def test_a_skipped_verification_has_no_reward_to_pass_a_reward_filter():
    frame = trajectory_frame([make_rollout([message_item("x")], reward=1.0, verification_skipped=True),
                              make_rollout([message_item("y")], reward=1.0)])
    result = build("sft", frame, SftConfig(), ALL_TRAIN)  # min_reward 0.5
    assert len(result.rows) == 1 and result.excluded == {"verification_skipped": 1}
    assert len(build("sft", frame, SftConfig(min_reward=None), ALL_TRAIN).rows) == 2  # no reward filter, no reason


def test_a_skipped_verification_is_never_paired_as_a_zero_reward():
    frame = trajectory_frame([make_rollout([message_item(a)], reward=r, _ng_task_index=0, **extra)
                              for a, r, extra in (("x", 1.0, {}), ("y", 0.0, {"verification_skipped": True}),
                                                  ("z", 0.0, {}))])
    result = build("dpo", frame, DpoConfig(), ALL_TRAIN)
    assert len(result.rows) == 1 and result.excluded == {"verification_skipped": 1}
    (row,) = build("dpo", frame, DpoConfig(), ALL_TRAIN).records
    rewards = dict(zip(frame["trajectory_id"], ["x", "y", "z"]))
    assert rewards[row["rejected_id"]] == "z"


def test_grpo_statistics_leave_out_a_placeholder_reward():
    frame = trajectory_frame([make_rollout([message_item(a)], reward=r, _ng_task_index=0, agent_ref={"name": "a"},
                                           **extra)
                              for a, r, extra in (("x", 1.0, {}), ("y", 0.0, {"verification_skipped": True}))])
    (row,) = build("grpo", frame, GrpoConfig(), ALL_TRAIN).records
    assert row["num_rollouts"] == 2 and row["mean_reward"] == 1.0 and row["pass_rate"] == 1.0


def test_masked_token_captures_never_reach_on_policy_tokens():
    unmasked = tool_rollout()
    unmasked["responses_create_params"]["input"] = "Another question."
    frame = trajectory_frame([tool_rollout(mask_sample=True), unmasked])
    # even when the SFT curation is told to keep masked rollouts
    result = build("on_policy_tokens", frame, SftConfig(exclude_mask_sample=False), ALL_TRAIN)
    assert len(result.rows) == 1 and result.excluded == {"mask_sample": 1}
    assert len(build("trl_sft", frame, SftConfig(exclude_mask_sample=False), ALL_TRAIN).rows) == 2


def test_a_summary_standing_as_an_assistant_turn_is_no_sft_target():
    frame = trajectory_frame([
        hermes.cli_row([hermes.human("q"), hermes.gpt("<think>\n</think>\n" + HANDOFF), hermes.human("go on"),
                        hermes.gpt("<think>\nok\n</think>\ndone")]),
        hermes.compressed_run(),  # a summary as a user turn: context, trained on as such
    ])
    result = build("sft", frame, SftConfig(), ALL_TRAIN)
    assert len(result.rows) == 1 and result.excluded == {"context_summary_as_assistant": 1}


def test_a_summary_is_never_a_dpo_or_grpo_prompt():
    # a live compaction that left no user turn: the first user turn is the harness's
    rows = [hermes.cli_row([hermes.human(HANDOFF), hermes.gpt(f"<think>\nx\n</think>\n{answer}")],
                           metadata={"reward": reward})
            for answer, reward in (("good", 1.0), ("bad", 0.0))]
    frame = trajectory_frame(rows)
    assert build("dpo", frame, DpoConfig(), ALL_TRAIN).excluded == {"context_summary_in_prompt": 1}
    for name in ("grpo", "trl_grpo", "verl"):
        result = build(name, frame, GrpoConfig(zero_variance_groups="keep"), ALL_TRAIN)
        assert result.rows.empty and result.excluded == {"context_summary_in_prompt": 1}, name
