"""The jobs, and what runs by itself: the batch sensor, declarative automation and the
nightly refresh."""


import dagster as dg
import orjson

from trajectory_assets import layout
from trajectory_assets.defs.ingest import ingest_batches, rollout_batches
from trajectory_assets.defs.resources import RolloutSources, TrajectoryStorage
from trajectory_assets.defs.retries import initialize_storage_pool
from trajectory_assets.defs.run_plan import INGEST_JOB, MAIN_JOB, batch_run_tags, group_batches, run_slots
from trajectory_assets.formats.jsonutil import sha256_hex
from trajectory_assets.io.sources import (
    SourceError,
    SourceFile,
    batch_key,
    describe_batch,
    discover,
    source_fingerprint,
)
from trajectory_assets.io.storage import NotMaterializedError, Storage

# the per-batch assets (raw_rollouts, validated_trajectories, quarantined_records: one step)
BATCH_ASSETS = dg.AssetSelection.assets(ingest_batches)
# The datasets job's steps (one per export family, then the report) are large: each runs in
# a process of its own, two families at a time on two cores. The processes fork from a server
# that imported the code location once per run, instead of each importing it again, and froze
# what it imported (step_preload.py). This is the code location's default executor (so also
# the automation's and the UI's runs).
STEP_PROCESSES = dg.multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": ["trajectory_assets.defs.step_preload"]}}},
    name="forked_multiprocess_executor",
)


def build_jobs() -> tuple:
    """The ingest job (a range of batches per run; its one step in the run's own process) and
    the datasets job (the code location's default executor)."""
    ingest_job = dg.define_asset_job(
        INGEST_JOB,
        selection=BATCH_ASSETS,
        partitions_def=rollout_batches,
        executor_def=dg.in_process_executor,
        description="A range of batches (source files): raw -> validated trajectories + quarantine, with "
        "their checks, each batch reported as its own partition.",
    )
    datasets_job = dg.define_asset_job(
        MAIN_JOB,
        selection=dg.AssetSelection.all() - BATCH_ASSETS,
        description="Every registered batch -> SFT / DPO / GRPO exports -> stats report, with every check.",
    )
    return ingest_job, datasets_job


def plan_batches(
    current: dict[str, str], previous: dict[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """(new, changed, gone) batch keys between two {key: fingerprint} snapshots."""
    new = sorted(set(current) - set(previous))
    changed = sorted(key for key in set(current) & set(previous) if current[key] != previous[key])
    gone = sorted(set(previous) - set(current))
    return new, changed, gone


def content_changed(store: Storage, key: str, source: SourceFile) -> bool:
    """Whether the source's data version (its SHA-256, and its materialized inputs') differs
    from the one its batch was last ingested from. An unreadable source counts as changed:
    its run reports it. A passing storage fault is raised: the next evaluation looks again."""
    try:
        recorded = store.read_json(layout.batch_source(key))
    except NotMaterializedError:
        return True  # never ingested (or its record is gone): run it
    return describe_batch(source)["data_version"] != recorded.get("data_version", recorded.get("sha256"))


def build_batch_sensor(minimum_interval_seconds: int, ingest_job, datasets_job) -> dg.SensorDefinition:
    @dg.sensor(
        name="rollout_batch_sensor",
        jobs=[ingest_job, datasets_job],
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Registers each new source file as a batch partition and ingests it; re-runs a "
        "batch whose content changed (new SHA-256); removes batches whose file is gone and rebuilds "
        "the datasets without them. The batches of a tick go into as many runs as may run at once "
        "(partition ranges). The cursor holds every file's fingerprint, so nothing is read or "
        "processed twice.",
    )
    def rollout_batch_sensor(
        context: dg.SensorEvaluationContext, sources: RolloutSources, storage: TrajectoryStorage
    ):
        try:
            found = discover(sources.paths)
        except SourceError as error:
            return dg.SensorResult(skip_reason=str(error))
        by_key = {batch_key(source.source_id): source for source in found}
        current = {key: source_fingerprint(source) for key, source in by_key.items()}
        previous = orjson.loads(context.cursor) if context.cursor else {}
        new, changed, gone = plan_batches(current, previous)
        # a new fingerprint (a touched file, a re-upload) is only a change if the bytes differ
        store = storage.open()
        changed = [key for key in changed if content_changed(store, key, by_key[key])]
        registered = list(context.instance.get_dynamic_partitions(layout.BATCH_PARTITIONS))
        to_register = [key for key in new if key not in registered]
        removed = [key for key in gone if key in registered]
        # the partitions as they will be once this tick's requests are applied: ranges resolve in this order
        order = [key for key in registered if key not in removed] + to_register
        requests = [
            # the fingerprints are in the run key: the same file versions are never run twice
            dg.RunRequest(
                run_key="ingest:" + sha256_hex(",".join(f"{key}:{current[key]}" for key in group).encode()),
                job_name=INGEST_JOB,
                partition_key=group[0] if len(group) == 1 else None,
                tags=batch_run_tags(group),
            )
            for group in group_batches(order, [*new, *changed], run_slots(context.instance))
        ]
        partition_requests = []
        if to_register:
            partition_requests.append(rollout_batches.build_add_request(to_register))
        cursor = orjson.dumps(current, option=orjson.OPT_SORT_KEYS).decode()
        if removed:
            partition_requests.append(rollout_batches.build_delete_request(removed))
            # nothing new lands to trigger the eager refresh, so the datasets are rebuilt
            # here (with new batches in the same tick, the refresh follows their runs instead)
            if not requests:
                requests.append(dg.RunRequest(run_key=f"removed:{','.join(removed)}:{sha256_hex(cursor.encode())}",
                                              job_name=MAIN_JOB))
        if not requests and not partition_requests:  # the cursor still moves: touched files are not re-hashed
            return dg.SensorResult(skip_reason=f"no new or changed rollout files among {len(current)}", cursor=cursor)
        initialize_storage_pool(context.instance)  # before this tick's runs, which may start together, claim it
        return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partition_requests, cursor=cursor)

    return rollout_batch_sensor


def build_automation(sensor_interval: int, refresh_cron: str, ingest_job, datasets_job) -> list:
    return [
        build_batch_sensor(sensor_interval, ingest_job, datasets_job),
        # OSS declarative automation only acts while such a sensor runs
        dg.AutomationConditionSensorDefinition(
            "refresh_datasets_when_batches_land",
            target=dg.AssetSelection.all(),
            default_status=dg.DefaultSensorStatus.RUNNING,
            minimum_interval_seconds=sensor_interval,
        ),
        dg.ScheduleDefinition(
            name="scheduled_dataset_refresh",
            job=datasets_job,
            cron_schedule=refresh_cron,
            default_status=dg.DefaultScheduleStatus.RUNNING,
            description="Rebuilds the exports and the report from every batch on a fixed cadence "
            "(TRAJECTORY_REFRESH_CRON).",
        ),
    ]
