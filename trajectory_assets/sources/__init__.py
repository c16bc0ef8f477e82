"""One raw line -> a canonical trajectory, whatever the source format (detected per record)."""

from __future__ import annotations

import json
from typing import Any

import orjson

from trajectory_assets.config import ConversionConfig
from trajectory_assets.sources import hermes, nemo_gym
from trajectory_assets.chat.trajectory import Rejection, Trajectory


def parse_json_line(raw: bytes) -> tuple[Any, int]:
    """(the parsed value, how many NaN / Infinity literals it held).

    orjson rejects those literals; the stdlib accepts them, so a non-finite reward is
    reported as such rather than as broken JSON, and any other one is counted (it is
    stored as null, since JSON has no such number).
    """
    try:
        return orjson.loads(raw), 0
    except orjson.JSONDecodeError as error:
        if "depth limit" in str(error):  # a nesting bomb: no parser should recurse into it
            raise Rejection("nesting_too_deep", "JSON nested deeper than 1024 levels") from None
        fast_error = error
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Rejection("invalid_utf8", f"not valid UTF-8 at byte {error.start}") from None
    non_finite = 0

    def count(literal: str) -> float:
        nonlocal non_finite
        non_finite += 1
        return float(literal)

    try:
        return json.loads(text, parse_constant=count), non_finite
    except (json.JSONDecodeError, RecursionError):
        raise Rejection("invalid_json", f"not JSON: {fast_error}") from None


def convert_record(
    raw: bytes,
    *,
    source_id: str,
    options: ConversionConfig = nemo_gym.DEFAULT_OPTIONS,
    task_inputs: dict[tuple[int, int], dict[str, Any]] | None = None,
) -> Trajectory:
    """``task_inputs``: the source's materialized inputs (NeMo Gym), see ``nemo_gym.convert_rollout``."""
    record, non_finite = parse_json_line(raw)
    if not isinstance(record, dict):
        raise Rejection("not_an_object", f"a JSON {type(record).__name__}, not an object")
    failure = nemo_gym.failure_rejection(record)
    if failure is not None:
        raise failure
    # the format is told per record, not by file name: one folder may hold both
    if nemo_gym.looks_like_rollout(record):
        trajectory = nemo_gym.convert_rollout(record, source_id=source_id, options=options, task_inputs=task_inputs)
    elif hermes.looks_like_hermes(record):
        trajectory = hermes.convert_hermes(record, source_id=source_id)
    else:
        raise Rejection(
            "not_a_rollout",
            "neither a NeMo Gym rollout (responses_create_params with response.output or output) nor a Hermes "
            "trajectory (conversations); keys: " + ", ".join(sorted(record)[:12]),
        )
    if non_finite:
        # a rollout with a non-finite reward was rejected above: these are elsewhere in the
        # record (verifier extras, ...), stored as null, so they are counted and flagged
        trajectory.non_finite_values = non_finite
        trajectory.quality_flags = sorted({*trajectory.quality_flags, "non_finite_number"})
    return trajectory
