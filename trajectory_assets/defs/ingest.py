"""Per-batch assets: raw rollouts -> validated trajectories + quarantine, with their checks.

One dynamic partition per source file (a *batch*): each batch has its own materializations,
data version, lineage and check results, and a bad batch never blocks the others. A run
takes a range of batches (the sensor and the CLI group new batches, see ``run_plan.py``), so
a run's start-up is paid once for many files; the step reports each batch's events itself
(``batch_events.py``). The sensor in ``automation.py`` registers batches.
"""

import warnings

import dagster as dg

from schemas.quarantine import QuarantineSchema
from schemas.raw_rollouts import RawRolloutSchema
from schemas.trajectory import column_descriptions as trajectory_column_descriptions
from trajectory_assets import layout
from trajectory_assets.config import ConfigError
from trajectory_assets.ingest import batch
from trajectory_assets.ingest.decontamination import ingest_flags
from trajectory_assets.ingest.near_signatures import NearSignatures
from trajectory_assets.defs.batches import QUARANTINE, RAW, TRAJECTORIES, asset_key
from trajectory_assets.defs.batch_events import batches_reported, report_check, report_materialization
from trajectory_assets.defs.contracts import column_schema, contract_metadata, written_column_schema
from trajectory_assets.defs.resources import PipelineSettings, RolloutSources, TrajectoryStorage
from trajectory_assets.defs.retries import (
    STORAGE_POOL,
    STORAGE_RETRY,
    RunInterrupted,
    stop_if_canceling,
    storage_faults_only,
)
from trajectory_assets.runs.run_plan import BATCHES_PER_RUN
from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
from trajectory_assets.io.source_files import SourceError, SourceFile, batch_key
from trajectory_assets.io.storage import Storage, StorageError
from trajectory_assets.project import ENVIRONMENT, partitions_name, resource_key
from trajectory_assets.sources import SOURCES, discover_sources, formats_tried, recognised_records

GROUP = "rollouts"


class IngestKeys:
    """The asset and check keys of one source's batch assets (unprefixed for the environment's)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.raw, self.trajectories, self.quarantine = (asset_key(source, base) for base in (RAW, TRAJECTORIES,
                                                                                           QUARANTINE))
        self.raw_contract = dg.AssetCheckKey(self.raw, "raw_rollouts_contract")
        self.nothing_lost = dg.AssetCheckKey(self.trajectories, "nothing_lost")
        self.trajectory_contract = dg.AssetCheckKey(self.trajectories, "trajectory_contract")
        self.source_recognised = dg.AssetCheckKey(self.trajectories, "source_recognised")
        self.quarantine_contract = dg.AssetCheckKey(self.quarantine, "quarantine_contract")


def find_batch_source(sources: RolloutSources, key: str) -> SourceFile:
    try:
        found = discover_sources(sources.paths)
    except SourceError as error:
        raise dg.Failure(description=str(error), allow_retries=False) from None
    for source in found:
        if batch_key(source.source_id) == key:
            return source
    raise dg.Failure(description=f"batch {key!r} is no longer among the configured sources {sources.paths}",
                     allow_retries=False)


def _batch_check(key: dg.AssetCheckKey, partitions: dg.PartitionsDefinition, description: str,
                 blocking: bool = True) -> dg.AssetCheckSpec:
    """A check evaluated per batch partition (blocking unless said otherwise)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # partitioned check specs are marked preview in Dagster 1.13
        return dg.AssetCheckSpec(key.name, asset=key.asset_key, blocking=blocking, partitions_def=partitions,
                                 description=description)


