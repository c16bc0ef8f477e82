"""Per-batch assets: raw rollouts -> validated trajectories + quarantine.

One dynamic partition per source file (a *batch*), so a new batch is processed alone and a
bad batch never blocks the others. The sensor in ``defs/automation.py`` registers batches.
"""


import dagster as dg
import orjson
import pandas as pd
import pyarrow.parquet as pq

from schemas.quarantine import QuarantineSchema
from schemas.raw_rollouts import RawRolloutSchema
from schemas.trajectory import TrajectorySchema
from schemas.validation import ChunkedContract, validate
from trajectory_assets import __version__, layout
from trajectory_assets.defs.batches import STORAGE_RETRY, storage_faults_only
from trajectory_assets.defs.contracts import column_schema, contract_check_result
from trajectory_assets.defs.resources import PipelineSettings, RolloutSources, TrajectoryStorage
from trajectory_assets.formats.redaction import Redactor
from trajectory_assets.ingest import CONTRACT_COLUMNS, QUARANTINE_FIELDS, TRAJECTORY_ARROW_SCHEMA, ingest
from trajectory_assets.io.sources import SourceError, SourceFile, batch_key, describe_batch, discover
from trajectory_assets.io.trajectory_table import CHUNK_ROWS

GROUP = "rollouts"
rollout_batches = dg.DynamicPartitionsDefinition(name=layout.BATCH_PARTITIONS)


def find_batch_source(sources: RolloutSources, key: str) -> SourceFile:
    try:
        found = discover(sources.paths)
    except SourceError as error:
        raise dg.Failure(description=str(error), allow_retries=False) from None
    for source in found:
        if batch_key(source.source_id) == key:
            return source
    raise dg.Failure(description=f"batch {key!r} is no longer among the configured sources {sources.paths}",
                     allow_retries=False)


@dg.asset(
    partitions_def=rollout_batches,
    group_name=GROUP,
    code_version=__version__,
    kinds={"jsonl", "pandera"},
    retry_policy=STORAGE_RETRY,
    metadata={"dagster/column_schema": column_schema(RawRolloutSchema)},
)
def raw_rollouts(context: dg.AssetExecutionContext, sources: RolloutSources, storage: TrajectoryStorage):
    """One rollout file (``*.jsonl`` / ``*.jsonl.gz``): its URI, size and SHA-256, and those
    of NeMo Gym's materialized inputs when they lie beside it.

    Their SHA-256 is the batch's data version, so Dagster knows when a batch really changed.
    A source that cannot be opened (a broken symlink, no permission, a missing object) is
    recorded with its error instead of failing the batch: `validated_trajectories` then
    reports it as an ``unreadable_source`` and the other batches and the datasets go on.
    """
    with storage_faults_only():
        source = find_batch_source(sources, context.partition_key)
        record = describe_batch(source)
        for problem in (record["error"], record["inputs_error"]):
            if problem:
                context.log.warning(f"{source.uri}: {problem}")
        store = storage.open()
        store.write_bytes(layout.batch_source(context.partition_key), orjson.dumps(record, option=orjson.OPT_INDENT_2))
    return dg.MaterializeResult(
        metadata={**{key: value for key, value in record.items() if value is not None},
                  "dagster/uri": store.uri(layout.batch_source(context.partition_key))},
        data_version=dg.DataVersion(record["data_version"]),
    )


@dg.asset_check(asset="raw_rollouts", blocking=True, name="raw_rollouts_contract",
                partitions_def=rollout_batches, retry_policy=STORAGE_RETRY)
def raw_rollouts_contract(context: dg.AssetCheckExecutionContext, storage: TrajectoryStorage) -> dg.AssetCheckResult:
    """The batch's raw record names its file, hashes and data version consistently."""
    with storage_faults_only():
        record = orjson.loads(storage.open().read_bytes(layout.batch_source(context.partition_key)))
    frame = pd.DataFrame([record], columns=list(RawRolloutSchema.to_schema().columns)).astype({"bytes": "Int64"})
    return contract_check_result(validate(RawRolloutSchema, frame), asset="raw_rollouts",
                                 check_name="raw_rollouts_contract")


@dg.multi_asset(
    partitions_def=rollout_batches,
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
    retry_policy=STORAGE_RETRY,
)
def validated_trajectories(context: dg.AssetExecutionContext, storage: TrajectoryStorage, settings: PipelineSettings):
    with storage_faults_only():
        summary, quarantined, rows_written, source = _ingest_batch(context.partition_key, storage, settings)
    yield from _batch_results(context.partition_key, storage, summary, quarantined, rows_written, source)


