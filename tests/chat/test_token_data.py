"""Token data rows for on-policy distillation: NeMo RL's contiguity rule."""

import doctest
import enum
import math

import pytest

from trajectory_assets.chat import token_data
from trajectory_assets.chat.token_data import are_log_probs, are_token_ids, contiguous


def call(prompt, generation):
    return {"prompt_token_ids": prompt, "generation_token_ids": generation}


def test_each_call_must_extend_what_the_calls_before_it_saw_and_generated():
    assert contiguous([call([1, 2], [3]), call([1, 2, 3, 7], [8]), call([1, 2, 3, 7, 8, 9], [10])])
    # a history the harness rewrote (reasoning stripped, a truncated prompt) breaks it
    assert not contiguous([call([1, 2], [3, 4]), call([1, 2, 3], [8])])
    assert not contiguous([call([1, 2], [3]), call([2, 3], [4])])
    assert contiguous([call([5], [6])]) and contiguous([])


def test_the_documented_examples_hold():
    assert doctest.testmod(token_data).failed == 0


class Token(enum.IntEnum):  # an int that is not exactly an int: judged item by item
    ONE = 1


def item_by_item_ids(value):
    return isinstance(value, list) and all(
        isinstance(token, int) and not isinstance(token, bool) and 0 <= token < 2**31 for token in value)


def item_by_item_log_probs(value, length):
    return isinstance(value, list) and len(value) == length and all(
        isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) for p in value)


@pytest.mark.parametrize("value", [[], [0, 2**31 - 1], [2**31], [-1], [True], [1, False], [1.0], [1, None],
                                   [Token.ONE], ["1"], (1, 2), None])
def test_token_ids_are_judged_as_the_item_by_item_rule_judges_them(value):
    """A list of plain ints is checked in C-level passes; the verdict is the per-item rule's."""
    assert are_token_ids(value) is item_by_item_ids(value)


@pytest.mark.parametrize("value", [[], [-0.5, 0], [-0.5, math.nan], [-math.inf], [True], [-1.0, None], [Token.ONE],
                                   ["-1"], (-0.5,), None, [10**40]])
def test_log_probs_are_judged_as_the_item_by_item_rule_judges_them(value):
    for length in (0, 1, 2):
        assert are_log_probs(value, length) is item_by_item_log_probs(value, length)