def build_ingest_assets(source: str = ENVIRONMENT) -> dg.AssetsDefinition:
    """The batch assets of the source ``source``: one step for its three assets, partitioned by
    its own batches; its resources are ``resource_key(source, ...)``."""
    keys = IngestKeys(source)
    partitions = dg.DynamicPartitionsDefinition(name=partitions_name(source))
    resources = {kind: resource_key(source, kind) for kind in ("sources", "storage", "settings")}
    prefix = f"{source}_" if source else ""

    @dg.multi_asset(
        name=f"{prefix}ingest_batches",
        partitions_def=partitions,
        specs=[
            dg.AssetSpec(
                keys.raw,
                group_name=source or GROUP,
                kinds={"jsonl", "pandera"},
                description="One rollout file (``*.jsonl`` / ``*.jsonl.gz``; each record "
                + "; ".join(f"``{format.name}``: {format.shape}" for format in SOURCES)
                + "), or one Harbor job folder (each trial a record): its URI, size and "
                "SHA-256, and those of the files its producer writes beside it; together they are the "
                "batch's data version, so Dagster knows when a batch really changed. A source that cannot be "
                "opened is recorded with its error instead of failing the batch: `validated_trajectories` reports "
                "it as an ``unreadable_source``.",
                metadata={"dagster/column_schema": column_schema(RawRolloutSchema)},
            ),
            dg.AssetSpec(
                keys.trajectories,
                deps=[keys.raw],
                group_name=source or GROUP,
                kinds={"parquet", "pandera"},
                description="One row per accepted rollout in canonical Chat Completions form "
                "(messages/tools as JSON strings), with reward, task_key, lineage and counts.",
                metadata={"dagster/column_schema": written_column_schema(TRAJECTORY_ARROW_SCHEMA,
                                                                         trajectory_column_descriptions())},
            ),
            dg.AssetSpec(
                keys.quarantine,
                deps=[keys.raw],
                group_name=source or GROUP,
                kinds={"jsonl", "pandera"},
                description="Every record that could not become a trajectory: source, line, reason code, "
                "message and the raw line.",
                metadata={"dagster/column_schema": column_schema(QuarantineSchema)},
            ),
        ],
        check_specs=[
            _batch_check(keys.raw_contract, partitions,
                         "the batch's raw record names its files, hashes and data version consistently"),
            _batch_check(keys.nothing_lost, partitions, "records_read == records_valid + records_rejected, and the "
                         "files hold exactly those rows"),
            _batch_check(keys.trajectory_contract, partitions, "every row of the written Parquet file passed "
                         "TrajectorySchema (checked once per row in ingest, before it was written; failing rows are "
                         "quarantined)"),
            _batch_check(keys.quarantine_contract, partitions,
                         "every quarantine row names its source, reason and raw text"),
            _batch_check(keys.source_recognised, partitions, "some record of the batch is of a known format. A batch "
                         "whose every record is quarantined as of none (``not_a_rollout``...) fails it, and its "
                         "trajectories are not reported materialized: the datasets are not rebuilt from it. Not "
                         "blocking: a stray file beside readable ones fails no run (the CLI refuses a named source "
                         "that recognised nothing)", blocking=False),
        ],
        required_resource_keys=set(resources.values()),
        can_subset=True,  # also makes the outputs optional: the events are the step's own (batch_events.py)
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=BATCHES_PER_RUN),
        retry_policy=STORAGE_RETRY,
        pool=STORAGE_POOL,
    )
    def _ingest(context: dg.AssetExecutionContext):
        yield from _ingest_batches(context, keys, *(getattr(context.resources, resources[kind])
                                                   for kind in ("sources", "storage", "settings")))

    return _ingest


def _ingest_batches(context: dg.AssetExecutionContext, keys: IngestKeys, sources: RolloutSources,
                   storage: TrajectoryStorage, settings: PipelineSettings):
    """Every batch of the run, one after the other. A batch that fails does not stop the
    others; the step fails at the end, naming each failed batch. When every failure was a
    storage fault the step is retried, and the retry resumes after the batches already
    reported; a failed check or any other error fails it for good (it would fail again)."""
    assets, checks = context.selected_asset_keys, context.selected_asset_check_keys
    last_asset = next(key for key in (keys.quarantine, keys.trajectories, keys.raw) if key in assets) \
        if assets else None
    done = batches_reported(context, last_asset) if context.retry_number and last_asset else set()
    failed: list[str] = []
    storage_fault: BaseException | None = None
    final = False  # a failure that a retry would repeat
    for key in context.partition_keys:
        if key in done:
            continue
        stop_if_canceling(context)
        try:
            with storage_faults_only():
                failed_checks = _batch(context, keys, key, assets, checks, sources, storage, settings)
            if failed_checks:
                failed.append(f"batch {key}: failed {', '.join(failed_checks)}")
                final = True
        except RunInterrupted:
            raise
        except dg.Failure as failure:
            failed.append(f"batch {key}: {failure.description}")
            final = True
        except Exception as fault:  # storage_faults_only lets only storage faults through
            failed.append(f"batch {key}: {fault}")
            storage_fault = fault
    if failed and not final:  # retried by STORAGE_RETRY
        raise StorageError("; ".join(failed)) from storage_fault
    if failed:
        raise dg.Failure(description="; ".join(failed), allow_retries=False)
    yield from ()  # a generator without outputs: every event was reported above


