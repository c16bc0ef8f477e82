"""Each curation knob changes exactly what config.example.yaml says it does."""

import json
import random
from collections import Counter

import pandas as pd
import pytest

from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from tests.exports.rendering import build
from trajectory_assets.config import ConfigError, SftConfig, SplitConfig, load_config
from trajectory_assets.exports.curation import balance, filter_trajectories, near_duplicates, rank
from trajectory_assets.ingest.near_signatures import signature

ALL_TRAIN = SplitConfig(validation_fraction=0.0)
NO_FILTERS = dict(min_reward=None, exclude_unanswered_tool_calls=False, dedup="none")


def kept_answers(frame, config):
    return [json.loads(line)["messages"][-1]["content"] for line in build("sft", frame, config, ALL_TRAIN).lines()]


def turns(n, answer="done", **extra):
    """A rollout with n assistant turns (n-1 tool calls, then the answer)."""
    output = []
    for i in range(n - 1):
        output += [call_item("f", "{}", f"c{i}"), output_item(f"c{i}", "ok")]
    return make_rollout(output + [message_item(answer)], request_input=f"q {answer}", **extra)


def test_turn_limits_count_assistant_turns():
    frame = trajectory_frame([turns(1, "one"), turns(2, "two"), turns(4, "four")])
    result = build("sft", frame, SftConfig(min_turns=2, max_turns=3, **NO_FILTERS), ALL_TRAIN)
    assert kept_answers(frame, SftConfig(min_turns=2, max_turns=3, **NO_FILTERS)) == ["two"]
    assert result.excluded == {"too_few_turns": 1, "too_many_turns": 1}


def test_max_tokens_uses_recorded_usage_and_passes_rows_without_it():
    with_usage = turns(1, "big")
    with_usage["response"]["usage"] = {"input_tokens": 900, "output_tokens": 200, "total_tokens": 1100}
    small = turns(1, "small")
    small["response"]["usage"] = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    frame = trajectory_frame([with_usage, small, turns(1, "unknown")])
    assert kept_answers(frame, SftConfig(max_tokens=1000, **NO_FILTERS)) == ["small", "unknown"]


def test_max_chars_bounds_the_conversation_length():
    frame = trajectory_frame([turns(1, "short"), turns(1, "long " * 200)])
    assert kept_answers(frame, SftConfig(max_chars=400, **NO_FILTERS)) == ["short"]


def test_tool_error_rate_uses_the_batch_runner_failure_rule():
    def calls(answer, results):
        output = []
        for i, result in enumerate(results):
            output += [call_item("f", "{}", f"c{i}"), output_item(f"c{i}", result)]
        return make_rollout(output + [message_item(answer)], request_input=answer)

    frame = trajectory_frame([
        calls("clean", ['{"ok": 1}', "fine"]),
        calls("half", ['{"error": "boom"}', "fine"]),
        calls("all", ["Error: denied", '{"success": false}']),
        turns(1, "no tools"),
    ])
    result = build("sft", frame, SftConfig(max_tool_error_rate=0.5, **NO_FILTERS), ALL_TRAIN)
    assert sorted(json.loads(x)["messages"][-1]["content"] for x in result.lines()) == ["clean", "half", "no tools"]
    assert result.excluded == {"tool_error_rate": 1}
    assert list(frame["tool_errors"]) == [0, 1, 2, 0] and list(frame["tool_results"]) == [2, 2, 2, 0]


def test_exact_dedup_keeps_the_first_of_identical_conversations_whatever_their_reward():
    rows = [turns(1, "same", reward=1.0), turns(1, "same", reward=0.7), turns(1, "other")]
    frame = trajectory_frame(rows)
    deduped = build("sft", frame, SftConfig(min_reward=None), ALL_TRAIN)
    assert len(deduped.rows) == 2 and deduped.excluded == {"duplicate_content": 1}
    assert json.loads(deduped.lines()[0])["reward"] == 1.0  # the first in table order
    assert len(build("sft", frame, SftConfig(min_reward=None, dedup="none"), ALL_TRAIN).rows) == 3


