"""Contract of the validated-trajectories table (one row per accepted rollout)."""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.validation import ArrowString
from schemas.shapes import HAS_ASSISTANT_PATTERN, ROLE_SHAPE_PATTERN

HEX_ID = r"^[0-9a-f]{24,64}$"
# trajectory_assets.buckets.BUCKETS: the contracts import nothing of the package, so the count
# is repeated here and tests/schemas/test_contracts.py keeps the two equal
BUCKETS = 1024


class TrajectorySchema(pandera.DataFrameModel):
    trajectory_id: Series[ArrowString] = pandera.Field(
        unique=True, str_matches=HEX_ID, description="SHA-256 of the raw line: the rollout's id everywhere")
    # a name of the sources' registry (sources/__init__.py), which alone decides what is a format
    source_format: Series[ArrowString] = pandera.Field(str_matches=r"^[a-z][a-z0-9_]*$",
                                                       description="the producer's format")
    source_uri: Series[ArrowString] = pandera.Field(description="URI of the source file")
    source_id: Series[ArrowString] = pandera.Field(description="the source file's path relative to its root's parent")
    source_line: Series[int] = pandera.Field(ge=1, description="the record's line in the source file (1-based)")
    task_key: Series[ArrowString] = pandera.Field(
        str_matches=HEX_ID, description="the task: _ng_task_index scoped to its file, else the prompt_key")
    prompt_key: Series[ArrowString] = pandera.Field(
        str_matches=HEX_ID, description="SHA-256 of the converted prompt and tools: what the split is decided on")
    # that it is the bucket of the row's own prompt_key is the converter's rule
    # (ingest/conversion.py), tested there: the hash lives in the package, not in a contract
    bucket: Series[pandera.Int16] = pandera.Field(
        ge=0, lt=BUCKETS, description="the prompt's bucket (a hash of prompt_key): the export shard the row is in")
    reward: Series[float] = pandera.Field(nullable=True, description="the verifier's reward (null: none recorded)")
    completed: Series[bool] = pandera.Field(description="whether the response finished (status completed)")
    mask_sample: Series[bool] = pandera.Field(description="NeMo Gym's mask_sample: not to be trained on")
    messages: Series[ArrowString] = pandera.Field(
        str_startswith="[", description="the conversation as OpenAI Chat Completions messages (JSON)")
    prompt_length: Series[int] = pandera.Field(ge=1, description="how many of the messages are the prompt")
    role_shape: Series[ArrowString] = pandera.Field(
        str_matches=ROLE_SHAPE_PATTERN, description="one letter per message: s(ystem), u(ser), a(ssistant), t(ool)")
    num_messages: Series[int] = pandera.Field(ge=2, description="number of messages")
    num_assistant_turns: Series[int] = pandera.Field(ge=1, description="number of assistant messages")
    num_tool_calls: Series[int] = pandera.Field(ge=0, description="number of tool calls")
    unanswered_tool_calls: Series[int] = pandera.Field(ge=0, description="tool calls no tool message answers")
    tool_results: Series[int] = pandera.Field(ge=0, description="number of tool messages")
    tool_errors: Series[int] = pandera.Field(ge=0, description="tool messages that report an error")
    content_hash: Series[ArrowString] = pandera.Field(
        str_matches=HEX_ID, description="SHA-256 of the messages and tools: what exact de-duplication compares")
    messages_chars: Series[int] = pandera.Field(gt=0, description="length of the messages column's JSON text")
    unknown_items: Series[int] = pandera.Field(ge=0, description="items of unknown type kept in metadata")
    reward_provenance: Series[ArrowString] = pandera.Field(
        nullable=True, str_startswith="{",
        description="where the reward came from: the verifier (agent_ref), judge models, the run's resolved config "
                    "and its SHA-256, whether re-verified and whether forced (JSON; null: the format records none)")

    @pandera.check("role_shape", name="has_assistant_turn")
    def has_assistant_turn(cls, shape: Series[ArrowString]) -> Series[bool]:
        return shape.str.contains(HAS_ASSISTANT_PATTERN, regex=True)

    @pandera.dataframe_check(name="shape_matches_message_count")
    def shape_matches_message_count(cls, df):
        return df["role_shape"].str.len() == df["num_messages"]

    @pandera.dataframe_check(name="prompt_inside_messages")
    def prompt_inside_messages(cls, df):
        return df["prompt_length"] < df["num_messages"]

    @pandera.dataframe_check(name="tool_errors_within_results")
    def tool_errors_within_results(cls, df):
        return df["tool_errors"] <= df["tool_results"]

    @pandera.dataframe_check(name="reward_is_finite")
    def reward_is_finite(cls, df):
        reward = df["reward"]
        return reward.isna() | ((reward > float("-inf")) & (reward < float("inf")))

    class Config:
        strict = False  # nested payload columns (messages, tools, metadata...) are not re-checked here
        coerce = False


# The table's other columns: payloads and optional fields, written as ingest made them and
# not re-checked by the contract (their shape is the converter's; reading them back is the
# exports' work). With the contract's own descriptions they describe every column of the file.
UNCHECKED_COLUMNS = {
    "task_index": "NeMo Gym's _ng_task_index, if recorded",
    "rollout_index": "NeMo Gym's _ng_rollout_index, if recorded",
    "rollout_id": "NeMo Gym's _ng_rollout_id, a lineage id, if recorded",
    "agent_name": "the agent that ran the rollout (agent_ref's name)",
    "agent_ref": "the agent reference as recorded (JSON)",
    "model": "the model that produced the output, if recorded",
    "task_type": "the task's type or environment, if recorded",
    "reward_components": "the verifier's reward parts, if recorded (JSON)",
    "status": "the response's status as recorded",
    "tools": "the tools offered, as Chat Completions tool objects (JSON)",
    "has_reasoning": "whether any assistant message carries reasoning_content",
    "input_tokens": "the response's recorded prompt tokens",
    "output_tokens": "the response's recorded completion tokens",
    "total_tokens": "the response's recorded total tokens",
    "quality_flags": "anomalies found in conversion, comma-separated flag names (README: conversion rules)",
    "request": "the request as recorded (responses_create_params, JSON): what a GRPO row replays",
    "task_inputs": "what the verifier was given, from NeMo Gym's materialized inputs (JSON)",
    "token_data": "NeMo Gym's token ids and log probabilities per model call, if recorded",
    "metadata": "everything else the record held, and what conversion kept aside (JSON)",
}


def column_descriptions() -> dict[str, str]:
    """Every column of the trajectory table: the contract's descriptions, then the others'."""
    checked = {name: column.description for name, column in TrajectorySchema.to_schema().columns.items()}
    return {**checked, **UNCHECKED_COLUMNS}
