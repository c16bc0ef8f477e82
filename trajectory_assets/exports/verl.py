"""``verl``: verl RL Parquet rows, one per task (the RL dataset of ``verl.utils.dataset.rl_dataset``).

verl's ``RLHFDataset`` reads ``data_source``, ``prompt`` (chat messages), ``ability``,
``reward_model {style, ground_truth}`` and ``extra_info {split, index, ...}``, and hands
``extra_info.tools_kwargs`` / ``extra_info.interaction_kwargs`` and a top-level
``agent_name`` to the agent loop (``verl/experimental/agent_loop``). The multi-turn fields
follow verl's own preprocessing scripts (``examples/data_preprocess/gsm8k_tool_agent_loop.py``,
``gsm8k_multiturn_w_interaction.py``, ``preprocess_search_r1_dataset.py``):

- ``agent_name``: ``tool_agent`` (``ToolAgentLoop``) for a task that offers tools, else
  ``single_turn_agent``, the two loops verl registers;
- ``extra_info.tools_kwargs``: per tool of the task ``{"create_kwargs": {"ground_truth"}}``
  (what the examples pass to ``BaseTool.create``), ``{}`` without a reference answer, and
  ``need_tools_kwargs``; always an object, since the loop calls ``.get`` on it;
- ``extra_info.interaction_kwargs``: ``{"name", "query", "ground_truth"}``, read when verl runs
  with an interaction config; ``name`` (required there) is the environment, ``data_source``.

Parquet needs one type per column, so rows are built to match :data:`SCHEMA`
exactly: messages are ``template.template_messages`` (text content, argument objects) and
values whose shape varies (agent reference, tools, the kwargs) are JSON fields, which
``datasets`` loads as objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import pyarrow as pa

from schemas.verl import VerlSchema
from trajectory_assets.exports.columns import FIELDS
from trajectory_assets.exports.export import FLAVORS_GROUP, Export, ReadBack
from trajectory_assets.exports.families.grpo import TaskItem
from trajectory_assets.exports.template import (
    MESSAGES_TYPE,
    TOOLS_TYPE,
    from_template,
    template_messages,
    tools_from_template,
)
from trajectory_assets.io.arrow_rows import JSON

TOOL_AGENT, SINGLE_TURN_AGENT = "tool_agent", "single_turn_agent"

SCHEMA = pa.schema([
    ("data_source", pa.string()),
    ("agent_name", pa.string()),
    ("prompt", MESSAGES_TYPE),
    ("ability", pa.string()),
    ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
    ("extra_info", pa.struct([
        ("split", pa.string()),
        ("index", pa.int64()),
        ("task_key", pa.string()),
        ("agent_ref", JSON),
        ("tools", TOOLS_TYPE),
        ("need_tools_kwargs", pa.bool_()),
        ("tools_kwargs", JSON),
        ("interaction_kwargs", JSON),
        ("num_rollouts", pa.int64()),
        ("mean_reward", pa.float64()),
        ("reward_components", JSON),
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
    reward_components: dict[str, Any] | None,
    trajectory_ids: list[str],
) -> dict[str, Any]:
    """One verl row, shaped to :data:`SCHEMA` (key order = column order)."""
    messages = template_messages(prompt)
    create_kwargs = {} if ground_truth is None else {"create_kwargs": {"ground_truth": ground_truth}}
    return {
        "data_source": data_source,
        "agent_name": TOOL_AGENT if tools else SINGLE_TURN_AGENT,
        "prompt": messages,
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "split": split,
            "index": index,
            "task_key": task_key,
            "agent_ref": agent_ref or None,
            "tools": tools or None,
            "need_tools_kwargs": bool(tools),
            "tools_kwargs": {name: dict(create_kwargs) for name in tool_names(tools)},
            "interaction_kwargs": {"name": data_source, "query": _last_user_text(messages),
                                   "ground_truth": ground_truth},
            "num_rollouts": num_rollouts,
            "mean_reward": mean_reward,
            "reward_components": reward_components,
            "trajectory_ids": list(trajectory_ids),
        },
    }


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    return [(tool.get("function") or tool).get("name") for tool in tools or []]


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    return next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")


def render(item: TaskItem) -> dict[str, Any]:
    task, prompt = item.task, item.prompt
    return verl_row(
        prompt=prompt,
        data_source=task.agent_ref["name"],  # the environment: what picks the reward function
        ability=task.task_type or "agent",
        ground_truth=item.ground_truth,
        split=item.split,
        index=item.index,
        task_key=task.task_key,
        agent_ref=task.agent_ref,
        tools=item.tools,
        num_rollouts=int(task.num_rollouts),
        mean_reward=None if pd.isna(task.mean_reward) else float(task.mean_reward),
        reward_components=task.objectives_summary,
        trajectory_ids=task.trajectory_ids,
    )


def read_back(row: Mapping[str, Any]) -> ReadBack:
    return ReadBack(messages=from_template(row["prompt"]), tools=tools_from_template(row["extra_info"]["tools"]))


EXPORT = Export(
    name="verl", family="grpo", render=render, read_back=read_back, contract=VerlSchema, arrow_schema=SCHEMA,
    lineage={"prompt": ["messages", "prompt_length"], "data_source": ["agent_ref", "agent_name"],
             "agent_name": ["tools"], "ability": ["task_type"], "reward_model": ["metadata"],
             "extra_info": ["task_key", "trajectory_id", "reward", "reward_components", "tools", "metadata"]},
    fields={**FIELDS,
            "agent_name": "verl's agent loop: tool_agent for a task that offers tools, else single_turn_agent",
            "data_source": "verl's reward-function key: the agent",
            "ability": "verl's task category: the task_type, else the agent",
            "reward_model": "verl's {style: rule, ground_truth}",
            "extra_info": "verl's extra fields: split, index, task_key, agent, tools and their kwargs, rollout "
                          "statistics (reward_components: per objective {count, mean, std}, which compute_score "
                          "receives in extra_info)"},
    description="verl RL Parquet: `data_source`, `prompt`, `ability`, `reward_model`, `extra_info`.",
    group=FLAVORS_GROUP, file_format="parquet", measures=("mean_reward",),
)
