"""The jobs, and what runs by itself: the batch sensor, declarative automation and the
nightly refresh."""


import dagster as dg
import orjson

from trajectory_assets import layout
from trajectory_assets import dagster_internals as internals
from trajectory_assets.defs.ingest import IngestKeys
from trajectory_assets.defs.retries import initialize_storage_pool
from trajectory_assets.runs.run_plan import (
    batch_run_tags,
    datasets_job_name,
    group_batches,
    ingest_job_name,
    ingest_runs,
    run_slots,
)
from trajectory_assets.jsonutil import sha256_hex
from trajectory_assets.io.source_files import (
    SourceError,
    SourceFile,
    batch_key,
    describe_batch,
    source_fingerprint,
    work_bytes,
)
from trajectory_assets.project import partitions_name, resource_key
from trajectory_assets.sources import discover_sources
from trajectory_assets.io.storage import Storage

def build_jobs(source_assets: dict[str, dg.AssetsDefinition],
               dataset_assets: dict[str, list[dg.AssetsDefinition]],
               executors: dict[str, dg.ExecutorDefinition]) -> tuple[list, list]:
    """Each source's ingest job (a range of its batches per run; its one step in the run's own
    process) and each dataset's job (its exports and report, on ``executors[dataset]``)."""
    ingest_jobs = [
        dg.define_asset_job(
            ingest_job_name(source),
            selection=dg.AssetSelection.assets(assets),
            partitions_def=assets.partitions_def,
            executor_def=dg.in_process_executor,
            description="A range of batches (source files)" + (f" of the source {source}" if source else "")
            + ": raw -> validated trajectories + quarantine, with their checks, each batch reported as its own "
            "partition.",
        )
        for source, assets in source_assets.items()
    ]
    dataset_jobs = [
        dg.define_asset_job(
            datasets_job_name(dataset),
            selection=dg.AssetSelection.assets(*assets),
            executor_def=executors[dataset],
            description="Every registered batch of " + (f"the dataset {dataset}'s sources" if dataset else "the source")
            + " -> SFT / DPO / GRPO exports -> stats report, with every check.",
        )
        for dataset, assets in dataset_assets.items()
    ]
    return ingest_jobs, dataset_jobs


def plan_batches(
    current: dict[str, str], previous: dict[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """(new, changed, gone) batch keys between two {key: fingerprint} snapshots."""
    new = sorted(set(current) - set(previous))
    changed = sorted(key for key in set(current) & set(previous) if current[key] != previous[key])
    gone = sorted(set(previous) - set(current))
    return new, changed, gone


def _latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str) -> dg.EventLogRecord | None:
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]),
                                              limit=1).records
    return records[0] if records else None


def latest_code_version(instance: dg.DagsterInstance, source: str, partition: str) -> str | None:
    """The code version the source's latest trajectories of a batch were made with."""
    record = _latest(instance, IngestKeys(source).trajectories, partition)
    return None if record is None else record.asset_materialization.tags.get(internals.CODE_VERSION_TAG)


def ingested_as_is(instance: dg.DagsterInstance, store: Storage, key: str, source: SourceFile,
                   source_name: str = "") -> bool:
    """Whether the batch's trajectories in this storage were made from the source as it is
    now, whoever made them (the CLI, the UI, another machine on the same instance): the
    partition's latest trajectories were written here, from its latest raw record, whose
    data version is the file's. The file is read (hashed) only when its fingerprint differs
    from the one the raw record was made with. An unreadable source counts as changed: its
    run reports it. A passing storage fault is raised: the next evaluation looks again."""
    keys = IngestKeys(source_name)
    trajectories = _latest(instance, keys.trajectories, key)
    raw = _latest(instance, keys.raw, key)
    if trajectories is None or raw is None:
        return False
    written_to = trajectories.asset_materialization.metadata.get("dagster/uri")
    if written_to is None or written_to.value != store.uri(layout.batch_trajectories(key)):
        return False
    if internals.recorded_input_event(trajectories, keys.raw) != raw.storage_id:
        return False  # the trajectories were made from an older raw record
    version = internals.recorded_data_version(raw)
    fingerprint = raw.asset_materialization.metadata.get("fingerprint")
    if fingerprint is not None and fingerprint.value == source_fingerprint(source):
        return True
    return describe_batch(source)["data_version"] == version