def test_near_dedup_drops_a_conversation_that_differs_by_one_word():
    text = " ".join(f"word{i}" for i in range(300))
    rows = [turns(1, text), turns(1, text.replace("word150", "changed")), turns(1, "something else entirely")]
    frame = trajectory_frame(rows)
    # the prompts differ ("q <answer>"), so exact dedup alone keeps all three
    assert len(build("sft", frame, SftConfig(min_reward=None, dedup="exact"), ALL_TRAIN).rows) == 3
    near = build("sft", frame, SftConfig(min_reward=None, dedup="near"), ALL_TRAIN)
    assert len(near.rows) == 2 and near.excluded == {"near_duplicate": 1}
    strict = build("sft", frame, SftConfig(min_reward=None, dedup="near", near_duplicate_threshold=1.0), ALL_TRAIN)
    assert len(strict.rows) == 3


def test_near_duplicates_keeps_the_first_of_a_group_in_order():
    base = " ".join(f"w{i}" for i in range(200))
    payloads = [("a", json.dumps([{"role": "user", "content": base}])),
                ("b", json.dumps([{"role": "user", "content": base + " w_extra"}])),
                ("c", json.dumps([{"role": "user", "content": "unrelated text " * 30}]))]
    signatures = [(trajectory_id, signature(messages)) for trajectory_id, messages in payloads]
    assert near_duplicates(signatures, 0.8) == {"b"}
    assert near_duplicates(list(reversed(signatures)), 0.8) == {"a"}


def test_cap_per_task_type_is_exact_and_independent_of_row_order():
    rows = [turns(1, f"a{i}", metadata={"task_type": "math"}) for i in range(10)]
    rows += [turns(1, f"b{i}", metadata={"task_type": "code"}) for i in range(3)]
    config = SftConfig(max_per_task_type=4, **NO_FILTERS)
    result = build("sft", trajectory_frame(rows), config, ALL_TRAIN)
    types = [json.loads(line)["task_type"] for line in result.lines()]
    assert types.count("math") == 4 and types.count("code") == 3
    assert result.excluded == {"task_type_cap": 6}
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    again = build("sft", trajectory_frame(shuffled), config, ALL_TRAIN)
    assert set(again.rows["trajectory_id"]) == set(result.rows["trajectory_id"])


def test_sampling_is_deterministic_and_follows_the_fraction():
    frame = trajectory_frame([turns(1, f"answer {i}") for i in range(400)])
    config = SftConfig(sample_fraction=0.25, **NO_FILTERS)
    first = build("sft", frame, config, ALL_TRAIN)
    assert list(first.rows["trajectory_id"]) == list(build("sft", frame, config, ALL_TRAIN).rows["trajectory_id"])
    assert 70 <= len(first.rows) <= 130 and first.excluded["sampled_out"] == 400 - len(first.rows)
    other_seed = build("sft", frame, SftConfig(sample_fraction=0.25, seed="other", **NO_FILTERS), ALL_TRAIN)
    assert set(other_seed.rows["trajectory_id"]) != set(first.rows["trajectory_id"])


def test_balance_keeps_original_order():
    units = pd.DataFrame({"id": [f"u{i}" for i in range(50)], "task_type": ["t"] * 50})
    kept = balance(units, SftConfig(max_per_task_type=10), "id", excluded=Counter())
    assert list(kept.index) == sorted(kept.index) and len(kept) == 10
    assert set(kept["id"]) == set(units.loc[rank(units["id"], "trajectory-assets").nsmallest(10).index, "id"])


def test_filters_count_each_row_under_its_first_failed_rule_only():
    incomplete = turns(1, "x", reward=0.0)
    incomplete["response"]["status"] = "incomplete"
    frame = trajectory_frame([incomplete])
    _, excluded = filter_trajectories(frame, SftConfig())
    assert excluded == {"not_completed": 1}


def test_invalid_curation_config_names_the_field(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sft:\n  min_turns: 5\n  max_turns: 2\n")
    with pytest.raises(ConfigError, match="min_turns .5. is greater than max_turns .2."):
        load_config(path)
    path.write_text("dpo:\n  pairing: random\n")
    with pytest.raises(ConfigError, match="dpo.pairing"):
        load_config(path)
    path.write_text("grpo:\n  zero_variance_groups: maybe\n")
    with pytest.raises(ConfigError, match="grpo.zero_variance_groups"):
        load_config(path)


def test_config_example_lists_every_key_with_its_default():
    """config.example.yaml is the documentation of the knobs: it must match the code."""
    from pathlib import Path

    import yaml

    from trajectory_assets.config import PipelineConfig

    example = yaml.safe_load((Path(__file__).parents[2] / "config.example.yaml").read_text())
    assert example == PipelineConfig().model_dump()
