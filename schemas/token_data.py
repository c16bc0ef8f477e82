"""Contract of the token export: one row per trajectory with the token ids and log
probabilities of its model calls (``chat/token_data.py``), checked on the written calls."""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.export_row import field_values, numbers
from schemas.sft import TrajectoryRowSchema
from schemas.validation import ArrowString, leading_field


class TokensSchema(TrajectoryRowSchema):
    reward: Series[float] = pandera.Field(nullable=True)
    calls: Series[int] = pandera.Field(ge=1, description="model calls with token data")
    generated_tokens: Series[int] = pandera.Field(ge=1, description="tokens generated over all calls")
    # one log probability per generated token, in every call
    aligned: Series[bool] = pandera.Field(eq=True)
    contiguous: Series[bool]
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("trajectory_id"))

    @classmethod
    def columns(cls, records):
        calls = [record["calls"] for record in records]
        return {
            **cls.lineage(records),
            "reward": numbers(field_values(records, "reward")),
            "calls": [len(made) for made in calls],
            "generated_tokens": [sum(len(call["generation_token_ids"]) for call in made) for made in calls],
            "aligned": [all(len(call["generation_log_probs"]) == len(call["generation_token_ids"]) for call in made)
                        for made in calls],
            "contiguous": [record["contiguous"] for record in records],
        }

    class Config:
        strict = True