def build_batch_sensor(source: str, minimum_interval_seconds: int, ingest_job,
                       dataset_jobs: list) -> dg.SensorDefinition:
    """The sensor of the source ``source``: it registers the source's files as its batch
    partitions and requests its ingest runs; ``dataset_jobs`` (of the datasets that read it)
    are rebuilt when a batch is removed."""
    partitions = dg.DynamicPartitionsDefinition(name=partitions_name(source))
    resources = {kind: resource_key(source, kind) for kind in ("sources", "storage")}

    @dg.sensor(
        name=f"{source}_batch_sensor" if source else "rollout_batch_sensor",
        jobs=[ingest_job, *dataset_jobs],
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys=set(resources.values()),
        description="Registers each new source file" + (f" of the source {source}" if source else "")
        + " as a batch partition and ingests it; re-runs a "
        "batch whose content changed (new SHA-256); removes batches whose file is gone and rebuilds "
        "the datasets without them. The batches of a tick go into one run, or, when ingesting them "
        "takes long enough, into as many runs as may run at once (partition ranges). The cursor holds every "
        "file's fingerprint, so nothing is read or processed twice.",
    )
    def rollout_batch_sensor(context: dg.SensorEvaluationContext):
        sources = getattr(context.resources, resources["sources"])
        storage = getattr(context.resources, resources["storage"])
        try:
            found = discover_sources(sources.paths)
        except SourceError as error:
            return dg.SensorResult(skip_reason=str(error))
        by_key = {batch_key(found_source.source_id): found_source for found_source in found}
        current = {key: source_fingerprint(found_source) for key, found_source in by_key.items()}
        previous = orjson.loads(context.cursor) if context.cursor else {}
        new, changed, gone = plan_batches(current, previous)
        # a new fingerprint (a touched file, a re-upload) is only a change if the bytes differ;
        # a file this cursor has not seen may have been ingested already (by the CLI, another
        # machine, an earlier sensor whose cursor was reset): only what differs is run
        store = storage.open()
        registered = list(context.instance.get_dynamic_partitions(partitions.name))

        def as_is(key: str) -> bool:
            return ingested_as_is(context.instance, store, key, by_key[key], source)

        changed = [key for key in changed if not as_is(key)]
        new = [key for key in new if key not in registered or not as_is(key)]
        to_register = [key for key in current if key not in registered]
        removed = [key for key in gone if key in registered]
        # the partitions as they will be once this tick's requests are applied: ranges resolve in this order
        order = [key for key in registered if key not in removed] + to_register
        requests = [
            # the fingerprints are in the run key: the same file versions are never run twice
            dg.RunRequest(
                run_key="ingest:" + sha256_hex(",".join(f"{key}:{current[key]}" for key in group).encode()),
                job_name=ingest_job.name,
                partition_key=group[0] if len(group) == 1 else None,
                tags=batch_run_tags(group),
            )
            for group in group_batches(order, [*new, *changed], ingest_runs(
                len(new) + len(changed), work_bytes([by_key[key] for key in [*new, *changed]]),
                run_slots(context.instance)))
        ]
        partition_requests = []
        if to_register:
            partition_requests.append(partitions.build_add_request(to_register))
        cursor = orjson.dumps(current, option=orjson.OPT_SORT_KEYS).decode()
        if removed:
            partition_requests.append(partitions.build_delete_request(removed))
            # nothing new lands to trigger the eager refresh, so the datasets are rebuilt
            # here (with new batches in the same tick, the refresh follows their runs instead)
            if not requests:
                requests.extend(
                    dg.RunRequest(run_key=f"removed:{','.join(removed)}:{sha256_hex(cursor.encode())}",
                                  job_name=job.name)
                    for job in dataset_jobs)
        if not requests and not partition_requests:  # the cursor still moves: touched files are not re-hashed
            return dg.SensorResult(skip_reason=f"no new or changed rollout files among {len(current)}", cursor=cursor)
        initialize_storage_pool(context.instance)  # before this tick's runs, which may start together, claim it
        return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partition_requests, cursor=cursor)

    return rollout_batch_sensor


def build_dataset_automation(dataset: str, assets: list[dg.AssetsDefinition], sensor_interval: int,
                             refresh_cron: str, datasets_job) -> list:
    """A dataset's refresh: its assets rebuilt when their inputs' data changed, and its job on a cron."""
    prefix = f"{dataset}_" if dataset else ""
    return [
        # OSS declarative automation only acts while such a sensor runs
        dg.AutomationConditionSensorDefinition(
            f"refresh_{prefix}datasets_when_batches_land",
            target=dg.AssetSelection.assets(*assets),
            default_status=dg.DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=sensor_interval,
        ),
        dg.ScheduleDefinition(
            name=f"scheduled_{prefix}dataset_refresh",
            job=datasets_job,
            cron_schedule=refresh_cron,
            default_status=dg.DefaultScheduleStatus.RUNNING,
            description="Rebuilds the exports and the report from every batch on a fixed cadence "
            + ("(TRAJECTORY_REFRESH_CRON)." if not dataset else "(the dataset's refresh_cron)."),
        ),
    ]
