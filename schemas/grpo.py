"""Contract of GRPO (NeMo Gym RL input) rows: ``{"responses_create_params", "agent_ref"}``
plus the verifier's inputs beside the request and a summary of the task's rollouts, one row
per task."""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.export_row import ExportRowSchema, field_values, numbers
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
    def columns(cls, records):
        inputs = [(record.get("responses_create_params") or {}).get("input") for record in records]
        agent_refs = [record.get("agent_ref") or {} for record in records]
        return {"task_key": field_values(records, "task_key"), "agent_type": [ref.get("type") for ref in agent_refs],
                "agent_name": [ref.get("name") for ref in agent_refs],
                "input_items": [len(given) if isinstance(given, list) else int(bool(given)) for given in inputs],
                "num_rollouts": field_values(records, "num_rollouts"),
                "mean_reward": numbers(field_values(records, "mean_reward"))}

    class Config:
        strict = True
