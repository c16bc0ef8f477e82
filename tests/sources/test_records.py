"""Raw line -> parsed record, and rejection reasons for lines that are not rollouts."""

import json

import pytest

from tests.conftest import make_rollout
from trajectory_assets.sources import convert_record
from trajectory_assets.chat.trajectory import Rejection


def reason(raw: bytes) -> str:
    with pytest.raises(Rejection) as caught:
        convert_record(raw, source_id="s")
    return caught.value.reason


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"<PLACEHOLDER ROW>", "invalid_json"),
        (b'{"responses_create_params": {"input": "tr', "invalid_json"),
        (b"\xff\xfe{}", "invalid_utf8"),
        (b"[1, 2]", "not_an_object"),
        (b'"text"', "not_an_object"),
        (b'{"provenance_id": 1, "reward": 0.5}', "not_a_rollout"),
    ],
)
def test_lines_that_cannot_be_rollouts(raw, expected):
    assert reason(raw) == expected


def test_nan_reward_is_reported_as_non_finite_not_as_broken_json():
    raw = json.dumps(make_rollout(reward=float("nan"))).encode()
    assert b"NaN" in raw
    assert reason(raw) == "non_finite_reward"


def test_line_separators_inside_strings_stay_one_record():
    raw = json.dumps(make_rollout(request_input="a\u2028b\u0085c"), ensure_ascii=False).encode()
    trajectory = convert_record(raw, source_id="s")
    assert trajectory.messages[0]["content"] == "a\u2028b\u0085c"


def test_nan_and_infinity_outside_the_reward_are_counted_and_flagged():
    raw = json.dumps(make_rollout(judge_scores=[float("nan"), 1.0, float("inf")], margin=float("-inf"))).encode()
    trajectory = convert_record(raw, source_id="s")
    assert trajectory.non_finite_values == 3
    assert "non_finite_number" in trajectory.quality_flags
    clean = convert_record(json.dumps(make_rollout(judge_scores=[1.0])).encode(), source_id="s")
    assert (clean.non_finite_values, clean.quality_flags) == (0, [])


@pytest.mark.parametrize("failure_class, expected", [
    ("judge_failed", "ng_failure_judge_failed"),
    ("transient", "ng_failure_transient"),
    ("Remote Agent-Error", "ng_failure_remote_agent_error"),
])
def test_failed_attempts_are_never_samples_and_keep_their_class(failure_class, expected):
    # a row of <stem>_failures.jsonl: a whole rollout, with a reward, tagged by the collector
    row = make_rollout(reward=0.0, _ng_failure_class=failure_class, _ng_task_index=0, _ng_rollout_index=0)
    assert reason(json.dumps(row).encode()) == expected
    # also when the row holds no rollout at all
    assert reason(json.dumps({"_ng_failure_class": failure_class, "error": "boom"}).encode()) == expected
