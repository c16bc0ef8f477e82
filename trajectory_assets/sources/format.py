"""What a source format is: how to tell its records, how to convert one into a canonical
trajectory, and which files its producer writes beside a source file.

A source format is one module of ``trajectory_assets/sources/`` that defines ``FORMAT``, and
one line in ``SOURCES`` (``sources/__init__.py``). Everything else asks the registry: the
conversion of a line (the first format whose ``detect`` accepts a record converts it),
discovery (which files are a source's inputs file and side files), ingest (joining an inputs file's rows to
the records) and the report (the formats' names).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import orjson

from trajectory_assets.chat.trajectory import Rejection, Trajectory
from trajectory_assets.io.file_layouts import FolderRecords, SideFile


@dataclass(frozen=True)
class InputsFile:
    """A file the producer writes beside each source file, ``<stem><suffix>.jsonl`` (or
    ``.jsonl.gz``) beside ``<stem>.jsonl``, whose rows give the records of that file what
    they do not hold themselves (NeMo Gym's materialized inputs: what the verifier was
    given). It is part of the source's batch, never a source of its own."""

    suffix: str
    # a row of it -> (the key of the record it belongs to, what it gives that record);
    # None: the row is not an input row (counted as skipped)
    row: Callable[[Any], tuple[Hashable, dict[str, Any]] | None]


def _refuses_nothing(record: dict[str, Any]) -> Rejection | None:
    return None


@dataclass(frozen=True)
class SourceFormat:
    name: str  # the trajectories' source_format
    shape: str  # what a record of it holds, in a few words (named when no format takes a record)
    detect: Callable[[dict[str, Any]], bool]
    # (record, *, source_id, options, inputs) -> Trajectory, or raises Rejection. ``inputs``:
    # the rows of the source's inputs file by key (None: it has none)
    convert: Callable[..., Trajectory]
    # a record of the format that must never become a trajectory, and why (NeMo Gym's
    # failure rows): asked of every record before any format converts it
    refuse: Callable[[dict[str, Any]], Rejection | None] = _refuses_nothing
    inputs_file: InputsFile | None = None
    # files its producer writes beside a source file that hold no records (metrics,
    # profiling): listed in the source's batch, never read as records
    side_files: tuple[SideFile, ...] = ()
    # a format whose record is a folder of files (a Harbor trial), not a line: how to find
    # them; ``convert`` then also takes such a record as read (``io.file_layouts.RecordFiles``)
    folder_records: FolderRecords | None = None


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


def count_of(value: Any) -> int | None:
    """A count a producer recorded (tokens, calls): a non-negative integer, else None.

    >>> count_of(12), count_of(True), count_of(-1), count_of(3.0)
    (12, None, None, None)
    """
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def responses_request(prompt: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A NeMo Gym ``responses_create_params`` for a chat prompt, so RL rows can come from a
    source that records none: each message's role and text; the Chat Completions tools in the
    Responses API's flat form. A prompt that replays an earlier run's turns (ATIF's copied
    context) keeps their text, not their calls and results: the request replays the context,
    not the tools.

    >>> responses_request([{"role": "user", "content": "Hi"}], [{"type": "function", "function": {"name": "f"}}])
    {'input': [{'role': 'user', 'content': 'Hi'}], 'tools': [{'type': 'function', 'name': 'f'}]}
    """
    request: dict[str, Any] = {"input": [{"role": m["role"], "content": m["content"]} for m in prompt
                                         if m["role"] != "tool"]}
    if tools:
        request["tools"] = [{"type": "function", **tool["function"]} for tool in tools]
    return request
