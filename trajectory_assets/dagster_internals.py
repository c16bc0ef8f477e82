"""Every part of Dagster's private API the project uses, and nothing else.

Dagster's public API has no way to do the things below that the project needs, so they are
done here with Dagster's own private functions and classes, each wrapped in a function or
class of ours that says what it is for. Nothing else in the repository imports
``dagster._core`` or calls an instance method that Dagster does not mark public
(``tests/test_layout_rules.py`` keeps it so), and ``tests/test_dagster_internals.py`` has a
test per name below that fails with a clear message when an upgrade of Dagster changes it.
ARCHITECTURE.md lists each one, why it is needed and the public alternative that was
measured.

1. **Recorded runs in the CLI's own process** (``runs/runner.py``): a run created with the
   origins a code server would give it (``remote_job_origin``, ``job_code_origin``), so the
   UI shows it like any other and can re-execute it, then executed in this process.
2. **Each batch's own events from a ranged run** (``defs/batch_events.py``): the data
   version tags Dagster writes for a one-partition run, and a check evaluation that points
   at the partition's materialization.
3. **Run tags of partition ranges** (``runs/run_plan.py``): the tags that make a run
   target a range of partitions.
4. **Reading and writing the instance's run state**: canceling, failing a run the process
   that ran it left unfinished, a run's step timings, the storage pool's limit, the run
   queue's limit.
5. **What the UI shows, for the tests**: staleness, freshness, check history, the
   partitions of a range, config validation, read the way Dagster reads them.
6. **SQLite storage that keeps its connections** (``runs/pooled_sqlite.py``): Dagster's
   SQLite storage classes to subclass, the instance defaults an instance class gives, and
   Dagster's migration scripts read once per process.
7. **Runs launched from a preloaded fork server** (``runs/launcher.py``): what a run
   launcher reads of a run's origins and returns to Dagster.

The classes that dagster.yaml names (``PooledSqliteInstance``, ``PreloadedRunLauncher``) live
in ``runs/``. This module imports nothing of the project (``tests/test_layout_rules.py``), so
the modules that use it never import themselves back through it; only a dagster.yaml that
still names the classes here makes it import one, on that lookup (``MOVED_TO``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, NamedTuple

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)
from dagster._core.definitions.data_version import (
    CODE_VERSION_TAG,
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    DEFAULT_DATA_VERSION,
    NULL_EVENT_POINTER,
    compute_logical_data_version,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
)
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)

# What Dagster raises in a step when its run is interrupted (SIGINT, or SIGTERM mapped to it).
EXECUTION_INTERRUPTS = (KeyboardInterrupt, DagsterExecutionInterruptedError)

__all__ = [
    "EXECUTION_INTERRUPTS",
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "DATA_VERSION_TAG",
    "PARTITION_NAME_TAG",
    "check_target",
    "code_location_job_origin",
    "create_recorded_run",
    "execute_recorded_run",
    "hold_pool_slot",
    "initialize_pool_limit",
    "instance_from_ref",
    "instance_ref",
    "materialization_version_tags",
    "mark_run_canceled",
    "recorded_data_version",
    "recorded_input_event",
    "mark_run_canceling",
    "mark_run_failed",
    "pool_default_limit",
    "pool_limits",
    "pool_slots",
    "run_queue_limit",
    "step_durations",
    "check_executions",
    "config_errors",
    "freshness_state",
    "partition_keys_in_range",
    "stale_status",
    "storage_classes",
    "SqliteStorageParts",
    "sqlite_storage_parts",
    "instance_defaults",
    "run_python_target",
    "run_reconstructable_job",
    "location_env",
    "launch_failed",
    "track_launched_run",
    "run_worker_health",
]


# 1. Recorded runs in the CLI's own process ----------------------------------------------------


def code_location_job_origin(workspace_file: str, repository_name: str, job_name: str):
    """The ``RemoteJobOrigin`` of a job of the one code location that ``workspace_file``
    names, as ``dagster dev -w workspace_file`` loads it: what the UI resolves when it
    re-executes a run. Public alternative: none; ``execute_job`` records no remote origin,
    and the run page's Re-execute then fails."""
    from dagster._core.remote_origin import RemoteRepositoryOrigin
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    (location,) = WorkspaceFileTarget(paths=[workspace_file]).create_origins()
    return RemoteRepositoryOrigin(code_location_origin=location, repository_name=repository_name
                                  ).get_job_origin(job_name)


