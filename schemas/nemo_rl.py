"""Contracts of the NeMo RL flavor: SFT ``openai_format`` rows ``{"messages", "tools"}`` and
DPO preference rows ``{"context", "completions": [{"rank", "completion"}]}``.

The TRL rules (text content, argument objects, role rules) plus what NeMo RL itself requires
(``exports/nemo_rl_sft.py``, ``exports/nemo_rl_dpo.py``): an SFT conversation ends with the
assistant's turn, and so does each completion of a pair (its loss is on the final message
only); the two completions are ranked 0 (chosen) and 1.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.dpo import STARTS_WITH_ASSISTANT, pair_shapes
from schemas.shapes import ROLE_SHAPE_PATTERN, type_name, value_types
from schemas.trl import TrlDpoSchema, TrlSftSchema
from schemas.validation import ArrowString, leading_field

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
    ranks: Series[ArrowString] = pandera.Field(isin=["0,1"])  # two completions, the chosen one first
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("context"))

    @classmethod
    def columns(cls, records):
        pairs = []  # context, chosen, rejected (a missing completion: none)
        for record in records:
            sides = [completion["completion"] for completion in record["completions"]]
            pairs.append((record["context"], *(sides + [[], []])[:2]))
        return {**cls.pair_columns(records), **pair_shapes(pairs),
                "ranks": [",".join(str(completion["rank"]) for completion in record["completions"])
                          for record in records],
                "tools_type": [type_name(record.get("tools")) for record in records],
                "value_types": [value_types([*context, *chosen, *rejected]) for context, chosen, rejected in pairs]}

    class Config:
        strict = True
        unique = ["chosen_id", "rejected_id"]
