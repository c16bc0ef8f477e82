"""The Dagster code location (``dagster dev -w workspace.yaml`` loads ``defs`` from here).

It builds every declared source and dataset (``catalog/``, ``defs/components.py``) and the
environment's dataset (``TRAJECTORY_SOURCE``...: today's setup, with unprefixed keys): each
source's batch assets, sensor and ingest job; each dataset's exports, report, job, automation
and schedule.
"""

from __future__ import annotations

import functools
import json
import warnings
from datetime import timedelta

import dagster as dg

from trajectory_assets.defs.automation import build_batch_sensor, build_dataset_automation, build_jobs
from trajectory_assets.defs.code_versions import asset_code_versions, with_code_versions
from trajectory_assets.defs.exports import build_export_assets
from trajectory_assets.defs.ingest import build_ingest_assets
from trajectory_assets.defs.reports import build_report_asset
from trajectory_assets.defs.resources import PipelineSettings, RolloutSources, TrajectoryStorage
from trajectory_assets.defs.staging import StagingValues
from trajectory_assets.exports.registry import EXPORTS, EXPORTS_BY_NAME
from trajectory_assets.defs.declared import declared_project
from trajectory_assets.project import DatasetSpec, Project, RunSettings, SourceSpec, merged, resource_key, validate
from trajectory_assets.runs.executors import sized_executor
from trajectory_assets.runs.run_plan import INGEST_JOB, MAIN_JOB

__all__ = ["INGEST_JOB", "MAIN_JOB", "RunSettings", "build_definitions", "defs"]


# On a cluster: a pod per datasets step, so every shard of the export phase in a pod of its own,
# up to 16 at once (each holds one shard: its requests are a shard's, not the dataset's).
# Everything else (image, namespace, secrets) comes from the K8sRunLauncher's config, which the
# step pods inherit.
K8S_STEPS = {
    "max_concurrent": 16,
    "step_k8s_config": {"container_config": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                           "limits": {"memory": "2Gi"}}}},
}


# Each module's imports, as ``code_versions.closure`` reads them (parsing them is most of a
# build's time): read once per process, so an ad hoc CLI call's definitions, built beside the
# code location's, cost little more. A process sees one tree: the UI reloads a changed code
# location in a new process, and the CLI and its forks live for one call.
_MODULE_IMPORTS: dict[str, set[str]] = {}


def step_executor(name: str, sources: dict[str, str]) -> dg.ExecutorDefinition:
    """A datasets job's executor, by name: on this machine (``executors.py``: in the run's
    process, or forked when its sources' data is large; ``sources``: name -> storage root), or
    ``k8s_job_executor`` (a Kubernetes job per step, on a cluster). The ingest jobs always run
    their one step in the run's process."""
    if name == "multiprocess":
        return sized_executor(sources)
    if name == "k8s":
        from dagster_k8s import k8s_job_executor  # only needed on a cluster

        return k8s_job_executor.configured(K8S_STEPS, name="k8s_job_executor")
    raise ValueError(f"TRAJECTORY_EXECUTOR must be 'multiprocess' or 'k8s', not {name!r}")


