"""The Dagster code location (``dagster dev -w workspace.yaml`` loads ``defs`` from here)."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import dagster as dg

from trajectory_assets import PROJECT_ROOT
from trajectory_assets.defs.code_versions import asset_code_versions, with_code_versions
from trajectory_assets.defs.automation import BATCH_ASSETS, build_automation, build_jobs
from trajectory_assets.runs.executors import sized_executor
from trajectory_assets.defs.exports import export_assets
from trajectory_assets.defs.ingest import ingest_batches
from trajectory_assets.defs.reports import stats_report
from trajectory_assets.defs.resources import PipelineSettings, RolloutSources, TrajectoryStorage
from trajectory_assets.runs.run_plan import INGEST_JOB, MAIN_JOB

BUNDLED_SAMPLE = PROJECT_ROOT / "samples" / "rollouts"
__all__ = ["INGEST_JOB", "MAIN_JOB", "RunSettings", "build_definitions", "defs"]


@dataclass(frozen=True)
class RunSettings:
    sources: list[str]
    storage: str
    config_file: str | None = None
    # how often the batch sensor lists the sources and the automation looks for changed inputs:
    # a few seconds, so that `dagster dev` keeps pace with the CLI (the listing gives every
    # file's fingerprint: an unchanged file costs no request of its own)
    sensor_interval_seconds: int = 3
    refresh_cron: str = "0 3 * * *"
    executor: str = "multiprocess"  # how the datasets job's steps run: "multiprocess", or "k8s" (a pod each)
    # the exports and the report fail their freshness policy when not rebuilt for this long:
    # a day and an hour, the nightly refresh plus its margin (change it with the cron)
    freshness_minutes: int = 25 * 60

    @classmethod
    def from_env(cls) -> "RunSettings":
        """TRAJECTORY_SOURCE (comma-separated), TRAJECTORY_STORAGE, TRAJECTORY_CONFIG,
        TRAJECTORY_SENSOR_INTERVAL (seconds), TRAJECTORY_REFRESH_CRON, TRAJECTORY_EXECUTOR,
        TRAJECTORY_FRESHNESS_MINUTES."""
        sources = [s.strip() for s in os.environ.get("TRAJECTORY_SOURCE", "").split(",") if s.strip()]
        return cls(
            sources=sources or [str(BUNDLED_SAMPLE)],
            storage=os.environ.get("TRAJECTORY_STORAGE") or str(Path.cwd() / "data"),
            config_file=os.environ.get("TRAJECTORY_CONFIG") or None,
            sensor_interval_seconds=int(os.environ.get("TRAJECTORY_SENSOR_INTERVAL") or 3),
            refresh_cron=os.environ.get("TRAJECTORY_REFRESH_CRON") or "0 3 * * *",
            executor=os.environ.get("TRAJECTORY_EXECUTOR") or "multiprocess",
            freshness_minutes=int(os.environ.get("TRAJECTORY_FRESHNESS_MINUTES") or 25 * 60),
        )


# On a cluster: a pod per datasets step, the three export families at once (the report waits
# for them). Everything else (image, namespace, secrets) comes from the K8sRunLauncher's
# config, which the step pods inherit.
K8S_STEPS = {
    "max_concurrent": 3,
    "step_k8s_config": {"container_config": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                           "limits": {"memory": "2Gi"}}}},
}


def step_executor(name: str, storage: str) -> dg.ExecutorDefinition:
    """The code location's default executor, by name: on this machine (``executors.py``: in
    the run's process, or forked when the data is large), or ``k8s_job_executor`` (a
    Kubernetes job per step, for the datasets job on a cluster). The ingest job always runs
    its one step in its run's process."""
    if name == "multiprocess":
        return sized_executor(storage)
    if name == "k8s":
        from dagster_k8s import k8s_job_executor  # only needed on a cluster

        return k8s_job_executor.configured(K8S_STEPS, name="k8s_job_executor")
    raise ValueError(f"TRAJECTORY_EXECUTOR must be 'multiprocess' or 'k8s', not {name!r}")


def build_definitions(settings: RunSettings) -> dg.Definitions:
    ingest_job, datasets_job = build_jobs()
    automation = build_automation(settings.sensor_interval_seconds, settings.refresh_cron, ingest_job, datasets_job)
    defs = dg.Definitions(
        assets=[ingest_batches, *export_assets, stats_report],
        jobs=[ingest_job, datasets_job],
        executor=step_executor(settings.executor, settings.storage),
        sensors=[d for d in automation if isinstance(d, dg.SensorDefinition)],
        schedules=[d for d in automation if isinstance(d, dg.ScheduleDefinition)],
        resources={
            "sources": RolloutSources(paths=settings.sources),
            "storage": TrajectoryStorage(root=settings.storage),
            "settings": PipelineSettings(config_file=settings.config_file),
        },
    )
    # the datasets show as failing freshness in the UI when they were not rebuilt within the
    # window: a batch landed and its refresh failed, or the nightly refresh did not run
    freshness = dg.FreshnessPolicy.time_window(fail_window=timedelta(minutes=settings.freshness_minutes))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # map_resolved_asset_specs is marked preview in Dagster 1.13
        defs = with_code_versions(defs, asset_code_versions(settings.config_file))
        return defs.map_resolved_asset_specs(func=lambda spec: dg.apply_freshness_policy(spec, freshness),
                                             selection=dg.AssetSelection.all() - BATCH_ASSETS)


defs = build_definitions(RunSettings.from_env())


def job_by_name(name: str) -> dg.JobDefinition:
    """A job of the code location, for processes that load it by reference (the CLI's forked
    runs and steps: ``dg.build_reconstructable_job``)."""
    return defs.resolve_job_def(name)
