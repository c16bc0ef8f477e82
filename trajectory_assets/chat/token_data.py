"""NeMo Gym's token data as rows for on-policy distillation (and any token-level trainer).

A rollout served by NeMo Gym with token capture records, for every model call, the token
ids of the prompt it was given, the ids it generated and their log probabilities under the
policy that generated them (``prompt_token_ids``, ``generation_token_ids``,
``generation_log_probs`` on the call's last output item). NeMo RL reads them
(``nemo_rl/environments/nemo_gym.py``): each call's prompt must start with everything the
earlier calls saw and generated, or the sequence cannot be trained as one (it asserts so).
Distillation needs exactly this: the student's sampled tokens, and its own log probs for
the importance weights, to be scored by a teacher.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

# the keys NeMo Gym records a model call's token data under, on its output items
TOKEN_KEYS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
# per model call, as the trajectory table keeps it (``token_data``): Arrow lists, never JSON text
TOKEN_DATA_TYPE = pa.list_(
    pa.struct(
        [
            ("message_index", pa.int32()),  # the assistant message the call produced
            ("prompt_token_ids", pa.list_(pa.int32())),
            ("generation_token_ids", pa.list_(pa.int32())),
            ("generation_log_probs", pa.list_(pa.float64())),
        ]
    )
)

# the exact types a list of token ids / log probabilities holds when a JSON parser made it:
# such lists are checked with C-level passes (a token list is thousands long), others item by item
_INT = frozenset({int})
_NUMBER = frozenset({int, float})


def are_token_ids(value: Any) -> bool:
    """A list of token ids as a model server records them (int32 range: how the table stores them).

    >>> are_token_ids([1, 2, 3]), are_token_ids([1, True]), are_token_ids([2**31])
    (True, False, False)
    """
    if not isinstance(value, list):
        return False
    if set(map(type, value)) <= _INT:  # plain ints, what a JSON parser makes: checked at C speed
        return not value or (min(value) >= 0 and max(value) < 2**31)
    return all(isinstance(token, int) and not isinstance(token, bool) and 0 <= token < 2**31 for token in value)


def are_log_probs(value: Any, length: int) -> bool:
    """One finite log probability per generated token.

    >>> are_log_probs([-0.5, 0], 2), are_log_probs([-0.5], 2), are_log_probs([float("nan")], 1)
    (True, False, False)
    """
    if not isinstance(value, list) or len(value) != length:
        return False
    if set(map(type, value)) <= _NUMBER:  # plain floats and ints: checked at C speed
        return all(map(math.isfinite, value))
    return all(isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) for p in value)


def token_calls(token_data: Any) -> list[dict[str, Any]]:
    """The model calls of a trajectory's ``token_data`` column as plain lists (a Parquet
    read gives NumPy arrays)."""
    return [{key: value.tolist() if hasattr(value, "tolist") else value for key, value in call.items()}
            for call in token_data]


def contiguous(calls: list[dict[str, Any]]) -> bool:
    """Whether every call's prompt starts with all the tokens the calls before it saw and
    generated: NeMo RL's condition for training the calls as one sequence.

    >>> contiguous([{"prompt_token_ids": [1, 2], "generation_token_ids": [3]},
    ...             {"prompt_token_ids": [1, 2, 3, 4], "generation_token_ids": [5]}])
    True
    >>> contiguous([{"prompt_token_ids": [1, 2], "generation_token_ids": [3]},
    ...             {"prompt_token_ids": [1, 9, 3, 4], "generation_token_ids": [5]}])
    False
    """
    seen: list[int] = []
    for call in calls:
        prompt = call["prompt_token_ids"]
        if prompt[: len(seen)] != seen:
            return False
        seen = prompt + call["generation_token_ids"]
    return True