def create_recorded_run(
    instance: dg.DagsterInstance,
    job: dg.JobDefinition,
    reconstructable_job: Any,
    remote_origin: Any,
    run_config: Mapping[str, Any],
    tags: Mapping[str, str],
    asset_selection: Sequence[dg.AssetKey] | None = None,
    run_id: str | None = None,
) -> dg.DagsterRun:
    """A run of ``job`` (or of the given assets of it) in the instance, not started, with
    the job's own tags under ``tags`` and both origins: the remote one (the UI's) and the
    Python one of ``reconstructable_job`` (how this process and its forked steps load it).
    Public alternative: ``execute_job`` creates its run without a remote origin."""
    return instance.create_run_for_job(
        job,
        run_id=run_id,
        run_config=run_config,
        tags={**job.run_tags, **tags},
        asset_selection=frozenset(asset_selection) if asset_selection else None,
        remote_job_origin=remote_origin,
        job_code_origin=reconstructable_job.get_python_origin(),
    )


def execute_recorded_run(reconstructable_job: Any, run: dg.DagsterRun, instance: dg.DagsterInstance):
    """Executes a run created by :func:`create_recorded_run` in this process (its steps as
    its executor says), yielding its events as they happen. Public alternative:
    ``execute_job``, which cannot execute a run that already exists."""
    from dagster._core.execution.api import execute_run_iterator

    return execute_run_iterator(reconstructable_job, run, instance)


# 2. Each batch's own events from a ranged run ------------------------------------------------


def materialization_version_tags(code_version: str, data_version: str | None,
                                 inputs: Mapping[dg.AssetKey, dg.EventLogRecord | None]) -> dict[str, str]:
    """The tags Dagster writes on a materialization of one partition: the code version, and
    either the given data version (the content's own) or one derived from the code version
    and the inputs' current data versions, with each input's version and event pointer, as
    Dagster derives them. ``inputs``: the latest materialization of the same partition of
    each input asset (each input is partitioned like the asset: Dagster's input version of a
    partitioned input is the SHA-256 of its partitions' versions, even of one). Public
    alternative: ``Output(data_version=)`` sets one version for every partition of a step."""
    tags = {CODE_VERSION_TAG: code_version}
    if data_version is not None:
        tags.update({DATA_VERSION_TAG: data_version, DATA_VERSION_IS_USER_PROVIDED_TAG: "true"})
        return tags
    versions = {}
    for key, record in inputs.items():
        recorded = recorded_data_version(record)
        version = hashlib.sha256(recorded.encode()).hexdigest() if recorded else DEFAULT_DATA_VERSION.value
        versions[key] = dg.DataVersion(version)
        tags[get_input_data_version_tag(key)] = version
        tags[get_input_event_pointer_tag(key)] = str(record.storage_id) if record else NULL_EVENT_POINTER
    tags[DATA_VERSION_TAG] = compute_logical_data_version(code_version, versions).value
    return tags


def recorded_data_version(record: dg.EventLogRecord | None) -> str | None:
    """The data version a materialization was recorded with (None: none, or no record)."""
    return record.asset_materialization.tags.get(DATA_VERSION_TAG) if record is not None else None


def recorded_input_event(record: dg.EventLogRecord | None, key: dg.AssetKey) -> int | None:
    """The storage id of the materialization of input ``key`` that a materialization was made
    from (None: none recorded)."""
    pointer = record.asset_materialization.tags.get(get_input_event_pointer_tag(key)) if record is not None else None
    return int(pointer) if pointer and pointer != NULL_EVENT_POINTER else None


def check_target(record: dg.EventLogRecord | None):
    """What a check evaluation of one partition points at: that partition's materialization.
    Public alternative: none for an evaluation reported with ``log_event``."""
    if record is None:
        return None
    return AssetCheckEvaluationTargetMaterializationData(run_id=record.run_id, storage_id=record.storage_id,
                                                         timestamp=record.timestamp)


# 4. The instance's run state -------------------------------------------------------------------


def instance_ref(instance: dg.DagsterInstance):
    """What another process (a forked run) opens the same instance from."""
    return instance.get_ref()


def instance_from_ref(ref) -> dg.DagsterInstance:
    """The instance ``ref`` (:func:`instance_ref`) was taken from, opened in this process.
    Public alternative: ``DagsterInstance.get()``, which opens whatever ``DAGSTER_HOME`` names."""
    return dg.DagsterInstance.from_ref(ref)


