"""Contract of SFT export rows: ``{"messages", "tools"?, "reward"?, "task_type"?,
"trajectory_id", "task_key"}``.

Role rules from the seed, over the written ``messages``: system only first, every tool
message answers a call of the assistant turn before it, at least one assistant turn.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.export_row import ExportRowSchema, field_values, numbers
from schemas.shapes import HAS_ASSISTANT_PATTERN, ROLE_SHAPE_PATTERN, role_shape, type_name
from schemas.trajectory import HEX_ID
from schemas.validation import ArrowString, leading_field

TOOLS_TYPES = ["list", "NoneType"]  # a list of tool objects, or none


class TrajectoryRowSchema(ExportRowSchema):
    """What every export row made from one trajectory carries: the trajectory (once per
    export) and its task."""

    trajectory_id: Series[ArrowString] = pandera.Field(unique=True, str_matches=HEX_ID)
    task_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)

    @classmethod
    def lineage(cls, records) -> dict[str, list]:
        return {"trajectory_id": field_values(records, "trajectory_id"), "task_key": field_values(records, "task_key")}


class SftSchema(TrajectoryRowSchema):
    role_shape: Series[ArrowString] = pandera.Field(str_matches=ROLE_SHAPE_PATTERN)
    reward: Series[float] = pandera.Field(nullable=True)
    tools_type: Series[ArrowString] = pandera.Field(isin=TOOLS_TYPES)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("messages"))

    @pandera.check("role_shape", name="has_assistant_turn")
    def has_assistant_turn(cls, shape: Series[ArrowString]) -> Series[bool]:
        return shape.str.contains(HAS_ASSISTANT_PATTERN, regex=True)

    @classmethod
    def columns(cls, records):
        return {**cls.lineage(records), "role_shape": [role_shape(record["messages"]) for record in records],
                "reward": numbers(field_values(records, "reward")),
                "tools_type": [type_name(record.get("tools")) for record in records]}

    class Config:
        strict = True
