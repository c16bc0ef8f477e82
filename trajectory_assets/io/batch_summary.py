"""The summary stored beside each batch (``layout.batch_summary``): what ingest read, kept and
rejected, per source; and every batch's summaries read as one, which the export steps and
the report do (no Dagster here)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from trajectory_assets import layout
from trajectory_assets.io.storage import Storage


@dataclass
class SourceSummary:
    uri: str
    source_id: str
    sha256: str
    bytes: int
    records: int
    valid: int
    rejected: int
    blank_lines: int
    error: str | None
    truncated: bool = False  # the stream was cut: what came before the cut was read
    inputs_rows: int | None = None  # rows of its materialized inputs (None: it has none)
    inputs_skipped: int = 0  # materialized input lines that are not usable input rows
    redaction: str | None = None  # the detector that scrubbed its lines, None if none did
    # where its trajectories' rewards came from (``reward_provenance_summary``; None: no format said)
    reward_provenance: dict[str, Any] | None = None


@dataclass
class IngestSummary:
    records_read: int = 0
    records_valid: int = 0
    records_rejected: int = 0
    sources_failed: int = 0
    non_finite_values: int = 0  # NaN / Infinity outside rewards in valid records (stored as null)
    # the trajectory contract runs once per row, here, before a row is written: the rows it
    # checked, and those it sent to the quarantine (``contract_violation``). Every row written
    # passed it, and the ``trajectory_contract`` check reports this result.
    contract_rows_checked: int = 0
    contract_violations: int = 0
    rejected_by_reason: Counter = field(default_factory=Counter)
    redactions_by_type: Counter = field(default_factory=Counter)
    redacted_trajectory_ids: list[str] = field(default_factory=list)
    sources: list[SourceSummary] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rejected_by_reason"] = dict(sorted(self.rejected_by_reason.items()))
        data["redactions_by_type"] = dict(sorted(self.redactions_by_type.items()))
        data["redacted_trajectory_ids"] = sorted(self.redacted_trajectory_ids)
        return data

    @property
    def reconciles(self) -> bool:
        return self.records_read == self.records_valid + self.records_rejected


def merge_summaries(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Several batches' summaries (``IngestSummary.as_dict()``) as one."""
    merged = IngestSummary()
    for summary in summaries:
        merged.records_read += summary["records_read"]
        merged.records_valid += summary["records_valid"]
        merged.records_rejected += summary["records_rejected"]
        merged.sources_failed += summary["sources_failed"]
        merged.non_finite_values += summary.get("non_finite_values", 0)
        merged.contract_rows_checked += summary.get("contract_rows_checked", 0)
        merged.contract_violations += summary.get("contract_violations", 0)
        merged.rejected_by_reason.update(summary["rejected_by_reason"])
        merged.redactions_by_type.update(summary.get("redactions_by_type", {}))
        merged.redacted_trajectory_ids += summary.get("redacted_trajectory_ids", [])
    result = merged.as_dict()
    result["sources"] = [source for summary in summaries for source in summary["sources"]]
    return result


def read_summary(store: Storage, batches: list[str]) -> dict[str, Any]:
    """Every stored batch's ingest counts and sources as one summary."""
    return merge_summaries([store.read_json(layout.batch_summary(key)) for key in batches])
