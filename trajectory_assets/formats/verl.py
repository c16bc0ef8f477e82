"""Canonical prompts -> verl RL Parquet rows.

verl reads ``data_source``, ``prompt`` (chat messages), ``ability``, ``reward_model
{style, ground_truth}`` and ``extra_info {split, index, ...}``. Parquet needs one type per
column, and inferring it row by row breaks as soon as two rows differ (a tool call in one
prompt, none in the other; a ground truth here, null there). So rows are built to match
:data:`VERL_ARROW_SCHEMA` exactly: messages are ``text_chat.text_messages`` (content always
a string, Arrow type ``text_chat.MESSAGE_TYPE``), and free-form values (agent reference,
tools) travel as JSON strings.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from trajectory_assets.formats.text_chat import MESSAGES_TYPE, text_messages

VERL_ARROW_SCHEMA = pa.schema([
    ("data_source", pa.string()),
    ("prompt", MESSAGES_TYPE),
    ("ability", pa.string()),
    ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
    ("extra_info", pa.struct([
        ("split", pa.string()),
        ("index", pa.int64()),
        ("task_key", pa.string()),
        ("agent_ref", pa.string()),
        ("tools", pa.string()),
        ("num_rollouts", pa.int64()),
        ("mean_reward", pa.float64()),
        ("trajectory_ids", pa.list_(pa.string())),
    ])),
])


def verl_row(
    *,
    prompt: list[dict[str, Any]],
    data_source: str,
    ability: str,
    ground_truth: str | None,
    split: str,
    index: int,
    task_key: str,
    agent_ref: dict[str, Any] | None,
    tools: list[dict[str, Any]] | None,
    num_rollouts: int,
    mean_reward: float | None,
    trajectory_ids: list[str],
) -> dict[str, Any]:
    """One verl row, shaped to :data:`VERL_ARROW_SCHEMA` (key order = column order)."""
    return {
        "data_source": data_source,
        "prompt": text_messages(prompt),
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "split": split,
            "index": index,
            "task_key": task_key,
            "agent_ref": _json_or_none(agent_ref),
            "tools": _json_or_none(tools),
            "num_rollouts": num_rollouts,
            "mean_reward": mean_reward,
            "trajectory_ids": list(trajectory_ids),
        },
    }


def ground_truth_of(metadata: dict[str, Any]) -> str | None:
    """The verifier's reference answer carried by a rollout, as a string (rule rewards compare text)."""
    for key in ("expected_answer", "ground_truth"):
        value = metadata.get(key)
        if value is not None:
            return value if isinstance(value, str) else orjson.dumps(value).decode()
    return None


def _json_or_none(value: Any) -> str | None:
    return orjson.dumps(value).decode() if value else None
