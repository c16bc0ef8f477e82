"""One batch's stored files: its source record, its trajectories, quarantine and summary, the
records ingest keeps beside them, and the checks on what was stored (no Dagster here:
``defs/ingest.py`` calls these, then reports the events and their metadata).

A batch's code version (``defs/code_versions.py``) is this module's and what it imports.
Decontamination is not among them: its flags are stored with the fingerprint of the rules
and benchmarks that made them, one file per benchmark set, and the export steps recompute
stale ones, so the asset hands the recorders in (``ingest_batch``'s ``flags``) and a change
to those rules re-ingests nothing. The same holds for near-duplicate signatures
(``ingest_batch``'s ``signatures``): a side file of other rules is not read, its batch is
signed from its messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.quarantine import QuarantineSchema
from schemas.raw_rollouts import RawRolloutSchema
from schemas.validation import ContractResult, cast_columns, declared_dtypes, validate
from trajectory_assets import layout
from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
from trajectory_assets.config import PipelineConfig
from trajectory_assets.ingest.bucket_order import bucket_ordered
from trajectory_assets.ingest.conversion import QUARANTINE_FIELDS, ingest
from trajectory_assets.ingest.tool_use import ToolUseRecorder
from trajectory_assets.io.source_files import SourceFile, describe_batch, source_fingerprint, source_from_record
from trajectory_assets.io.storage import Storage
from trajectory_assets.redaction.redactor import Redactor

# (passed, metadata, description if it failed) of a check that is not a contract's
CheckOutcome = tuple[bool, dict, str | None]


class Recorder(Protocol):
    """What ingest finds in each valid trajectory against one benchmark set, stored beside
    the batch (``result``) in that set's file (``fingerprint``)."""

    fingerprint: str

    def add(self, trajectory_id: str, trajectory: Any) -> None: ...

    def result(self) -> dict[str, Any]: ...


def write_source_record(key: str, store: Storage, source: SourceFile) -> dict:
    """raw_rollouts: the batch's files, their SHA-256 and its data version (``describe_batch``),
    and (returned only) the files' fingerprint, which lets the batch sensor know unchanged
    files without reading them. A file that cannot be opened is recorded with its error."""
    # taken before the bytes are read: a file that changes meanwhile gets another fingerprint
    fingerprint = source_fingerprint(source)
    record = describe_batch(source)
    store.write_bytes(layout.batch_source(key), orjson.dumps(record, option=orjson.OPT_INDENT_2))
    return {**record, "fingerprint": fingerprint}


class RowsRecorder(Protocol):
    """What ingest computes from the stored rows of a batch, as they are written, and stores
    beside it (``save``): the MinHash signatures of ``dedup: near`` (``near_signatures.py``)."""

    def add(self, rows: pa.Table) -> None: ...

    def save(self, store: Storage, key: str) -> None: ...


def ingest_batch(key: str, store: Storage, config: PipelineConfig, flags: Sequence[Recorder] = (),
                 signatures: RowsRecorder | None = None) -> None:
    """Writes the batch's trajectories, quarantine and summary. A source that cannot be
    opened gives zero records and one ``unreadable_source`` row (`iter_lines`), not an error.
    ``flags``: decontamination's recorders of their benchmark set's matches, one per set
    configured by the datasets reading the batch (``decontamination.ingest_flags``); each
    sees every valid trajectory once, as it is converted. ``signatures``: with ``dedup: near``
    in a dataset reading the batch, the recorder of its rows' MinHash signatures
    (``near_signatures.NearSignatures``), which sees each stored row once, as it is written."""
    redactor = Redactor.from_config(config.redaction) if config.redaction.enabled else None
    recorded = store.read_json(layout.batch_source(key))
    # a side file that could not be read is left out (its error is in the raw record); a batch
    # of folder records reads exactly the files that were hashed
    source = source_from_record(recorded)
    # a record of the batch's earlier contents must never stand beside its new trajectories
    store.remove(layout.batch_tool_use(key))
    # nor flags found in them, for any benchmark set (one no dataset configures now may be again)
    store.remove_folder(layout.batch_decontamination_folder(key))
    store.remove(layout.batch_decontamination_before_sets(key))
    store.remove(layout.batch_near_signatures(key))
    with (
        store.parquet_writer(layout.batch_trajectories(key), TRAJECTORY_ARROW_SCHEMA) as parquet,
        # the rows are stored ordered by bucket (written when ingest has handed them all over)
        bucket_ordered(parquet) as write_ordered,
        store.open_write(layout.batch_quarantine(key)) as quarantine,
    ):
        def write_trajectories(rows):
            if signatures is not None:  # signed from the very messages strings the file stores
                signatures.add(rows)
            write_ordered(rows)

        def write_rejections(rows):
            quarantine.write(b"".join(orjson.dumps(row) + b"\n" for row in rows))

        # what is found in the conversations as they are converted is stored beside the batch,
        # so later steps need not read the messages again: tool use (the report) and, with
        # benchmarks configured, their matches (the exports)
        tools = ToolUseRecorder()

        def on_trajectory(trajectory_id, trajectory):
            tools.add(trajectory_id, trajectory)
            for recorder in flags:
                recorder.add(trajectory_id, trajectory)

        summary = ingest([source], write_trajectories, write_rejections, redactor=redactor,
                         options=config.conversion, on_trajectory=on_trajectory)
    for recorder in flags:
        store.write_bytes(layout.batch_decontamination(key, recorder.fingerprint), orjson.dumps(recorder.result()))
    if signatures is not None:
        signatures.save(store, key)
    store.write_bytes(layout.batch_tool_use(key), orjson.dumps(tools.result()))
    store.write_bytes(layout.batch_summary(key), orjson.dumps(summary.as_dict(), option=orjson.OPT_INDENT_2))


