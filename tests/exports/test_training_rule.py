"""``sft.train_on`` through the SFT trainer forms: Axolotl carries it per message; TRL, NeMo RL
and LLaMA-Factory have one switch each, and leave out the rows it cannot reproduce."""

import pytest

from tests.conftest import make_rollout, message_item, trajectory_frame
from tests.exports.rendering import build
from tests.exports.test_families import tool_rollout
from tests.fixtures import hermes_rows as hermes
from trajectory_assets.config import SftConfig, SplitConfig
from trajectory_assets.exports.card import training_of
from trajectory_assets.exports.registry import EXPORTS_BY_NAME

ALL_TRAIN = SplitConfig(validation_fraction=0.0)


def rows():
    """One single-turn rollout, one with a tool call (two assistant turns), and a Hermes run
    whose middle was compressed into a summary standing as an assistant turn. Exported in the
    canonical order (by the buckets of their prompts): single-turn, compressed, tool call."""
    multi_turn = tool_rollout()
    compressed = hermes.cli_row([
        hermes.human("q"), hermes.gpt("<think>\n</think>\nlooking"), hermes.human("more"),
        hermes.gpt("<think>\n</think>\n[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted."),
        hermes.human("go on"), hermes.gpt("<think>\nok\n</think>\ndone")])
    return [make_rollout([message_item("Hi!")], reward=1.0), multi_turn, compressed]


def built(name, rule):
    config = SftConfig(train_on=rule, min_reward=None, exclude_summary_as_assistant=False)
    return build(name, trajectory_frame(rows()), config, ALL_TRAIN)


def flags(record):
    return [message["train"] for message in record["messages"]]


def test_axolotl_flags_the_messages_each_rule_picks():
    every = built("axolotl", "all_assistant").records
    assert [flags(r) for r in every] == [[False, True], [False, True, False, False, False, True],
                                         [False, True, False, True]]
    final = built("axolotl", "final_assistant").records
    assert [flags(r) for r in final] == [[False, True], [False, False, False, False, False, True],
                                         [False, False, False, True]]
    assert [flags(r) for r in built("axolotl", "after_last_user").records][1] == [False] * 5 + [True]


@pytest.mark.parametrize("rule, kept, cut", [
    ("all_assistant", 2, 1),  # the harness's assistant turn: every-assistant would train it
    ("final_assistant", 1, 2),  # TRL has no final-turn switch: only the single-turn row is what it trains
])
def test_trl_sft_keeps_the_rows_its_switch_reproduces(rule, kept, cut):
    result = built("trl_sft", rule)
    assert len(result.rows) == kept and result.excluded == {"needs_per_message_mask": cut}


def test_nemo_rl_and_llama_factory_train_the_final_turn_with_their_own_switch():
    for name in ("nemo_rl_sft", "llama_factory"):
        assert built(name, "final_assistant").excluded.get("needs_per_message_mask", 0) == 0, name
        assert built(name, "all_assistant").excluded["needs_per_message_mask"] == 1, name


def test_the_default_rule_changes_nothing_for_runs_without_harness_turns():
    frame = trajectory_frame(rows()[:2])
    for name in ("trl_sft", "nemo_rl_sft", "llama_factory"):
        assert build(name, frame, SftConfig(min_reward=None), ALL_TRAIN).excluded == {}, name


def test_each_card_names_the_setting_that_reproduces_the_rule():
    manifest = {"config": {"sft": {"train_on": "final_assistant"}}}
    assert "only_unmask_final: true" in training_of(EXPORTS_BY_NAME["nemo_rl_sft"], manifest)
    assert "mask_history: true" in training_of(EXPORTS_BY_NAME["llama_factory"], manifest)
    assert "assistant_only_loss=True" in training_of(EXPORTS_BY_NAME["trl_sft"], manifest)
    assert "message_field_training: train" in training_of(EXPORTS_BY_NAME["axolotl"], manifest)
    assert training_of(EXPORTS_BY_NAME["sft"], manifest) is None  # the seed format names no trainer


def test_a_row_with_nothing_to_train_is_left_out_of_axolotl():
    only_harness = hermes.cli_row([hermes.human("q"), hermes.gpt(
        "<think>\n</think>\n[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted.")])
    result = build("axolotl", trajectory_frame([only_harness]),
                   SftConfig(min_reward=None, exclude_summary_as_assistant=False), ALL_TRAIN)
    assert result.rows.empty and result.excluded == {"nothing_to_train": 1}


def atif_continuation():
    """An ATIF segment that replays an earlier segment's turns (``is_copied_context``) before its own."""
    return {"schema_version": "ATIF-v1.7", "session_id": "s1", "agent": {"name": "terminus-2", "version": "2.0.0"},
            "steps": [
                {"step_id": 1, "source": "user", "message": "Create hello.txt", "is_copied_context": True},
                {"step_id": 2, "source": "agent", "message": "I will write it.", "is_copied_context": True},
                {"step_id": 3, "source": "user", "message": "Continue."},
                {"step_id": 4, "source": "agent", "message": "Done: hello.txt exists."}]}


def test_messages_a_source_lists_as_not_the_policys_are_no_targets():
    frame = trajectory_frame([atif_continuation()])
    (record,) = build("axolotl", frame, SftConfig(min_reward=None), ALL_TRAIN).records
    assert [(m["content"], m["train"]) for m in record["messages"] if m["role"] == "assistant"] == [
        ("I will write it.", False), ("Done: hello.txt exists.", True)]
    # every-assistant switches would train the copied turn: the row is left out of them
    assert build("trl_sft", frame, SftConfig(min_reward=None), ALL_TRAIN).excluded == {"needs_per_message_mask": 1}
