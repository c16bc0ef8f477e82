"""Contract of LLaMA-Factory ShareGPT rows: ``{"conversations": [{"from", "value"}], "system", "tools"}``.

``turn_shape`` has one letter per turn (h human, g gpt, f function_call, o observation);
the pattern is LLaMA-Factory's alternation rule (even positions human/observation, odd
positions gpt/function_call, even length) with a human first turn, the same pattern the
renderer refuses conversations by.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.sft import TrajectoryRowSchema
from schemas.validation import ArrowString, leading_field
from schemas.patterns import TURN_SHAPE_PATTERN


class LlamaFactorySchema(TrajectoryRowSchema):
    turn_shape: Series[ArrowString] = pandera.Field(str_matches=TURN_SHAPE_PATTERN)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("conversations"))

    class Config:
        strict = True
