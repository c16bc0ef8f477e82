"""Contract of verl RL rows: ``{"data_source", "agent_name", "prompt", "ability", "reward_model",
"extra_info"}``.

One row per task (verl samples its own rollouts from the prompt), its prompt in the form chat
templates render right (``value_types``: text content, argument objects): system only first,
at least one user turn (``prompt_shape``, the written prompt's role letters). ``task_key``,
``index`` and ``mean_reward`` are read from ``extra_info``.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.export_row import ExportRowSchema, field_values, numbers
from schemas.shapes import TEMPLATE_VALUE_TYPES, role_shape, value_types
from schemas.trajectory import HEX_ID
from schemas.validation import ArrowString, leading_field

SYSTEM_ONLY_FIRST = r"^s?[^s]*$"


class VerlSchema(ExportRowSchema):
    task_key: Series[ArrowString] = pandera.Field(unique=True, str_matches=HEX_ID)
    data_source: Series[ArrowString] = pandera.Field(str_length={"min_value": 1})
    agent_name: Series[ArrowString] = pandera.Field(isin=["tool_agent", "single_turn_agent"])
    ability: Series[ArrowString] = pandera.Field(str_length={"min_value": 1})
    reward_style: Series[ArrowString] = pandera.Field(isin=["rule"])
    prompt_shape: Series[ArrowString] = pandera.Field(str_matches=SYSTEM_ONLY_FIRST, str_contains="u")
    index: Series[int] = pandera.Field(ge=0)
    mean_reward: Series[float] = pandera.Field(nullable=True)  # null for tasks without rewards (Hermes)
    value_types: Series[ArrowString] = pandera.Field(str_matches=TEMPLATE_VALUE_TYPES)  # the prompt, as for TRL
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("data_source"))

    @classmethod
    def columns(cls, records):
        extras = [record["extra_info"] for record in records]
        prompts = [record["prompt"] for record in records]
        return {"task_key": field_values(extras, "task_key"), "data_source": field_values(records, "data_source"),
                "agent_name": field_values(records, "agent_name"), "ability": field_values(records, "ability"),
                "reward_style": [(record.get("reward_model") or {}).get("style") for record in records],
                "prompt_shape": [role_shape(prompt) for prompt in prompts], "index": field_values(extras, "index"),
                "mean_reward": numbers(field_values(extras, "mean_reward")),
                "value_types": [value_types(prompt) for prompt in prompts]}

    class Config:
        strict = True