def _ingest_batch(key: str, storage: TrajectoryStorage, settings: PipelineSettings):
    """Writes the batch's trajectories, quarantine and summary. A source that cannot be
    opened gives zero records and one ``unreadable_source`` row (`iter_lines`), not an error."""
    try:
        config = settings.load()
    except dg.Failure as error:  # the config cannot be used: retrying won't change it
        raise dg.Failure(description=error.description, allow_retries=False) from None
    redactor = Redactor.from_config(config.redaction) if config.redaction.enabled else None
    store = storage.open()
    recorded = orjson.loads(store.read_bytes(layout.batch_source(key)))
    # a side file that could not be read is left out (its error is in the raw record)
    inputs_uri = recorded.get("inputs_uri") if recorded.get("inputs_sha256") else None
    source = SourceFile(recorded["uri"], recorded["source_id"], inputs_uri)

    quarantined = 0
    with (
        store.parquet_writer(layout.batch_trajectories(key), TRAJECTORY_ARROW_SCHEMA) as parquet,
        store.open_write(layout.batch_quarantine(key)) as quarantine,
    ):

        def write_rejections(rows):
            nonlocal quarantined
            quarantine.write(b"".join(orjson.dumps(row) + b"\n" for row in rows))
            quarantined += len(rows)

        summary = ingest([source], parquet.write_table, write_rejections, redactor=redactor,
                         options=config.conversion)
    store.write_bytes(layout.batch_summary(key), orjson.dumps(summary.as_dict(), option=orjson.OPT_INDENT_2))

    with store.fs.open(store.path(layout.batch_trajectories(key)), "rb") as handle:
        rows_written = pq.ParquetFile(handle).metadata.num_rows
    return summary, quarantined, rows_written, source


def _batch_results(key: str, storage: TrajectoryStorage, summary, quarantined: int, rows_written: int,
                   source: SourceFile):
    store = storage.open()
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
            "source": source.uri,
            "dagster/row_count": rows_written,
            "dagster/uri": store.uri(layout.batch_trajectories(key)),
        },
    )
    yield dg.MaterializeResult(
        asset_key="quarantined_records",
        metadata={
            "dagster/row_count": quarantined,
            "dagster/uri": store.uri(layout.batch_quarantine(key)),
            "rejected_by_reason": dg.MetadataValue.json(dict(summary.rejected_by_reason)),
            "redactions_by_type": dg.MetadataValue.json(dict(summary.redactions_by_type)),
        },
    )
    yield dg.AssetCheckResult(
        asset_key="validated_trajectories",
        check_name="nothing_lost",
        passed=reconciled,
        metadata=counts,
        description=None if reconciled else "counts do not reconcile: records were lost or double counted",
    )


@dg.asset_check(asset="validated_trajectories", blocking=True, name="trajectory_contract",
                partitions_def=rollout_batches, retry_policy=STORAGE_RETRY)
def trajectory_contract(context: dg.AssetCheckExecutionContext, storage: TrajectoryStorage) -> dg.AssetCheckResult:
    """Re-validates the written Parquet file of the batch against the Pandera contract, chunk
    by chunk (a batch file can be of any size), reading only the contract's columns."""
    contract = ChunkedContract(TrajectorySchema)
    with storage_faults_only():
        path = layout.batch_trajectories(context.partition_key)
        for chunk in storage.open().iter_parquet(path, columns=CONTRACT_COLUMNS, batch_rows=CHUNK_ROWS):
            contract.check(chunk)
    return contract_check_result(contract.result(), asset="validated_trajectories", check_name="trajectory_contract")


@dg.asset_check(asset="quarantined_records", blocking=True, name="quarantine_contract",
                partitions_def=rollout_batches, retry_policy=STORAGE_RETRY)
def quarantine_contract(context: dg.AssetCheckExecutionContext, storage: TrajectoryStorage) -> dg.AssetCheckResult:
    """Every quarantine row of the batch names its source, reason and raw text."""
    with storage_faults_only():
        rows = storage.open().read_jsonl(layout.batch_quarantine(context.partition_key))
    frame = pd.DataFrame(rows, columns=list(QUARANTINE_FIELDS)).astype({"line": "Int64"})
    return contract_check_result(validate(QuarantineSchema, frame), asset="quarantined_records",
                                 check_name="quarantine_contract")
