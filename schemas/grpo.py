"""Contract of GRPO (NeMo Gym RL input) rows: ``{"responses_create_params", "agent_ref"}``,
one per task."""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.sft import SPLITS
from schemas.trajectory import HEX_ID
from schemas.validation import ArrowString, leading_field


class GrpoSchema(pandera.DataFrameModel):
    task_key: Series[ArrowString] = pandera.Field(unique=True, str_matches=HEX_ID)
    prompt_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    split: Series[ArrowString] = pandera.Field(isin=SPLITS)
    agent_name: Series[ArrowString] = pandera.Field(str_length={"min_value": 1})
    input_items: Series[int] = pandera.Field(ge=1)
    # the verifier's inputs written beside the request (NeMo Gym's materialized inputs), comma-joined
    input_keys: Series[ArrowString] = pandera.Field(str_matches=r"^(?:[^,]+(?:,[^,]+)*)?$")
    mean_reward: Series[float] = pandera.Field(nullable=True)  # null for tasks without rewards (Hermes)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("responses_create_params"))

    class Config:
        strict = True
