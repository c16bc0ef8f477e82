"""What a source format is: how to tell its records, how to convert one into a canonical
trajectory, and which files its producer writes beside a source file.

A source format is one module of ``trajectory_assets/sources/`` that defines ``FORMAT``, and
one line in ``SOURCES`` (``sources/__init__.py``). Everything else asks the registry: the
conversion of a line (the first format whose ``detect`` accepts a record converts it),
discovery (which files are a source's inputs file and side files), ingest (joining an inputs file's rows to
the records), the exports (which agent a GRPO task goes to) and the report (the formats'
names, and the section a format has of its own). No export or report module names a format.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import orjson

from trajectory_assets.chat.trajectory import Rejection, Trajectory
from trajectory_assets.config import GrpoConfig
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


# where the GRPO tasks of a format that names no setting of its own go
DEFAULT_AGENT_REF_SETTING = "default_agent_ref"


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
    # GRPO: the ``grpo`` setting (``config.GrpoConfig``) naming the NeMo Gym agent server its
    # tasks go to (a row's ``agent_ref``); null there leaves them out, counted as
    # ``no_agent_ref``. A format that names none goes to ``grpo.default_agent_ref`` (null by default)
    agent_ref_setting: str = DEFAULT_AGENT_REF_SETTING
    # its records name a NeMo Gym agent themselves (a rollout's ``agent_ref``, else its agent's
    # name), which comes before the setting; a Hermes or Harbor agent is no NeMo Gym agent server
    agent_ref_from_record: bool = False
    # the title of a section of its own in the stats report (its trajectories' completion,
    # reasoning coverage, quality flags and tool use; in stats.json under its name); None: none
    report_section: str | None = None

    def __post_init__(self) -> None:
        settings = [name for name in GrpoConfig.model_fields if name.endswith("_agent_ref")]
        if self.agent_ref_setting not in settings:
            raise ValueError(f"source format {self.name}: grpo.{self.agent_ref_setting} is no agent setting "
                             f"of the config ({', '.join(settings)})")


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