def build_definitions(settings: RunSettings, declared: Project | None = None, environment: bool = True) -> dg.Definitions:
    """The environment's (or a call's) source and dataset from ``settings`` (unless not
    ``environment``), and every ``declared`` source and dataset."""
    project = merged(*([settings.project()] if environment else []), *([declared] if declared else []))
    validate(project)
    resources: dict[str, object] = {}
    source_assets = {}
    versions: dict[str, str] = {}
    imports = _MODULE_IMPORTS  # every namespace's code versions, and every build in this process
    for source in project.sources:
        resources[resource_key(source.name, "sources")] = RolloutSources(paths=list(source.uris))
        resources[resource_key(source.name, "storage")] = TrajectoryStorage(root=source.storage)
        resources[resource_key(source.name, "settings")] = _settings(source, project)
        source_assets[source.name] = build_ingest_assets(source.name)
        versions.update(_prefixed(source.key_prefix, asset_code_versions(_config(source), imports=imports)))
    dataset_assets = {}
    for dataset in project.datasets:
        resources[resource_key(dataset.name, "storage")] = TrajectoryStorage(root=dataset.storage)
        resources[resource_key(dataset.name, "settings")] = _settings(dataset, project)
        resources[resource_key(dataset.name, "staging")] = StagingValues(root=dataset.storage)
        dataset_assets[dataset.name] = _dataset_assets(dataset)
        versions.update(_prefixed(dataset.key_prefix, asset_code_versions(_config(dataset), imports=imports)))
    ingest_jobs, dataset_jobs = build_jobs(
        source_assets, dataset_assets,
        {dataset.name: step_executor(settings.executor, {s.name: s.storage for s in dataset.sources})
         for dataset in project.datasets})
    jobs_of = dict(zip(dataset_assets, dataset_jobs))
    automation = [
        *(build_batch_sensor(source.name, settings.sensor_interval_seconds, ingest_job,
                             [jobs_of[dataset.name] for dataset in project.readers(source)])
          for source, ingest_job in zip(project.sources, ingest_jobs)),
        *(definition for dataset in project.datasets
          for definition in build_dataset_automation(dataset.name, dataset_assets[dataset.name],
                                                     settings.sensor_interval_seconds, dataset.refresh_cron,
                                                     jobs_of[dataset.name])),
    ]
    defs = dg.Definitions(
        assets=[*source_assets.values(), *(a for assets in dataset_assets.values() for a in assets)],
        jobs=[*ingest_jobs, *dataset_jobs],
        # what the UI's ad hoc materializations run on: sized by every source's data
        executor=step_executor(settings.executor, {source.name: source.storage for source in project.sources}),
        sensors=[d for d in automation if isinstance(d, dg.SensorDefinition)],
        schedules=[d for d in automation if isinstance(d, dg.ScheduleDefinition)],
        resources=resources,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # map_resolved_asset_specs is marked preview in Dagster 1.13
        defs = with_code_versions(defs, versions)
        for dataset in project.datasets:
            # the datasets show as failing freshness in the UI when they were not rebuilt within the
            # window: a batch landed and its refresh failed, or the scheduled refresh did not run
            freshness = dg.FreshnessPolicy.time_window(fail_window=timedelta(minutes=dataset.freshness_minutes))
            defs = defs.map_resolved_asset_specs(
                func=lambda spec, policy=freshness: dg.apply_freshness_policy(spec, policy),
                selection=dg.AssetSelection.assets(*dataset_assets[dataset.name]))
        return defs


def _dataset_assets(dataset: DatasetSpec) -> list[dg.AssetsDefinition]:
    exports = [EXPORTS_BY_NAME[name] for name in dataset.exports] if dataset.exports else list(EXPORTS)
    sources = [source.name for source in dataset.sources]
    declared = dataset.declared_in is not None
    return [build_export_assets(exports, dataset.name, sources, declared), build_report_asset(dataset.name, sources, exports)]


def _settings(spec: SourceSpec | DatasetSpec, project: Project) -> PipelineSettings:
    """A source's or dataset's config resource. The environment's (or a call's) config file is
    read by each run, as before. A declaration's config is the one its loading checked (its
    sections, or its ``config_file`` as read then, with benchmark paths made absolute against
    the catalog's folder), so a run uses exactly what was validated; a declared source's also
    names the benchmark sets of every dataset reading it, and whether one uses ``dedup: near``."""
    if spec.declared_in is None:
        return PipelineSettings(config_file=spec.config_file)
    if isinstance(spec, SourceSpec):
        return PipelineSettings(inline=spec.config.model_dump_json(), near_signatures=project.near_dedup(spec),
                                benchmark_sets=[found.model_dump_json() for found in project.benchmark_sets(spec)])
    return PipelineSettings(inline=spec.config.model_dump_json())


def _config(spec: SourceSpec | DatasetSpec):
    """What a source's or dataset's code versions hash: its config file, or its declaration's config."""
    return spec.config_file if spec.declared_in is None else spec.config


def _prefixed(prefix: list[str], versions: dict[str, str]) -> dict[str, str]:
    return {dg.AssetKey([*prefix, name]).to_user_string(): version for name, version in versions.items()}


def _code_location() -> dg.Definitions:
    declared, environment = declared_project()
    return build_definitions(RunSettings.from_env(), declared, environment)


defs = _code_location()


@functools.lru_cache(maxsize=8)
def call_definitions(call: str) -> dg.Definitions:
    """An ad hoc CLI call's source and dataset (``RunSettings`` as JSON), named by its sources
    and storage (``project.call_name``): a code location of their own, so the call's batches
    and assets never meet another's."""
    return build_definitions(RunSettings(**json.loads(call)))


def job_by_name(name: str, call: str | None = None) -> dg.JobDefinition:
    """A job of the code location, or of an ad hoc call's definitions, for processes that load
    it by reference (the CLI's forked runs and steps: ``dg.build_reconstructable_job``)."""
    return (call_definitions(call) if call else defs).resolve_job_def(name)
