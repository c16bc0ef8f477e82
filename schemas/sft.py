"""Contract of SFT export rows: ``{"messages", "tools"?, "reward"?, "task_type"?}``.

Role rules from the seed: system only first, every tool message answers a call of the
assistant turn before it, at least one assistant turn.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.trajectory import HEX_ID
from schemas.validation import ArrowString, leading_field
from schemas.patterns import HAS_ASSISTANT_PATTERN, ROLE_SHAPE_PATTERN

SPLITS = ["train", "validation"]


class TrajectoryRowSchema(pandera.DataFrameModel):
    """What every export row made from one trajectory carries: the trajectory (once per
    export), its task and prompt, and the split its prompt fell in."""

    trajectory_id: Series[ArrowString] = pandera.Field(unique=True, str_matches=HEX_ID)
    task_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    prompt_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    split: Series[ArrowString] = pandera.Field(isin=SPLITS)


class SftSchema(TrajectoryRowSchema):
    role_shape: Series[ArrowString] = pandera.Field(str_matches=ROLE_SHAPE_PATTERN)
    reward: Series[float] = pandera.Field(nullable=True)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("messages"))

    @pandera.check("role_shape", name="has_assistant_turn")
    def has_assistant_turn(cls, shape: Series[ArrowString]) -> Series[bool]:
        return shape.str.contains(HAS_ASSISTANT_PATTERN, regex=True)

    class Config:
        strict = True
