"""``sft``: supervised fine-tuning conversations in OpenAI Chat Completions form, the NeMo
Gym seed SFT format: ``{"messages", "tools", "reward", "task_type", "trajectory_id",
"task_key"}``, tool-call arguments as the JSON strings of OpenAI's wire format.

Its message lists vary from row to row (content as text or as parts, optional keys), so
each such column is one JSON value (``template.JSON``): ``datasets`` hands back every row
exactly as written, strings included. A JSON type on a string field itself would not do:
``datasets`` decodes a string that holds JSON text, so an argument string would come back
as an object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import pyarrow as pa

from schemas.sft import SftSchema
from trajectory_assets.exports.columns import FIELDS, SFT_COLUMNS, SFT_LINEAGE
from trajectory_assets.exports.export import Export, ReadBack
from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.io.arrow_rows import JSON

SCHEMA = pa.schema([("messages", JSON), ("tools", JSON), *SFT_COLUMNS])


def render(item: SftItem) -> dict[str, Any]:
    """The trajectory's messages and tools as stored; reward and task type when recorded."""
    row = item.row
    record: dict[str, Any] = {"messages": item.messages}
    if item.tools is not None:
        record["tools"] = item.tools
    if not pd.isna(row.reward):
        record["reward"] = row.reward
    if row.task_type is not None:
        record["task_type"] = row.task_type
    record["trajectory_id"] = row.trajectory_id
    record["task_key"] = row.task_key
    return record


def read_back(row: Mapping[str, Any]) -> ReadBack:
    """The conversation as written (the trajectory's own messages and tools).

    >>> read_back({"messages": [{"role": "user", "content": "Hi"}], "tools": None}).messages
    [{'role': 'user', 'content': 'Hi'}]
    """
    return ReadBack(messages=list(row["messages"]), tools=row.get("tools"))


EXPORT = Export(
    name="sft", family="sft", render=render, read_back=read_back, contract=SftSchema, arrow_schema=SCHEMA,
    lineage=SFT_LINEAGE, fields=FIELDS,
    description="Supervised fine-tuning conversations in OpenAI Chat Completions form (the NeMo Gym seed SFT format).",
    measures=("reward",),
)
