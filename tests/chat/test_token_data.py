"""Token data rows for on-policy distillation: NeMo RL's contiguity rule."""

import doctest

from trajectory_assets.chat import token_data
from trajectory_assets.chat.token_data import contiguous


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
