"""Contract of the token export: one row per trajectory with the token ids and log
probabilities of its model calls (``chat/token_data.py``)."""

import pandera.pandas as pandera
from pandera.typing import Series

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

    class Config:
        strict = True
