"""Contract of the token export: one row per trajectory with the token ids and log
probabilities of its model calls (``chat/token_data.py``), checked on the written calls."""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.export_row import number
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
    def row(cls, record):
        calls = record["calls"]
        return {
            **cls.lineage(record),
            "reward": number(record.get("reward")),
            "calls": len(calls),
            "generated_tokens": sum(len(call["generation_token_ids"]) for call in calls),
            "aligned": all(len(call["generation_log_probs"]) == len(call["generation_token_ids"]) for call in calls),
            "contiguous": record["contiguous"],
        }

    class Config:
        strict = True
