"""One batch: stream its sources into validated trajectory rows and quarantine rows. No Dagster here.

Every non-blank line of every source (every record of a batch of folder records: a Harbor
trial, read as its files) becomes exactly one of: a trajectory row or a quarantine row
(``records_read == records_valid + records_rejected``). A source that breaks mid-read adds
one quarantine row with ``line = None`` and is listed with its error.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import pyarrow as pa

from schemas.trajectory import TrajectorySchema
from schemas.fast_pass import validate_fast
from schemas.validation import contract_frame
from trajectory_assets.chat.messages import (
    count_assistant_turns,
    count_tool_calls,
    prompt_key,
    tool_result_counts,
    unanswered_tool_calls,
)
from schemas.shapes import role_shape
from trajectory_assets.buckets import bucket_of
from trajectory_assets.config import ConversionConfig
from trajectory_assets.jsonutil import dumps, loads, sha256_hex
from trajectory_assets.sources import convert_record, inputs_file_named
from trajectory_assets.sources.provenance import UNSAFE_REASON, reward_provenance_summary, source_provenance
from trajectory_assets.redaction.redactor import Redactor
from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA, Rejection, Trajectory
from trajectory_assets.io.batch_summary import IngestSummary, SourceSummary
from trajectory_assets.io.file_layouts import RecordFiles
from trajectory_assets.io.source_files import SourceFile, SourceReadStats, iter_folder_records, iter_lines

QUARANTINE_FIELDS = ("source", "line", "reason", "detail", "raw")
# the columns the trajectory contract declares: only these are turned into pandas to check
# them (the request, tools and metadata payloads would only cost a copy)
CONTRACT_COLUMNS = list(TrajectorySchema.to_schema().columns)
# rows converted before they are checked and written: bounded, so memory does not grow with
# the size of a batch (on real rollouts 2,000 rows peaked ~140 MB higher than 500, no faster)
BATCH_ROWS = 500


def trajectory_row(trajectory: Trajectory, *, trajectory_id: str, source: SourceFile, line: int) -> dict[str, Any]:
    # the JSON columns stay UTF-8 bytes: Arrow stores them as they are in a string column, and
    # the hashes read them (a str of each cost a decode, then Arrow's encode back)
    messages_json = dumps(trajectory.messages)
    tools_json = _dumps_or_none(trajectory.tools)
    agent_ref = trajectory.metadata.pop("agent_ref", None)
    tool_results, tool_errors = tool_result_counts(trajectory.messages)
    # what the split is by: a task index only means something inside one collection
    key = prompt_key(trajectory.messages[: trajectory.prompt_length], trajectory.tools)
    return {
        "trajectory_id": trajectory_id,
        "source_format": trajectory.source_format,
        "source_uri": source.uri,
        "source_id": source.source_id,
        "source_line": line,
        "task_key": trajectory.task_key,
        "prompt_key": key,
        "bucket": bucket_of(key),
        "task_index": trajectory.task_index,
        "rollout_index": trajectory.rollout_index,
        "rollout_id": trajectory.rollout_id,
        "agent_name": trajectory.agent_name,
        "agent_ref": None if agent_ref is None else dumps(agent_ref),
        "model": trajectory.model,
        "task_type": trajectory.task_type,
        "reward": trajectory.reward,
        "reward_components": _dumps_or_none(trajectory.reward_components),
        "completed": trajectory.completed,
        "status": trajectory.status,
        "mask_sample": trajectory.mask_sample,
        "messages": messages_json,
        "prompt_length": trajectory.prompt_length,
        "role_shape": role_shape(trajectory.messages),
        "tools": tools_json,
        "num_messages": len(trajectory.messages),
        "num_assistant_turns": count_assistant_turns(trajectory.messages),
        "num_tool_calls": count_tool_calls(trajectory.messages),
        "unanswered_tool_calls": unanswered_tool_calls(trajectory.messages),
        "tool_results": tool_results,
        "tool_errors": tool_errors,
        "has_reasoning": any("reasoning_content" in m for m in trajectory.messages),
        "input_tokens": trajectory.input_tokens,
        "output_tokens": trajectory.output_tokens,
        "total_tokens": trajectory.total_tokens,
        "messages_chars": _characters(messages_json),
        # what exact de-duplication compares: the conversation and its tools, not the raw
        # line (two rollouts with the same conversation differ in ids and rewards)
        "content_hash": sha256_hex(messages_json + b"\n" + (tools_json or b"")),
        "unknown_items": trajectory.unknown_items,
        "quality_flags": ",".join(trajectory.quality_flags),
        "request": _dumps_or_none(trajectory.request),
        "task_inputs": _dumps_or_none(trajectory.task_inputs),
        "token_data": trajectory.token_data,
        "metadata": dumps(trajectory.metadata),
        "reward_provenance": _dumps_or_none(trajectory.reward_provenance),
    }


def quarantine_row(source: str, line: int | None, reason: str, detail: str, raw: bytes) -> dict[str, Any]:
    return {
        "source": source,
        "line": line,
        "reason": reason,
        "detail": detail,
        # invalid UTF-8 stays visible as \x escapes instead of being lost
        "raw": raw.decode("utf-8", errors="backslashreplace"),
    }


def ingest(
    sources: Iterable[SourceFile],
    write_trajectories: Callable[[pa.Table], None],
    write_rejections: Callable[[list[dict[str, Any]]], None],
    batch_rows: int | None = None,
    redactor: Redactor | None = None,
    options: ConversionConfig | None = None,
    on_trajectory: Callable[[str, Trajectory], None] | None = None,
) -> IngestSummary:
    """Convert every record of every source, handing finished batches to the writers.

    With a redactor, each line is scrubbed of secrets right after its id (the hash of the
    original bytes) is taken, so nothing stored, quarantined or exported holds them (the
    materialized inputs beside a source too). ``on_trajectory`` sees each valid trajectory
    (its id and conversation) as it is converted: benchmark decontamination
    (``ingest/decontamination.py``, ``IngestFlags``).
    """
    options = options or ConversionConfig()
    batch_rows = batch_rows or BATCH_ROWS  # read here so a test can shrink it for a whole run
    summary = IngestSummary()
    seen_ids: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    pending_raw: list[bytes] = []  # raw text of each pending row, in case the contract rejects it
    rejected: list[dict[str, Any]] = []
    per_source: dict[str, Counter] = {}

    def flush() -> None:
        if rows:
            table = pa.Table.from_pylist(rows, schema=TRAJECTORY_ARROW_SCHEMA)
            # nearly every block passes: pandera's own run, with its failure reports, only when one fails
            contract = validate_fast(TrajectorySchema, contract_frame(table.select(CONTRACT_COLUMNS)))
            if contract.table_errors:  # a whole-table failure is a bug in the converter, not bad input
                raise RuntimeError(f"trajectory contract failed for a whole batch: {contract.table_errors}")
            summary.contract_rows_checked += len(rows)
            summary.contract_violations += len(contract.failures)
            if contract.failures:
                bad = sorted(int(i) for i in contract.failures)
                for index in bad:
                    row = rows[index]
                    summary.records_valid -= 1
                    per_source[row["source_uri"]]["valid"] -= 1
                    reject_row(row["source_uri"], row["source_line"], "contract_violation",
                               contract.failures[index], pending_raw[index])
                keep = sorted(set(range(len(rows))) - set(bad))
                table = table.take(keep)
            write_trajectories(table)
            rows.clear()
            pending_raw.clear()
        if rejected:
            write_rejections(list(rejected))
            rejected.clear()

    def reject_row(uri: str, line: int | None, reason: str, detail: str, raw: bytes) -> None:
        summary.records_rejected += 1
        summary.rejected_by_reason[reason] += 1
        per_source[uri]["rejected"] += 1
        rejected.append(quarantine_row(uri, line, reason, detail, raw))

    summaries: list[tuple[SourceFile, SourceReadStats]] = []
    def scrub(raw: bytes, trajectory_id: str) -> bytes:
        if redactor is None:
            return raw
        raw, found = redactor.redact(raw)
        if found:
            summary.redactions_by_type.update(found)
            summary.redacted_trajectory_ids.append(trajectory_id)
        return raw

    # per path, the last file scrubbed: a file every record of a batch holds (NeMo Gym's export
    # manifest) is scrubbed once, and the memory kept is one file per path name
    last_scrubbed: dict[str, tuple[str, str, Counter]] = {}

    def scrub_files(record: RecordFiles, trajectory_id: str) -> RecordFiles:
        """The record with each of its files scrubbed as a line is (and counted per record)."""
        if redactor is None:
            return record
        files = {}
        for path, text in record.files.items():
            sha256 = record.sha256s.get(path)
            if sha256 is not None and last_scrubbed.get(path, ("",))[0] == sha256:
                _, files[path], found = last_scrubbed[path]
            else:
                scrubbed, found = redactor.redact(text.encode())
                files[path] = text if not found else scrubbed.decode("utf-8", errors="backslashreplace")
                if sha256 is not None:
                    last_scrubbed[path] = (sha256, files[path], found)
            if found:
                summary.redactions_by_type.update(found)
                if trajectory_id not in summary.redacted_trajectory_ids[-1:]:
                    summary.redacted_trajectory_ids.append(trajectory_id)
        return dataclasses.replace(record, files=files)

    inputs_read: dict[str, tuple[int, int]] = {}
    provenances: dict[str, list[dict[str, Any]]] = {}
    for source in sources:
        stats = SourceReadStats()
        counts = per_source[source.uri] = Counter()
        summaries.append((source, stats))
        inputs = None
        if source.inputs_uri is not None:
            inputs, skipped = read_inputs(source.inputs_uri, scrub)
            inputs_read[source.uri] = (len(inputs), skipped)
        provenance = source_provenance(source)
        rewarded = provenances[source.uri] = []
        refused = provenance["forced"] and not options.read_unsafe_reverified
        records = iter_folder_records(source, stats) if source.records else iter_lines(source, stats)
        for line, record in records:
            summary.records_read += 1
            counts["records"] += 1
            if isinstance(record, RecordFiles):  # a record made of files (a Harbor trial)
                trajectory_id = record.digest()[:32]
                record = scrub_files(record, trajectory_id)
                raw = record.quarantine_raw().encode()
            else:
                trajectory_id = sha256_hex(record)[:32]
                record = raw = scrub(record, trajectory_id)
            first_seen = seen_ids.get(trajectory_id)
            if first_seen is not None:
                reject_row(source.uri, line, "duplicate_record", f"byte-identical to {first_seen}", raw)
                continue
            if refused:  # gym eval reverify --force: read only when the config says so
                reject_row(source.uri, line, UNSAFE_REASON, "a forced re-verification (unsafe_): "
                           "conversion.read_unsafe_reverified is off", raw)
                continue
            try:
                trajectory = convert_record(record, source_id=source.source_id, options=options, inputs=inputs)
                if trajectory.reward_provenance is not None:
                    trajectory.reward_provenance = {**trajectory.reward_provenance, **provenance}
                    rewarded.append(trajectory.reward_provenance)
                row = trajectory_row(trajectory, trajectory_id=trajectory_id, source=source, line=line)
            except Rejection as rejection:
                reject_row(source.uri, line, rejection.reason, rejection.detail, raw)
                continue
            except Exception as error:  # hostile structure must never abort the run
                where = traceback.extract_tb(error.__traceback__)[-1]
                detail = f"{type(error).__name__}: {error} (at {where.name}:{where.lineno})"
                too_deep = isinstance(error, RecursionError) or "Recursion limit" in str(error)
                reject_row(source.uri, line, "nesting_too_deep" if too_deep else "invalid_structure", detail, raw)
                continue
            seen_ids[trajectory_id] = f"{source.uri}:{line}"
            if on_trajectory is not None:
                on_trajectory(trajectory_id, trajectory)
            summary.non_finite_values += trajectory.non_finite_values
            rows.append(row)
            pending_raw.append(raw)
            summary.records_valid += 1
            counts["valid"] += 1
            if len(rows) >= batch_rows:
                flush()
        if stats.partial_record is not None:  # the record the cut broke off: kept, not dropped
            line, raw = stats.partial_record
            summary.records_read += 1
            counts["records"] += 1
            reject_row(source.uri, line, "truncated_record", f"the source was cut inside this record ({stats.error})",
                       scrub(raw, sha256_hex(raw)[:32]))
        if stats.error:
            summary.sources_failed += 1
            rejected.append(quarantine_row(source.uri, None, "unreadable_source", stats.error, b""))
    flush()
    summary.sources = [
        SourceSummary(
            uri=source.uri,
            source_id=source.source_id,
            sha256=stats.sha256,
            bytes=stats.bytes_read,
            records=per_source[source.uri]["records"],
            valid=per_source[source.uri]["valid"],
            rejected=per_source[source.uri]["rejected"],
            blank_lines=stats.blank_lines,
            error=stats.error,
            truncated=stats.truncated,
            inputs_rows=inputs_read[source.uri][0] if source.uri in inputs_read else None,
            inputs_skipped=inputs_read.get(source.uri, (0, 0))[1],
            redaction=None if redactor is None else redactor.detector,
            reward_provenance=reward_provenance_summary(provenances.get(source.uri, [])),
        )
        for source, stats in summaries
    ]
    return summary


def read_inputs(uri: str, scrub: Callable[[bytes, str], bytes]) -> tuple[dict[Hashable, dict[str, Any]], int]:
    """A source's inputs file (its source format's ``InputsFile``, told by its name): (what
    each row gives the records, by their key; how many lines are not usable input rows).
    Each line is scrubbed of secrets first, as records are."""
    inputs_file = inputs_file_named(uri.rsplit("/", 1)[-1])
    inputs: dict[Hashable, dict[str, Any]] = {}
    skipped = 0
    stats = SourceReadStats()
    for _, raw in iter_lines(SourceFile(uri, uri), stats):
        try:
            found = inputs_file.row(loads(scrub(raw, sha256_hex(raw)[:32])))
        except ValueError:
            found = None
        if found is None:
            skipped += 1
            continue
        key, given = found
        inputs[key] = given
    return inputs, skipped + (stats.partial_record is not None)


def _dumps_or_none(value: Any) -> bytes | None:
    return None if value is None else dumps(value)


def _characters(utf8: bytes) -> int:
    """The length of the text that UTF-8 bytes hold, in characters (``len`` of the str)."""
    return len(utf8) if utf8.isascii() else len(utf8.decode())
