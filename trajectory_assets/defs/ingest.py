"""Raw rollouts -> validated trajectories + quarantine."""

from __future__ import annotations

import dagster as dg
import orjson
import pandas as pd
import pyarrow.parquet as pq

from schemas.quarantine import QuarantineSchema
from schemas.trajectory import TrajectorySchema
from schemas.validation import validate
from trajectory_assets import __version__, layout
from trajectory_assets.defs.contracts import column_schema, contract_check_result
from trajectory_assets.defs.resources import RolloutSources, TrajectoryStorage
from trajectory_assets.ingest import QUARANTINE_FIELDS, TRAJECTORY_ARROW_SCHEMA, ingest
from trajectory_assets.io.sources import SourceError, SourceFile, discover

GROUP = "rollouts"


@dg.asset(group_name=GROUP, code_version=__version__, kinds={"jsonl"})
def raw_rollouts(sources: RolloutSources, storage: TrajectoryStorage) -> dg.MaterializeResult:
    """The inventory of rollout files found under the configured sources (NeMo Gym
    ``*.jsonl`` / ``*.jsonl.gz``, searched recursively)."""
    try:
        found = discover(sources.paths)
    except SourceError as error:
        raise dg.Failure(description=str(error)) from None
    inventory = [{"uri": s.uri, "source_id": s.source_id} for s in found]
    store = storage.open()
    store.write_bytes(layout.SOURCE_INVENTORY, orjson.dumps(inventory, option=orjson.OPT_INDENT_2))
    return dg.MaterializeResult(
        metadata={
            "files": len(inventory),
            "configured_sources": dg.MetadataValue.json(sources.paths),
            "dagster/uri": store.uri(layout.SOURCE_INVENTORY),
        }
    )


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "validated_trajectories",
            deps=[raw_rollouts],
            group_name=GROUP,
            code_version=__version__,
            kinds={"parquet", "pandera"},
            description="One row per accepted rollout in canonical Chat Completions form "
            "(messages/tools as JSON strings), with reward, task_key, lineage and counts.",
            metadata={"dagster/column_schema": column_schema(TrajectorySchema)},
        ),
        dg.AssetSpec(
            "quarantined_records",
            deps=[raw_rollouts],
            group_name=GROUP,
            code_version=__version__,
            kinds={"jsonl", "pandera"},
            description="Every record that could not become a trajectory: source, line, reason code, "
            "message and the raw line.",
            metadata={"dagster/column_schema": column_schema(QuarantineSchema)},
        ),
    ],
    check_specs=[
        dg.AssetCheckSpec(
            "nothing_lost",
            asset="validated_trajectories",
            blocking=True,
            description="records_read == records_valid + records_rejected, and the files hold exactly those rows",
        )
    ],
)
def validated_trajectories(storage: TrajectoryStorage):
    store = storage.open()
    inventory = orjson.loads(store.read_bytes(layout.SOURCE_INVENTORY))
    sources = [SourceFile(item["uri"], item["source_id"]) for item in inventory]

    quarantined = 0
    with (
        store.parquet_writer(layout.TRAJECTORIES, TRAJECTORY_ARROW_SCHEMA) as parquet,
        store.open_write(layout.QUARANTINE) as quarantine,
    ):

        def write_rejections(rows):
            nonlocal quarantined
            quarantine.write(b"".join(orjson.dumps(row) + b"\n" for row in rows))
            quarantined += len(rows)

        summary = ingest(sources, parquet.write_table, write_rejections)
    store.write_bytes(layout.INGEST_SUMMARY, orjson.dumps(summary.as_dict(), option=orjson.OPT_INDENT_2))

    with store.fs.open(store.path(layout.TRAJECTORIES), "rb") as handle:
        rows_written = pq.ParquetFile(handle).metadata.num_rows
    reconciled = (
        summary.reconciles
        and rows_written == summary.records_valid
        and quarantined == summary.records_rejected + summary.sources_failed
    )
    counts = {
        "records_read": summary.records_read,
        "records_valid": summary.records_valid,
        "records_rejected": summary.records_rejected,
        "sources_failed": summary.sources_failed,
        "trajectory_rows_written": rows_written,
        "quarantine_rows_written": quarantined,
    }
    yield dg.MaterializeResult(
        asset_key="validated_trajectories",
        metadata={
            **counts,
            "dagster/row_count": rows_written,
            "dagster/uri": store.uri(layout.TRAJECTORIES),
            "sources": len(summary.sources),
        },
    )
    yield dg.MaterializeResult(
        asset_key="quarantined_records",
        metadata={
            "dagster/row_count": quarantined,
            "dagster/uri": store.uri(layout.QUARANTINE),
            "rejected_by_reason": dg.MetadataValue.json(dict(summary.rejected_by_reason)),
        },
    )
    yield dg.AssetCheckResult(
        asset_key="validated_trajectories",
        check_name="nothing_lost",
        passed=reconciled,
        metadata=counts,
        description=None if reconciled else "counts do not reconcile: records were lost or double counted",
    )


@dg.asset_check(asset="validated_trajectories", blocking=True, name="trajectory_contract")
def trajectory_contract(storage: TrajectoryStorage) -> dg.AssetCheckResult:
    """Re-validates the written Parquet file against the Pandera contract."""
    frame = storage.open().read_parquet(layout.TRAJECTORIES)
    return contract_check_result(validate(TrajectorySchema, frame), asset="validated_trajectories",
                                 check_name="trajectory_contract")


@dg.asset_check(asset="quarantined_records", blocking=True, name="quarantine_contract")
def quarantine_contract(storage: TrajectoryStorage) -> dg.AssetCheckResult:
    """Every quarantine row names its source, reason and raw text."""
    rows = storage.open().read_jsonl(layout.QUARANTINE)
    frame = pd.DataFrame(rows, columns=list(QUARANTINE_FIELDS)).astype({"line": "Int64"})
    return contract_check_result(validate(QuarantineSchema, frame), asset="quarantined_records",
                                 check_name="quarantine_contract")