def mark_run_canceling(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Marks a run as being canceled: an execution interrupted after this ends CANCELED,
    not FAILURE (Dagster reads the status back when it is interrupted)."""
    instance.report_run_canceling(run, message)


def mark_run_canceled(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Ends a run that was being canceled, or that the CLI stopped before it ended, CANCELED."""
    instance.report_run_canceled(run, message)


def mark_run_failed(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Ends a run whose process stopped without ending it (a crash, a kill)."""
    instance.report_run_failed(run, message)


def step_durations(instance: dg.DagsterInstance, run_id: str) -> dict[str, float]:
    """Seconds from each step's start to its success, for the steps of a run that succeeded."""
    from dagster._core.events import DagsterEventType

    started, durations = {}, {}
    for entry in instance.all_logs(run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS}):
        if entry.dagster_event.event_type == DagsterEventType.STEP_START:
            started[entry.step_key] = entry.timestamp
        else:
            durations[entry.step_key] = entry.timestamp - started[entry.step_key]
    return durations


def step_processes(instance: dg.DagsterInstance, run_id: str) -> dict[str, int]:
    """The pid of the process that executed each started step of a run, from its STEP_START
    event: the run's own process, or the one the multiprocess executor forked for the step."""
    from dagster._core.events import DagsterEventType

    return {entry.step_key: entry.dagster_event.pid
            for entry in instance.all_logs(run_id, of_type=DagsterEventType.STEP_START)}


def initialize_pool_limit(instance: dg.DagsterInstance, pool: str) -> None:
    """Gives ``pool`` the instance's default limit now, if it has none yet, as the first
    step that claims a slot of it would (see ``defs/retries.py`` for why)."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits or storage.get_pool_config().default_pool_limit is None:
        return
    if pool not in {limit.name for limit in storage.get_pool_limits()}:
        storage.initialize_concurrency_limit_to_default(pool)


def pool_limits(instance: dg.DagsterInstance) -> dict[str, tuple[int, bool]]:
    """Each concurrency pool the instance knows: (its limit, whether that is the default)."""
    return {pool.name: (pool.limit, pool.from_default) for pool in instance.event_log_storage.get_pool_limits()}


def pool_default_limit(instance: dg.DagsterInstance) -> int | None:
    """The limit a pool gets when it is first claimed (``concurrency: pools:`` in dagster.yaml)."""
    return instance.get_concurrency_config().pool_config.default_pool_limit


def pool_slots(instance: dg.DagsterInstance, pool: str) -> tuple[int, int, int]:
    """(slots, slots held, steps waiting for one) of a pool."""
    info = instance.event_log_storage.get_concurrency_info(pool)
    return info.slot_count, info.active_slot_count, info.pending_step_count


def hold_pool_slot(instance: dg.DagsterInstance, pool: str, run_id: str, step: str, held: bool = True) -> None:
    """Takes (or, ``held=False``, frees) a slot of a pool as a step of that run would."""
    storage = instance.event_log_storage
    if held:
        storage.claim_concurrency_slot(pool, run_id, step)
    else:
        storage.free_concurrency_slot_for_step(run_id, step)


def storage_classes(instance: dg.DagsterInstance) -> tuple[str, str]:
    """The class names of the instance's run storage and event log storage."""
    return type(instance.run_storage).__name__, type(instance.event_log_storage).__name__


def run_queue_limit(instance: dg.DagsterInstance) -> int | None:
    """The instance's limit on runs in progress at once (``concurrency: runs:`` in
    dagster.yaml), or None when it sets none."""
    queue = instance.get_concurrency_config().run_queue_config
    limit = queue.max_concurrent_runs if queue is not None else -1
    return limit if limit > 0 else None


# 5. What the UI shows, read the way the UI reads it (for the tests) ------------------------------


def stale_status(instance: dg.DagsterInstance, defs: dg.Definitions, key: dg.AssetKey,
                 partition: str | None = None) -> str:
    """The staleness the UI shows of an asset (partition): "FRESH", "STALE" or "MISSING"."""
    from dagster._core.definitions.data_version import CachingStaleStatusResolver
    from dagster._core.loader import LoadingContextForTest

    resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))
    return resolver.get_status(key, partition).value


