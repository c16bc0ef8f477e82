"""The canonical trajectory every source format converts into, and the rejection signal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
