"""Contract of GRPO (NeMo Gym RL input) rows: ``{"responses_create_params", "agent_ref"}``
plus the verifier's inputs beside the request and a summary of the task's rollouts, one row
per task."""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.export_row import ExportRowSchema, number
from schemas.trajectory import HEX_ID
from schemas.validation import ArrowString, leading_field


class GrpoSchema(ExportRowSchema):
    task_key: Series[ArrowString] = pandera.Field(unique=True, str_matches=HEX_ID)
    agent_type: Series[ArrowString] = pandera.Field(isin=["responses_api_agents"])
    agent_name: Series[ArrowString] = pandera.Field(str_length={"min_value": 1})
    input_items: Series[int] = pandera.Field(ge=1)  # what the request gives the model
    num_rollouts: Series[int] = pandera.Field(ge=1)
    mean_reward: Series[float] = pandera.Field(nullable=True)  # null for tasks without rewards (Hermes)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("responses_create_params"))

    @classmethod
    def row(cls, record):
        request_input = (record.get("responses_create_params") or {}).get("input")
        agent_ref = record.get("agent_ref") or {}
        return {"task_key": record.get("task_key"), "agent_type": agent_ref.get("type"),
                "agent_name": agent_ref.get("name"),
                "input_items": len(request_input) if isinstance(request_input, list) else int(bool(request_input)),
                "num_rollouts": record.get("num_rollouts"), "mean_reward": number(record.get("mean_reward"))}

    class Config:
        strict = True
