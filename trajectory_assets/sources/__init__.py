"""The source formats, and one raw line -> a canonical trajectory, whatever its format.

A source format is one module of this package that defines ``FORMAT`` (``format.py`` says
what that holds), and one line in :data:`SOURCES`. A record's format is told per record, not
by file name (one folder may hold several): the first format whose ``detect`` accepts it
converts it.

>>> [source.name for source in SOURCES]
['nemo_gym', 'hermes', 'atif']
>>> INPUTS_SUFFIXES
('_materialized_inputs',)
>>> [side.pattern for side in SIDE_FILES][:2]
['{stem}_aggregate_metrics.json', '{stem}_reward_profiling.jsonl']
>>> REPORT_SECTIONS
{'hermes': 'Hermes'}
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from trajectory_assets.chat.trajectory import Rejection, Trajectory
from trajectory_assets.config import ConversionConfig
from trajectory_assets.sources import atif, hermes, nemo_gym
from trajectory_assets.io.file_layouts import FolderRecords, RecordFiles, SideFile
from trajectory_assets.io.source_files import SourceFile, discover
from trajectory_assets.sources.format import DEFAULT_AGENT_REF_SETTING, InputsFile, SourceFormat, parse_json_line

# the source formats, in the order a record is offered to them
SOURCES: tuple[SourceFormat, ...] = (
    nemo_gym.FORMAT,
    hermes.FORMAT,
    atif.FORMAT,
)
SOURCES_BY_NAME: dict[str, SourceFormat] = {source.name: source for source in SOURCES}
# what a file beside a source file is named when it is that source's inputs file
INPUTS_SUFFIXES: tuple[str, ...] = tuple(source.inputs_file.suffix for source in SOURCES if source.inputs_file)
# the files a producer writes beside a source file that hold no records (``SideFile``)
SIDE_FILES: tuple[SideFile, ...] = tuple(side for source in SOURCES for side in source.side_files)
# how the formats whose records are folders of files lay them out (``FolderRecords``)
FOLDER_RECORDS: tuple[FolderRecords, ...] = tuple(source.folder_records for source in SOURCES if source.folder_records)
# format name -> the title of the stats report's section of its own (``SourceFormat.report_section``)
REPORT_SECTIONS: dict[str, str] = {source.name: source.report_section for source in SOURCES if source.report_section}


def agent_ref_routing(source_format: str) -> tuple[str, bool]:
    """Where the GRPO tasks of the format of that name go, as its ``FORMAT`` declares: (the
    ``grpo`` setting naming their agent, whether a record's own agent comes first). A name no
    format has (a table stored by another checkout) routes as a format that declares nothing.

    >>> agent_ref_routing("nemo_gym"), agent_ref_routing("hermes"), agent_ref_routing("gone")
    (('default_agent_ref', True), ('hermes_agent_ref', False), ('default_agent_ref', False))
    """
    source = SOURCES_BY_NAME.get(source_format)
    if source is None:
        return DEFAULT_AGENT_REF_SETTING, False
    return source.agent_ref_setting, source.agent_ref_from_record


def discover_sources(paths: list[str]) -> list[SourceFile]:
    """``io.source_files.discover`` of ``paths`` with every source format's files: their inputs
    files, side files and record folders (the CLI, the batch sensor and the batch step alike)."""
    return discover(paths, INPUTS_SUFFIXES, SIDE_FILES, FOLDER_RECORDS)


# the quarantine reasons that say a record is of no known format (rather than a broken record
# of one; a copy of a line counts as its first copy does): a source whose every record has one
# of them recognised nothing (``recognised_records``)
UNRECOGNISED_REASONS = frozenset({"not_a_rollout", "not_an_object", "invalid_json", "invalid_utf8",
                                  "nesting_too_deep", "duplicate_record"})


def formats_tried() -> str:
    """What a record must be for a format to read it, each format named: said when a source
    recognises nothing.

    >>> formats_tried().split("; ")[0].split(" (")[0]
    'nemo_gym'
    """
    return "; ".join(f"{source.name} ({source.shape})" for source in SOURCES)


def recognised_records(summaries: list[dict[str, Any]]) -> int | None:
    """How many records of some format the batches' ingest summaries (``IngestSummary.as_dict``)
    hold: the valid ones and those rejected for a reason of their format. None when they
    cannot say nothing was recognised: no record at all (an empty file), or a source that
    could not be read (reported as unreadable instead).

    >>> recognised_records([{"records_valid": 0, "rejected_by_reason": {"not_a_rollout": 3},
    ...                      "records_read": 3, "sources": [{"error": None}]}])
    0
    >>> recognised_records([{"records_valid": 0, "rejected_by_reason": {"missing_reward": 1},
    ...                      "records_read": 1, "sources": [{"error": None}]}])
    1
    """
    if not any(summary["records_read"] for summary in summaries) or any(
            source.get("error") for summary in summaries for source in summary["sources"]):
        return None
    return sum(summary["records_valid"] + sum(count for reason, count in summary["rejected_by_reason"].items()
                                               if reason not in UNRECOGNISED_REASONS)
               for summary in summaries)


def inputs_file_named(name: str) -> InputsFile | None:
    """The inputs file a file of that name is, by its stem's suffix (None: none)."""
    stem = name.removesuffix(".gz").removesuffix(".jsonl")
    return next((source.inputs_file for source in SOURCES
                 if source.inputs_file and stem.endswith(source.inputs_file.suffix)), None)


def convert_record(
    raw: bytes | RecordFiles,
    *,
    source_id: str,
    options: ConversionConfig = nemo_gym.DEFAULT_OPTIONS,
    inputs: Mapping[Hashable, dict[str, Any]] | None = None,
) -> Trajectory:
    """One line, or one record made of files (``RecordFiles``: converted by the format whose
    files they are, the one declaring ``folder_records``). ``inputs``: the rows of the
    source's inputs file by key (see ``InputsFile``)."""
    if isinstance(raw, RecordFiles):
        folder_format = next(source for source in SOURCES if source.folder_records is not None)
        return folder_format.convert(raw, source_id=source_id, options=options, inputs=inputs)
    record, non_finite = parse_json_line(raw)
    if not isinstance(record, dict):
        raise Rejection("not_an_object", f"a JSON {type(record).__name__}, not an object")
    for source in SOURCES:
        refused = source.refuse(record)
        if refused is not None:
            raise refused
    source = next((source for source in SOURCES if source.detect(record)), None)
    if source is None:
        raise Rejection("not_a_rollout", "neither " + " nor ".join(source.shape for source in SOURCES)
                        + "; keys: " + ", ".join(sorted(record)[:12]))
    trajectory = source.convert(record, source_id=source_id, options=options, inputs=inputs)
    if non_finite:
        # a rollout with a non-finite reward was rejected above: these are elsewhere in the
        # record (verifier extras, ...), stored as null, so they are counted and flagged
        trajectory.non_finite_values = non_finite
        trajectory.quality_flags = sorted({*trajectory.quality_flags, "non_finite_number"})
    return trajectory
