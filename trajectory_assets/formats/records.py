"""One raw line -> a canonical trajectory, whatever the source format (detected per record)."""

from __future__ import annotations

import json
from typing import Any

import orjson

from trajectory_assets.formats import hermes, nemo_gym
from trajectory_assets.formats.trajectory import Rejection, Trajectory


def parse_json_line(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        if "depth limit" in str(error):  # a nesting bomb: no parser should recurse into it
            raise Rejection("nesting_too_deep", "JSON nested deeper than 1024 levels") from None
        fast_error = error
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Rejection("invalid_utf8", f"not valid UTF-8 at byte {error.start}") from None
    try:
        # orjson rejects NaN/Infinity literals; the stdlib accepts them so that a
        # non-finite reward is reported as such rather than as broken JSON
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise Rejection("invalid_json", f"not JSON: {fast_error}") from None


def convert_record(raw: bytes, *, source_id: str) -> Trajectory:
    record = parse_json_line(raw)
    if not isinstance(record, dict):
        raise Rejection("not_an_object", f"a JSON {type(record).__name__}, not an object")
    # the format is told per record, not by file name: one folder may hold both
    if nemo_gym.looks_like_rollout(record):
        return nemo_gym.convert_rollout(record, source_id=source_id)
    if hermes.looks_like_hermes(record):
        return hermes.convert_hermes(record, source_id=source_id)
    raise Rejection(
        "not_a_rollout",
        "neither a NeMo Gym rollout (responses_create_params with response.output or output) nor a Hermes "
        "trajectory (conversations); keys: " + ", ".join(sorted(record)[:12]),
    )
