"""Contract of the validated-trajectories table (one row per accepted rollout)."""

import pandera.pandas as pa
from pandera.typing import Series

from trajectory_assets.formats.chat import HAS_ASSISTANT_PATTERN, ROLE_SHAPE_PATTERN

HEX_ID = r"^[0-9a-f]{24,64}$"


class TrajectorySchema(pa.DataFrameModel):
    trajectory_id: Series[str] = pa.Field(unique=True, str_matches=HEX_ID)
    source_format: Series[str] = pa.Field(isin=["nemo_gym", "hermes"])
    source_uri: Series[str]
    source_id: Series[str]
    source_line: Series[int] = pa.Field(ge=1)
    task_key: Series[str] = pa.Field(str_matches=HEX_ID)
    prompt_key: Series[str] = pa.Field(str_matches=HEX_ID)
    reward: Series[float] = pa.Field(nullable=True)
    completed: Series[bool]
    mask_sample: Series[bool]
    messages: Series[str] = pa.Field(str_startswith="[")
    prompt_length: Series[int] = pa.Field(ge=1)
    role_shape: Series[str] = pa.Field(str_matches=ROLE_SHAPE_PATTERN)
    num_messages: Series[int] = pa.Field(ge=2)
    num_assistant_turns: Series[int] = pa.Field(ge=1)
    num_tool_calls: Series[int] = pa.Field(ge=0)
    unanswered_tool_calls: Series[int] = pa.Field(ge=0)
    tool_results: Series[int] = pa.Field(ge=0)
    tool_errors: Series[int] = pa.Field(ge=0)
    content_hash: Series[str] = pa.Field(str_matches=HEX_ID)
    messages_chars: Series[int] = pa.Field(gt=0)
    unknown_items: Series[int] = pa.Field(ge=0)

    @pa.check("role_shape", name="has_assistant_turn")
    def has_assistant_turn(cls, shape: Series[str]) -> Series[bool]:
        return shape.str.contains(HAS_ASSISTANT_PATTERN, regex=True)

    @pa.dataframe_check(name="shape_matches_message_count")
    def shape_matches_message_count(cls, df):
        return df["role_shape"].str.len() == df["num_messages"]

    @pa.dataframe_check(name="prompt_inside_messages")
    def prompt_inside_messages(cls, df):
        return df["prompt_length"] < df["num_messages"]

    @pa.dataframe_check(name="tool_errors_within_results")
    def tool_errors_within_results(cls, df):
        return df["tool_errors"] <= df["tool_results"]

    @pa.dataframe_check(name="reward_is_finite")
    def reward_is_finite(cls, df):
        reward = df["reward"]
        return reward.isna() | ((reward > float("-inf")) & (reward < float("inf")))

    class Config:
        strict = False  # nested payload columns (messages, tools, metadata...) are not re-checked here
        coerce = False