def batch_counts(key: str, store: Storage, summary: dict) -> dict:
    """The batch's counts as ingest recorded them, and the rows its files really hold."""
    with store.open_read(layout.batch_trajectories(key)) as handle:
        rows_written = pq.ParquetFile(handle).metadata.num_rows
    return {
        "records_read": summary["records_read"],
        "records_valid": summary["records_valid"],
        "records_rejected": summary["records_rejected"],
        "sources_failed": summary["sources_failed"],
        "trajectory_rows_written": rows_written,
        "quarantine_rows_written": store.read_bytes(layout.batch_quarantine(key)).count(b"\n"),
    }


def raw_contract(key: str, store: Storage) -> ContractResult:
    """The batch's raw record against ``RawRolloutSchema``."""
    record = store.read_json(layout.batch_source(key))
    dtypes = declared_dtypes(RawRolloutSchema)
    frame = cast_columns(pd.DataFrame([record], columns=list(dtypes)), dtypes)
    return validate(RawRolloutSchema, frame)


def nothing_lost(counts: dict) -> CheckOutcome:
    """Every record read is a trajectory or a quarantine row, and the files hold exactly those."""
    reconciled = (
        counts["records_read"] == counts["records_valid"] + counts["records_rejected"]
        and counts["trajectory_rows_written"] == counts["records_valid"]
        and counts["quarantine_rows_written"] == counts["records_rejected"] + counts["sources_failed"]
    )
    return reconciled, counts, None if reconciled else "counts do not reconcile: records were lost or double counted"


def trajectory_contract(summary: dict, counts: dict) -> CheckOutcome:
    """The contract ran once per row in ingest, before each row was written (its failures
    went to the quarantine); the file passes when it holds exactly the rows that passed.
    Trajectory ids are hashes of distinct records (byte-identical copies are quarantined as
    ``duplicate_record``), so the per-block checks also make the id unique in the file."""
    checked = summary.get("contract_rows_checked")
    if checked is None:
        return False, {}, "the batch summary predates the contract result: materialize the batch again"
    passed_rows = checked - summary["contract_violations"]
    passed = passed_rows == counts["trajectory_rows_written"]
    metadata = {"rows_checked": checked, "rows_passed": passed_rows,
                "quarantined_as_contract_violation": summary["contract_violations"],
                "rows_in_file": counts["trajectory_rows_written"]}
    return passed, metadata, None if passed else "the file does not hold exactly the rows that passed the contract"


def quarantine_contract(key: str, store: Storage) -> ContractResult:
    """The batch's quarantine rows against ``QuarantineSchema``."""
    rows = store.read_jsonl(layout.batch_quarantine(key))
    frame = cast_columns(pd.DataFrame(rows, columns=list(QUARANTINE_FIELDS)), declared_dtypes(QuarantineSchema))
    return validate(QuarantineSchema, frame)
