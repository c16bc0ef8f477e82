"""Contract of Hermes-format SFT rows: ``{"conversations": [{"from", "value"}], ...}``.

``from_shape`` has one letter per turn (s system, h human, g gpt, t tool): the generated
system prompt comes first, each tool turn answers the gpt turn right before it, and there
is at least one gpt turn.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.sft import TrajectoryRowSchema
from schemas.validation import ArrowString, leading_field

FROM_SHAPE_PATTERN = r"^s(?:h|gt?)*$"


class SftHermesSchema(TrajectoryRowSchema):
    from_shape: Series[ArrowString] = pandera.Field(str_matches=FROM_SHAPE_PATTERN)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("conversations"))

    @pandera.check("from_shape", name="has_gpt_turn")
    def has_gpt_turn(cls, shape: Series[ArrowString]) -> Series[bool]:
        return shape.str.contains("g", regex=False)

    class Config:
        strict = True