def freshness_state(instance: dg.DagsterInstance, defs: dg.Definitions, key: dg.AssetKey,
                    now: float | None = None) -> str:
    """The freshness the freshness daemon gives an asset ("PASS", "WARN", "FAIL", "UNKNOWN"),
    at ``now`` (a timestamp; the clock's time when None)."""
    import asyncio
    from unittest import mock

    from dagster._core.definitions import freshness_evaluator
    from dagster._core.loader import LoadingContextForTest

    evaluator = freshness_evaluator.TimeWindowFreshnessPolicyEvaluator()
    node = defs.resolve_asset_graph().get(key)
    clock = mock.patch.object(freshness_evaluator, "get_current_timestamp", lambda: now) if now else nullcontext()
    with clock:
        return asyncio.run(evaluator.evaluate_freshness(LoadingContextForTest(instance), node)).value


def check_executions(instance: dg.DagsterInstance, check: dg.AssetCheckKey,
                     partition: str | None = None) -> list[tuple[str, str]]:
    """(status, run id) of each evaluation of a check (of one partition's, when given),
    newest first."""
    from dagster._core.event_api import PartitionKeyFilter

    history = instance.event_log_storage.get_asset_check_execution_history(
        check, limit=1000, partition_filter=PartitionKeyFilter(key=partition) if partition else None)
    return [(execution.status.value, execution.run_id) for execution in history]


def partition_keys_in_range(partitions: dg.PartitionsDefinition, instance: dg.DagsterInstance,
                            key_range: dg.PartitionKeyRange) -> list[str]:
    """The partition keys a run of that range targets, as Dagster resolves it."""
    from dagster._core.definitions.partitions.context import partition_loading_context

    with partition_loading_context(dynamic_partitions_store=instance):
        return list(partitions.get_partition_keys_in_range(key_range))


def config_errors(config_schema: Any, value: Any) -> list[str]:
    """What Dagster's config system finds wrong with ``value`` for a config schema (a config
    type, or ``"instance"`` for dagster.yaml's schema); empty when it is valid."""
    from dagster._config import validate_config
    from dagster._core.instance.config import dagster_instance_config_schema

    schema = dg.Shape(dagster_instance_config_schema()) if config_schema == "instance" else config_schema
    return [error.message for error in validate_config(schema, value).errors or []]


# 6. SQLite storage that keeps its connections (runs/pooled_sqlite.py) --------------------------


class SqliteStorageParts(NamedTuple):
    """Dagster's SQLite storages, which ``runs/pooled_sqlite.py`` subclasses, and what they
    are built from."""

    unified: type  # DagsterSqliteStorage: the three below, in an instance's folder
    runs: type  # SqliteRunStorage
    event_logs: type  # SqliteEventLogStorage
    schedules: type  # SqliteScheduleStorage
    index_shard: str  # the event log's index database
    busy_timeout_s: float  # how long Dagster's SQLite connections wait for a lock
    runs_directory: Callable[[str], str]  # where each storage keeps its files in an instance's folder
    event_logs_directory: Callable[[str], str]
    schedules_directory: Callable[[str], str]