def _batch(context: dg.AssetExecutionContext, keys: IngestKeys, key: str, assets, checks, sources: RolloutSources,
           storage: TrajectoryStorage, settings: PipelineSettings) -> list[str]:
    """Writes the selected assets of one batch, checks them, reports the events; returns the
    names of the failed checks."""
    store = storage.open()
    raw_record = _write_source_record(context, key, sources, store) if keys.raw in assets else None
    ingested = bool(assets & {keys.trajectories, keys.quarantine})
    if ingested:
        config = settings.load()
        try:
            batch.ingest_batch(key, store, config, flags=ingest_flags(settings.ingest_benchmarks(config)),
                               signatures=NearSignatures() if settings.ingest_near_signatures(config) else None)
        except ConfigError as error:  # a redaction rule the redactor cannot use: the same config fails again
            raise dg.Failure(description=str(error), allow_retries=False) from None
    reads_summary = ingested or bool(checks & {keys.nothing_lost, keys.trajectory_contract, keys.source_recognised})
    summary = store.read_json(layout.batch_summary(key)) if reads_summary else {}
    counts = batch.batch_counts(key, store, summary) if summary else {}
    results = _check_batch(keys, key, store, checks, summary, counts)

    if raw_record is not None:
        metadata = {"source": raw_record["uri"], **{k: v for k, v in raw_record.items() if v is not None},
                    "dagster/uri": store.uri(layout.batch_source(key))}
        report_materialization(context, keys.raw, key, metadata, data_version=raw_record["data_version"])
    # nothing of the batch could be read: no new trajectories for the automation to rebuild from
    unrecognised = not results.get(keys.source_recognised, (True,))[0]
    if ingested:
        if keys.trajectories in assets and not unrecognised:
            report_materialization(context, keys.trajectories, key, {
                **counts,
                "source": ", ".join(source["uri"] for source in summary["sources"]),
                "dagster/row_count": counts["trajectory_rows_written"],
                "dagster/uri": store.uri(layout.batch_trajectories(key)),
            })
        if keys.quarantine in assets:
            report_materialization(context, keys.quarantine, key, {
                "dagster/row_count": counts["quarantine_rows_written"],
                "dagster/uri": store.uri(layout.batch_quarantine(key)),
                "rejected_by_reason": dg.MetadataValue.json(summary["rejected_by_reason"]),
                "redactions_by_type": dg.MetadataValue.json(summary.get("redactions_by_type", {})),
            })
    for check, (passed, metadata, description) in results.items():
        report_check(context, check, key, passed, metadata, description)
    return [check.name for check, (passed, _, _) in results.items()
            if not passed and check != keys.source_recognised]


def _write_source_record(context: dg.AssetExecutionContext, key: str, sources: RolloutSources,
                         store: Storage) -> dict:
    """raw_rollouts (``batch.write_source_record``): a file that cannot be opened (a broken
    symlink, no permission, a missing object) is recorded with its error and logged; a passing
    storage fault is raised, for the retry policy."""
    record = batch.write_source_record(key, store, find_batch_source(sources, key))
    for problem in (record["error"], record["inputs_error"]):
        if problem:
            context.log.warning(f"{record['uri']}: {problem}")
    return record


def _check_batch(keys: IngestKeys, key: str, store: Storage, checks, summary: dict, counts: dict) -> dict:
    """The selected checks on the batch's stored files (``ingest/batch.py``): check -> (passed,
    metadata, description)."""
    results = {}
    if keys.raw_contract in checks:
        result = batch.raw_contract(key, store)
        results[keys.raw_contract] = (result.passed, contract_metadata(result), None)
    if keys.nothing_lost in checks:
        results[keys.nothing_lost] = batch.nothing_lost(counts)
    if keys.trajectory_contract in checks:
        results[keys.trajectory_contract] = batch.trajectory_contract(summary, counts)
    if keys.source_recognised in checks:
        recognised = recognised_records([summary])
        results[keys.source_recognised] = (
            recognised != 0, {"recognised_records": -1 if recognised is None else recognised},
            None if recognised != 0 else "no record of a known format; the formats tried: " + formats_tried())
    if keys.quarantine_contract in checks:
        result = batch.quarantine_contract(key, store)
        results[keys.quarantine_contract] = (result.passed, contract_metadata(result), None)
    return results


# the environment's source (unprefixed keys, partitions ``rollout_batches``)
ingest_batches = build_ingest_assets()
