"""``trl_grpo``: TRL's prompt-only rows ``{prompt}`` for ``trl.GRPOTrainer``: the task's
prompt in template form (``exports/template.py``), ``tools``, and every other column, which
TRL hands to the reward functions as keyword arguments (``ground_truth`` among them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from schemas.trl import TrlGrpoSchema
from trajectory_assets.exports.columns import FIELDS, TASK_LINEAGE, TASK_SUMMARY
from trajectory_assets.exports.export import FLAVORS_GROUP, Export, ReadBack
from trajectory_assets.exports.families.grpo import TaskItem
from trajectory_assets.exports.template import (
    MESSAGES_TYPE,
    TOOLS_TYPE,
    from_template,
    template_messages,
    tools_from_template,
)

SCHEMA = pa.schema([
    ("prompt", MESSAGES_TYPE),
    ("tools", TOOLS_TYPE),
    ("ground_truth", pa.string()),
    ("agent_name", pa.string()),
    ("task_type", pa.string()),
    *TASK_SUMMARY,
])


def render(item: TaskItem) -> dict[str, Any]:
    task = item.task
    # every column besides prompt reaches TRL's reward functions as a keyword argument
    return {"prompt": template_messages(item.prompt), "tools": item.tools, "ground_truth": item.ground_truth,
            "agent_name": task.agent_ref["name"], "task_type": task.task_type, **item.summary}


def read_back(row: Mapping[str, Any]) -> ReadBack:
    return ReadBack(messages=from_template(row["prompt"]), tools=tools_from_template(row.get("tools")))


EXPORT = Export(
    name="trl_grpo", family="grpo", render=render, read_back=read_back, contract=TrlGrpoSchema, arrow_schema=SCHEMA,
    lineage={"prompt": ["messages", "prompt_length"], "tools": ["tools"], "ground_truth": ["metadata"],
             **TASK_LINEAGE},
    fields={**FIELDS, "ground_truth": "what the reward function checks against (the verifier's expected answer), "
                                      "as JSON text"},
    description="TRL prompt-only rows `{prompt}`; every other column reaches the reward functions (`trl.GRPOTrainer`).",
    group=FLAVORS_GROUP, file_format="parquet", measures=("mean_reward",),
)