def sqlite_storage_parts() -> SqliteStorageParts:
    """Dagster's SQLite storage classes and their files' places, imported on call (SQLAlchemy,
    Alembic). Public alternative: ``storage: sqlite``, which builds an engine per operation."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
        INDEX_SHARD_NAME,
        SqliteEventLogStorage,
    )
    from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
    from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
    from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
    from dagster._core.storage.sqlite_storage import (
        DagsterSqliteStorage,
        _event_logs_directory,
        _runs_directory,
        _schedule_directory,
    )

    return SqliteStorageParts(DagsterSqliteStorage, SqliteRunStorage, SqliteEventLogStorage, SqliteScheduleStorage,
                              INDEX_SHARD_NAME, SQLITE_BUSY_TIMEOUT_SECONDS, _runs_directory, _event_logs_directory,
                              _schedule_directory)


def remember_migration_scripts() -> None:
    """Makes Dagster's storages read its Alembic migration scripts once per process (and once
    per fork server, for all its forks), not at each database they open.

    Dagster's SQLite storages compare each database's Alembic revision with the head of
    Dagster's migration scripts when a process first opens it (``check_alembic_revision``), and
    each comparison builds a new ``ScriptDirectory``, which loads every script again: four
    times in a forked step (the runs, schedules, index and run databases), 0.11 s of the 0.28 s
    of CPU a step costs before it does anything (docs/performance.md). The scripts are the
    installed package's, so one ``ScriptDirectory`` per script location answers every check.
    Public alternative: none."""
    from dagster._core.storage import sql

    if getattr(sql.ScriptDirectory, "remembered", False):
        return
    loaded: dict[str, Any] = {}

    class RememberedScriptDirectory(sql.ScriptDirectory):
        remembered = True

        @classmethod
        def from_config(cls, config):
            location = config.get_main_option("script_location")
            if location not in loaded:
                loaded[location] = super().from_config(config)
            return loaded[location]

    sql.ScriptDirectory = RememberedScriptDirectory


def instance_defaults(base_dir: str, storage: tuple[str, str, Mapping[str, Any]]) -> dict:
    """What an instance class's ``config_defaults`` returns: Dagster's defaults for an
    instance in ``base_dir``, with the storage (module, class, config) given instead of
    Dagster's SQLite storage. Public alternative: a ``storage: custom:`` block in dagster.yaml,
    which is not told the folder dagster.yaml was read from."""
    import yaml
    from dagster._core.instance.ref import InstanceRef
    from dagster._serdes import ConfigurableClassData

    module, class_name, config = storage
    defaults = dict(InstanceRef.config_defaults(base_dir))
    defaults["storage"] = ConfigurableClassData(module, class_name, yaml.dump(dict(config), default_flow_style=False))
    return defaults


# 7. Runs launched from a preloaded fork server (runs/launcher.py) ------------------------------
# Dagster's launcher has the code server spawn an interpreter per run, which imports the code
# location before the run starts. ``PreloadedRunLauncher`` forks the runs of the project's code
# location from a server that imported it once; every other run goes to Dagster's.


def run_python_target(run: dg.DagsterRun) -> tuple[str, str, str] | None:
    """(interpreter, module, code location name) of the code a run executes, as its code
    server loaded it (None: the run has no Python origin, or its code is not a module).
    Public alternative: none; a run's origins are Dagster's own records."""
    from dagster._core.code_pointer import ModuleCodePointer

    origin, remote = run.job_code_origin, run.remote_job_origin
    if origin is None or remote is None or not isinstance(origin.repository_origin.code_pointer, ModuleCodePointer):
        return None
    return (origin.repository_origin.executable_path, origin.repository_origin.code_pointer.module,
            remote.repository_origin.code_location_origin.location_name)


def run_reconstructable_job(run: dg.DagsterRun):
    """The run's job, loaded from its Python origin as a run worker loads it. Public
    alternative: ``build_reconstructable_job`` needs the job's module and function, which the
    UI's runs (an asset job of the automation's) do not name."""
    from dagster._utils.hosted_user_process import recon_job_from_origin

    return recon_job_from_origin(run.job_code_origin)


def location_env(instance: dg.DagsterInstance, location_name: str) -> dict[str, str]:
    """The environment variables the instance's secrets loader gives a code location's
    processes (a ``.env`` file, by default). Public alternative: none."""
    loader = instance._secrets_loader  # noqa: SLF001
    return dict(loader.get_secrets_for_environment(location_name)) if loader is not None else {}


def launch_failed(message: str) -> Exception:
    """The error a run launcher raises for a run it could not launch: Dagster's run queue
    then fails the run with ``message``. Public alternative: none."""
    from dagster._core.errors import DagsterLaunchFailedError

    return DagsterLaunchFailedError(message)


def track_launched_run(launcher: dg.DefaultRunLauncher, run_id: str) -> None:
    """Adds a run that a subclass of Dagster's default launcher launched itself to the runs its
    ``join()`` waits for, as ``DefaultRunLauncher.launch_run`` does. Public alternative: none."""
    launcher._run_ids.add(run_id)  # noqa: SLF001


def run_worker_health(running: bool, message: str | None = None):
    """What a run launcher's ``check_run_worker_health`` returns: the run's process is
    running, or it failed (``message`` says why). Public alternative: none."""
    from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus

    return CheckRunHealthResult(WorkerStatus.RUNNING if running else WorkerStatus.FAILED, message)


# The two classes that dagster.yaml names by module path lived here until they moved to runs/.
# An instance whose dagster.yaml still names them here loads them from there, with a warning
# that names the new path. The import happens on that lookup only (this module imports nothing
# of runs/ itself: tests/test_layout_rules.py).
MOVED_TO = {"PooledSqliteInstance": "trajectory_assets.runs.pooled_sqlite",
            "PreloadedRunLauncher": "trajectory_assets.runs.launcher"}


def __getattr__(name: str):
    if name not in MOVED_TO:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    import warnings

    warnings.warn(f"dagster.yaml names {__name__}.{name}, which moved: write `module: {MOVED_TO[name]}`",
                  FutureWarning, stacklevel=2)
    return getattr(importlib.import_module(MOVED_TO[name]), name)
