"""``on_policy_tokens``: the SFT trajectories at the token level, for on-policy distillation
(and any token-level trainer): per model call the prompt's and the generation's token ids
and the policy's log probabilities, as NeMo Gym recorded them (``chat/token_data.py``).
``contiguous``: every call's prompt extends the tokens before it, as NeMo RL needs to train
the calls as one sequence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import pyarrow as pa

from schemas.token_data import TokensSchema
from trajectory_assets.chat.token_data import TOKEN_DATA_TYPE, contiguous, token_calls
from trajectory_assets.exports.columns import FIELDS
from trajectory_assets.exports.export import FLAVORS_GROUP, Export, ReadBack
from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.exports.unrepresentable import Unrepresentable

SCHEMA = pa.schema([
    ("trajectory_id", pa.string()),
    ("task_key", pa.string()),
    ("reward", pa.float64()),
    ("model", pa.string()),
    ("calls", TOKEN_DATA_TYPE),
    ("contiguous", pa.bool_()),
])


def render(item: SftItem) -> dict[str, Any]:
    row = item.row
    if row.mask_sample:
        # NeMo Gym masks a rollout whose token capture was incomplete or ambiguous, and NeMo RL
        # drops it from the loss: whatever the SFT curation keeps, its tokens are not trained on
        raise Unrepresentable("mask_sample")
    if row.token_data is None or len(row.token_data) == 0:
        raise Unrepresentable("no_token_data")  # served without token capture
    calls = token_calls(row.token_data)
    if item.cut_short:  # cut to the token budget at a turn boundary: the calls of the messages kept
        calls = [call for call in calls if call["message_index"] < len(item.messages)]
        if not calls:
            raise Unrepresentable("no_token_data")
    reward = None if pd.isna(row.reward) else row.reward
    return {"trajectory_id": row.trajectory_id, "task_key": row.task_key, "reward": reward, "model": row.model,
            "calls": calls, "contiguous": contiguous(calls)}


def read_back(row: Mapping[str, Any]) -> ReadBack:
    """The model calls' token data (a token row holds no text)."""
    return ReadBack(calls=token_calls(row["calls"]))


EXPORT = Export(
    name="on_policy_tokens", family="sft", render=render, read_back=read_back, contract=TokensSchema,
    arrow_schema=SCHEMA,
    lineage={"calls": ["token_data"], "contiguous": ["token_data"], "reward": ["reward"], "model": ["model"],
             "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
    fields={**FIELDS,
            "model": "the model that generated the tokens",
            "calls": "per model call: its message's index, the prompt's and the generation's token ids, and the log "
                     "probability of each generated token",
            "contiguous": "whether every call's prompt extends all the tokens before it"},
    description="The SFT trajectories at the token level, for on-policy distillation: per model call the prompt's "
                "and the generation's token ids and the policy's log probabilities, as NeMo Gym recorded them "
                "(`contiguous`: every call extends the tokens before it, as NeMo RL needs).",
    group=FLAVORS_GROUP, file_format="parquet", measures=("generated_tokens", "calls"),
    columns=("token_data", "model", "mask_sample"),
)
