"""What runs by itself: the batch sensor, declarative automation and the nightly refresh."""


import dagster as dg
import orjson

from trajectory_assets import layout
from trajectory_assets.defs.ingest import raw_rollouts, rollout_batches, validated_trajectories
from trajectory_assets.defs.resources import RolloutSources
from trajectory_assets.io.sources import SourceError, batch_key, discover, fingerprint

INGEST_JOB = "ingest_rollout_batch"
MAIN_JOB = "build_training_datasets"
# the per-batch assets (validated_trajectories is a multi-asset that also holds quarantined_records)
BATCH_ASSETS = dg.AssetSelection.assets(raw_rollouts, validated_trajectories)

ingest_job = dg.define_asset_job(
    INGEST_JOB,
    selection=BATCH_ASSETS,
    partitions_def=rollout_batches,
    description="One batch (source file): raw -> validated trajectories + quarantine, with their checks.",
)
datasets_job = dg.define_asset_job(
    MAIN_JOB,
    selection=dg.AssetSelection.all() - BATCH_ASSETS,
    description="Every registered batch -> SFT / DPO / GRPO exports -> stats report, with every check.",
)


def plan_batches(
    current: dict[str, str], previous: dict[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """(new, changed, gone) batch keys between two {key: fingerprint} snapshots."""
    new = sorted(set(current) - set(previous))
    changed = sorted(key for key in set(current) & set(previous) if current[key] != previous[key])
    gone = sorted(set(previous) - set(current))
    return new, changed, gone


def build_batch_sensor(minimum_interval_seconds: int) -> dg.SensorDefinition:
    @dg.sensor(
        name="rollout_batch_sensor",
        job=ingest_job,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Registers each new source file as a batch partition and runs it; re-runs a batch "
        "whose file changed; removes batches whose file is gone. The cursor holds every file's "
        "fingerprint, so nothing is processed twice.",
    )
    def rollout_batch_sensor(context: dg.SensorEvaluationContext, sources: RolloutSources):
        try:
            found = discover(sources.paths)
        except SourceError as error:
            return dg.SensorResult(skip_reason=str(error))
        current = {batch_key(source.source_id): fingerprint(source.uri) for source in found}
        previous = orjson.loads(context.cursor) if context.cursor else {}
        new, changed, gone = plan_batches(current, previous)
        registered = set(context.instance.get_dynamic_partitions(layout.BATCH_PARTITIONS))
        to_register = [key for key in new if key not in registered]
        requests = [
            # the fingerprint is in the run key: the same file version is never run twice
            dg.RunRequest(run_key=f"{key}:{current[key]}", partition_key=key)
            for key in [*new, *changed]
        ]
        partition_requests = []
        if to_register:
            partition_requests.append(rollout_batches.build_add_request(to_register))
        if gone:
            partition_requests.append(rollout_batches.build_delete_request([k for k in gone if k in registered]))
        if not requests and not partition_requests:
            return dg.SensorResult(skip_reason=f"no new or changed rollout files among {len(current)}")
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=partition_requests,
            cursor=orjson.dumps(current, option=orjson.OPT_SORT_KEYS).decode(),
        )

    return rollout_batch_sensor


def build_automation(sensor_interval: int, refresh_cron: str) -> list:
    return [
        build_batch_sensor(sensor_interval),
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
