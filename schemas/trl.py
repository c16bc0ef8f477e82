"""Contracts of the TRL flavor: conversational SFT ``{"messages", "tools"}``, explicit-prompt
DPO ``{"prompt", "chosen", "rejected", "tools"}`` and prompt-only GRPO ``{"prompt", ...}``.

Beyond the role rules they share with the seed formats, each checks ``value_types``: the
types of every message ``content`` and tool-call ``arguments`` in the written row, which
must be text and JSON objects, the form chat templates render right
(``exports/template.py``), and ``tools_type``: ``tools`` is a list of tool objects or null.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.dpo import DpoSchema
from schemas.export_row import ExportRowSchema, field_values, numbers
from schemas.sft import TOOLS_TYPES, SftSchema
from schemas.shapes import (
    HAS_ASSISTANT_PATTERN,
    ROLE_SHAPE_PATTERN,
    TEMPLATE_VALUE_TYPES,
    role_shape,
    type_name,
    value_types,
)
from schemas.trajectory import HEX_ID
from schemas.validation import ArrowString, leading_field
from schemas.verl import SYSTEM_ONLY_FIRST


class TrlSftSchema(SftSchema):
    role_shape: Series[ArrowString] = pandera.Field(str_matches=ROLE_SHAPE_PATTERN, str_contains=HAS_ASSISTANT_PATTERN)
    value_types: Series[ArrowString] = pandera.Field(str_matches=TEMPLATE_VALUE_TYPES)

    @classmethod
    def columns(cls, records):
        return {**super().columns(records), "value_types": [value_types(record["messages"]) for record in records]}

    class Config:
        strict = True


class TrlDpoSchema(DpoSchema):
    value_types: Series[ArrowString] = pandera.Field(str_matches=TEMPLATE_VALUE_TYPES)
    tools_type: Series[ArrowString] = pandera.Field(isin=TOOLS_TYPES)

    @classmethod
    def columns(cls, records):
        return {**super().columns(records), "tools_type": [type_name(record.get("tools")) for record in records],
                "value_types": [value_types([*record["prompt"], *record["chosen"], *record["rejected"]])
                                for record in records]}

    class Config:
        strict = True
        unique = ["chosen_id", "rejected_id"]


class TrlGrpoSchema(ExportRowSchema):
    task_key: Series[ArrowString] = pandera.Field(unique=True, str_matches=HEX_ID)
    prompt_shape: Series[ArrowString] = pandera.Field(str_matches=SYSTEM_ONLY_FIRST, str_contains="u")
    mean_reward: Series[float] = pandera.Field(nullable=True)  # null for tasks without rewards (Hermes)
    value_types: Series[ArrowString] = pandera.Field(str_matches=TEMPLATE_VALUE_TYPES)
    tools_type: Series[ArrowString] = pandera.Field(isin=TOOLS_TYPES)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("prompt"))

    @classmethod
    def columns(cls, records):
        prompts = [record["prompt"] for record in records]
        return {"task_key": field_values(records, "task_key"), "prompt_shape": [role_shape(prompt) for prompt in prompts],
                "mean_reward": numbers(field_values(records, "mean_reward")),
                "value_types": [value_types(prompt) for prompt in prompts],
                "tools_type": [type_name(record.get("tools")) for record in records]}

    class Config:
        strict = True
