"""Contract of verl RL rows: ``{"data_source", "prompt", "ability", "reward_model", "extra_info"}``.

One row per task (verl samples its own rollouts from the prompt); its prompt in the form chat
templates render right (``value_types``: text content, argument objects). ``prompt_shape`` holds the
prompt's role letters (``chat.role_shape``): system only first, at least one user turn.
``fields`` lists the row's top-level fields; the writer builds Parquet from the rows with
``VERL_ARROW_SCHEMA``.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.sft import SPLITS
from schemas.trajectory import HEX_ID
from schemas.validation import ArrowString, leading_field
from schemas.patterns import TEMPLATE_VALUE_TYPES

SYSTEM_ONLY_FIRST = r"^s?[^s]*$"


class VerlSchema(pandera.DataFrameModel):
    task_key: Series[ArrowString] = pandera.Field(unique=True, str_matches=HEX_ID)
    prompt_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    split: Series[ArrowString] = pandera.Field(isin=SPLITS)
    data_source: Series[ArrowString] = pandera.Field(str_length={"min_value": 1})
    ability: Series[ArrowString] = pandera.Field(str_length={"min_value": 1})
    prompt_shape: Series[ArrowString] = pandera.Field(str_matches=SYSTEM_ONLY_FIRST, str_contains="u")
    index: Series[int] = pandera.Field(ge=0)
    mean_reward: Series[float] = pandera.Field(nullable=True)  # null for tasks without rewards (Hermes)
    value_types: Series[ArrowString] = pandera.Field(str_matches=TEMPLATE_VALUE_TYPES)  # the prompt, as for TRL
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("data_source"))

    class Config:
        strict = True
