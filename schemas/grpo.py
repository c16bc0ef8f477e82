"""Contract of GRPO (NeMo Gym RL input) lines: ``{"responses_create_params", "agent_ref"}``,
one per task."""

import pandera.pandas as pa
from pandera.typing import Series

from schemas.sft import SPLITS
from schemas.trajectory import HEX_ID


class GrpoSchema(pa.DataFrameModel):
    task_key: Series[str] = pa.Field(unique=True, str_matches=HEX_ID)
    prompt_key: Series[str] = pa.Field(str_matches=HEX_ID)
    split: Series[str] = pa.Field(isin=SPLITS)
    agent_name: Series[str] = pa.Field(str_length={"min_value": 1})
    input_items: Series[int] = pa.Field(ge=1)
    # the verifier's inputs written beside the request (NeMo Gym's materialized inputs), comma-joined
    input_keys: Series[str] = pa.Field(str_matches=r"^(?:[^,]+(?:,[^,]+)*)?$")
    mean_reward: Series[float] = pa.Field(nullable=True)  # null for tasks without rewards (Hermes)
    line: Series[str] = pa.Field(str_startswith='{"responses_create_params":{')

    class Config:
        strict = True
