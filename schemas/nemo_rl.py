"""Contracts of the NeMo RL flavor: SFT ``openai_format`` rows ``{"messages", "tools"}`` and
DPO preference rows ``{"context", "completions": [{"rank", "completion"}]}``.

The TRL rules (text content, argument objects, role rules) plus what NeMo RL itself requires
(``exports/nemo_rl.py``): an SFT conversation ends with the assistant's turn, and so does each
completion of a pair (its loss is on the final message only).
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.dpo import STARTS_WITH_ASSISTANT
from schemas.trl import TrlDpoSchema, TrlSftSchema
from schemas.validation import ArrowString, leading_field
from schemas.patterns import ROLE_SHAPE_PATTERN

ENDS_WITH_ASSISTANT = r"[ac]$"


class NemoRlSftSchema(TrlSftSchema):
    role_shape: Series[ArrowString] = pandera.Field(str_matches=ROLE_SHAPE_PATTERN, str_contains=ENDS_WITH_ASSISTANT)

    class Config:
        strict = True


class NemoRlDpoSchema(TrlDpoSchema):
    chosen_shape: Series[ArrowString] = pandera.Field(
        str_matches=STARTS_WITH_ASSISTANT, str_contains=ENDS_WITH_ASSISTANT)
    rejected_shape: Series[ArrowString] = pandera.Field(
        str_matches=STARTS_WITH_ASSISTANT, str_contains=ENDS_WITH_ASSISTANT)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("context"))

    class Config:
        strict = True
        unique = ["chosen_id", "rejected_id"]
