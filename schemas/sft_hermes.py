"""Contract of Hermes-format SFT rows: ``{"conversations": [{"from", "value"}], ...}``.

Over the written turns (``from_shape``, one letter per turn: s system, h human, g gpt,
t tool): the generated system prompt comes first, each tool turn answers the gpt turn right
before it, and there is at least one gpt turn.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.sft import TrajectoryRowSchema
from schemas.shapes import FROM_SHAPE_PATTERN, HERMES_LETTER, turn_shape
from schemas.validation import ArrowString, leading_field


class SftHermesSchema(TrajectoryRowSchema):
    from_shape: Series[ArrowString] = pandera.Field(str_matches=FROM_SHAPE_PATTERN)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("conversations"))

    @pandera.check("from_shape", name="has_gpt_turn")
    def has_gpt_turn(cls, shape: Series[ArrowString]) -> Series[bool]:
        return shape.str.contains("g", regex=False)

    @classmethod
    def columns(cls, records):
        return {**cls.lineage(records),
                "from_shape": [turn_shape(record["conversations"], HERMES_LETTER) for record in records]}

    class Config:
        strict = True
