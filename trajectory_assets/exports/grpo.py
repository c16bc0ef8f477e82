"""``grpo``: one NeMo Gym RL input per task ``{responses_create_params, agent_ref}``, the
seed GRPO format: the row ``ng_prepare_data`` would write (the request to replay, the
verifier's inputs beside it, the agent that runs the task), plus a summary of the task's
collected rollouts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pyarrow as pa

from schemas.grpo import GrpoSchema
from trajectory_assets.chat.responses import read_request
from trajectory_assets.chat.token_data import TOKEN_KEYS
from trajectory_assets.exports.columns import FIELDS, TASK_LINEAGE, TASK_SUMMARY
from trajectory_assets.exports.export import Export, ReadBack
from trajectory_assets.exports.families.grpo import TaskItem
from trajectory_assets.exports.template import json_value
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.io.arrow_rows import JSON

SCHEMA = pa.schema([("responses_create_params", JSON), ("agent_ref", JSON), *TASK_SUMMARY])


def render(item: TaskItem) -> dict[str, Any]:
    task, payload = item.task, item.payload
    if payload.request is None:
        raise Unrepresentable("no_request")
    item.prompt  # the request replays the task's prompt: refused as every GRPO export refuses it
    # the row ng_prepare_data would write: the request, what the verifier was given beside it
    # (its keys vary by environment: the dataset card declares the ones the export holds), the agent
    return {"responses_create_params": without_token_data(orjson.loads(payload.request)), **item.task_inputs,
            "agent_ref": task.agent_ref, **item.summary}


def read_back(row: Mapping[str, Any]) -> ReadBack:
    """The task's prompt: the request's input read as a rollout's input is."""
    messages, tools = read_request(json_value(row["responses_create_params"]))
    return ReadBack(messages=messages, tools=tools)


def without_token_data(request: dict[str, Any]) -> dict[str, Any]:
    """The request with no token ids or log probs on its input items: a request whose prompt
    came from the output (a conversation recorded there) holds items a model server returned
    with them, and an RL input row replays text, not a past policy's tokens (the
    on_policy_tokens export keeps them).

    >>> without_token_data({"input": [{"role": "user", "content": "q", "prompt_token_ids": [1]}]})
    {'input': [{'role': 'user', 'content': 'q'}]}
    """
    items = request.get("input")
    if not isinstance(items, list) or not any(isinstance(i, dict) and i.keys() & set(TOKEN_KEYS) for i in items):
        return request
    return {**request, "input": [{k: v for k, v in i.items() if k not in TOKEN_KEYS} if isinstance(i, dict) else i
                                 for i in items]}


EXPORT = Export(
    name="grpo", family="grpo", render=render, read_back=read_back, contract=GrpoSchema, arrow_schema=SCHEMA,
    lineage={"responses_create_params": ["request"], **TASK_LINEAGE},
    fields={**FIELDS, "responses_create_params": "the request to replay (NeMo Gym's responses_create_params)"},
    description="One NeMo Gym RL input per task `{responses_create_params, agent_ref}` (the seed GRPO format).",
    measures=("mean_reward",),
)
