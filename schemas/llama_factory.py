"""Contract of LLaMA-Factory ShareGPT rows: ``{"conversations": [{"from", "value"}], "system", "tools"}``.

``turn_shape`` has one letter per written turn (h human, g gpt, f function_call,
o observation); the pattern is LLaMA-Factory's alternation rule (even positions
human/observation, odd positions gpt/function_call, even length) with a human first turn,
the same pattern the renderer refuses conversations by. ``system`` and ``tools`` are text.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.sft import TrajectoryRowSchema
from schemas.shapes import LLAMA_FACTORY_LETTER, TURN_SHAPE_PATTERN, turn_shape, type_name
from schemas.validation import ArrowString, leading_field


class LlamaFactorySchema(TrajectoryRowSchema):
    turn_shape: Series[ArrowString] = pandera.Field(str_matches=TURN_SHAPE_PATTERN)
    system_type: Series[ArrowString] = pandera.Field(isin=["str"])
    tools_type: Series[ArrowString] = pandera.Field(isin=["str"])  # JSON text of the functions, "" for none
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("conversations"))

    @classmethod
    def columns(cls, records):
        return {**cls.lineage(records),
                "turn_shape": [turn_shape(record["conversations"], LLAMA_FACTORY_LETTER) for record in records],
                "system_type": [type_name(record.get("system")) for record in records],
                "tools_type": [type_name(record.get("tools")) for record in records]}

    class Config:
        strict = True
