"""The canonical trajectory every source format converts into, and the rejection signal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from trajectory_assets.chat.token_data import TOKEN_DATA_TYPE


class Rejection(Exception):
    """A record that cannot become a valid trajectory.

    ``reason`` is a stable machine-readable code (counted in stats, filterable in the
    quarantine); ``detail`` is the human message.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class Trajectory:
    source_format: str
    messages: list[dict[str, Any]]
    prompt_length: int  # messages[:prompt_length] came from the request, the rest from the model run
    task_key: str
    tools: list[dict[str, Any]] | None = None
    reward: float | None = None
    reward_components: dict[str, Any] | None = None
    task_index: int | None = None
    rollout_index: int | None = None
    rollout_id: str | None = None  # the collector's _ng_rollout_id: the rollout's lineage id
    agent_name: str | None = None
    model: str | None = None
    task_type: str | None = None
    completed: bool = True
    status: str | None = None
    mask_sample: bool = False
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    unknown_items: int = 0
    request: dict[str, Any] | None = None  # the original request, for RL (GRPO) rows
    task_inputs: dict[str, Any] | None = None  # the verifier's inputs (materialized inputs), e.g. expected_answer
    # per model call: message_index, prompt_token_ids, generation_token_ids, generation_log_probs
    token_data: list[dict[str, Any]] | None = None
    non_finite_values: int = 0  # NaN / Infinity in the record outside the reward (stored as null)
    quality_flags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    # where the reward came from (NeMo Gym: its verifier, judge models, run config, whether
    # re-verified; sources/nemo_gym.py ``reward_provenance_of``, completed by ingest from the
    # source's files); None: the format records none
    reward_provenance: dict[str, Any] | None = None


# One row of the validated-trajectories table per Trajectory: the columns of every batch's
# Parquet file (``ingest/conversion.py`` builds the rows, ``io/trajectory_table.py`` reads them).
TRAJECTORY_ARROW_SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("source_format", pa.string()),
        ("source_uri", pa.string()),
        ("source_id", pa.string()),
        ("source_line", pa.int64()),
        ("task_key", pa.string()),
        ("prompt_key", pa.string()),
        # buckets.bucket_of(prompt_key): the export shard a row belongs to; a batch's rows are
        # stored ordered by it (ingest/bucket_order.py)
        ("bucket", pa.int16()),
        ("task_index", pa.int64()),
        ("rollout_index", pa.int64()),
        ("rollout_id", pa.string()),
        ("agent_name", pa.string()),
        ("agent_ref", pa.string()),
        ("model", pa.string()),
        ("task_type", pa.string()),
        ("reward", pa.float64()),
        ("reward_components", pa.string()),
        ("completed", pa.bool_()),
        ("status", pa.string()),
        ("mask_sample", pa.bool_()),
        ("messages", pa.string()),
        ("prompt_length", pa.int64()),
        ("role_shape", pa.string()),
        ("tools", pa.string()),
        ("num_messages", pa.int64()),
        ("num_assistant_turns", pa.int64()),
        ("num_tool_calls", pa.int64()),
        ("unanswered_tool_calls", pa.int64()),
        ("tool_results", pa.int64()),
        ("tool_errors", pa.int64()),
        ("has_reasoning", pa.bool_()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("total_tokens", pa.int64()),
        ("messages_chars", pa.int64()),
        ("content_hash", pa.string()),
        ("unknown_items", pa.int64()),
        ("quality_flags", pa.string()),
        ("request", pa.string()),
        ("task_inputs", pa.string()),
        ("token_data", TOKEN_DATA_TYPE),
        ("metadata", pa.string()),
        ("reward_provenance", pa.string()),
    ]
)
