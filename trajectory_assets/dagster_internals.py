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
6. **SQLite storage that keeps its connections** (``PooledSqliteInstance``, named in
   ``dagster_home/dagster.yaml``): Dagster's SQLite storages build a new SQLAlchemy engine,
   connection and dialect set-up for every operation; these reuse them.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

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
    "PooledSqliteInstance",
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
    return dg.DagsterInstance.from_ref(ref)


def mark_run_canceling(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Marks a run as being canceled: an execution interrupted after this ends CANCELED,
    not FAILURE (Dagster reads the status back when it is interrupted)."""
    instance.report_run_canceling(run, message)


def mark_run_canceled(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
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


# 6. SQLite storage that keeps its connections ---------------------------------------------------
#
# Dagster's SQLite run, event log and schedule storages call ``create_engine(..., poolclass=
# NullPool)`` on every operation: a new engine, a new connection, SQLAlchemy's dialect set-up
# queries, then ``dispose()``. That costs about 1.3 ms an operation, and an asset event takes two
# or three (the run's own database, then the index): on the bundled sample, 1.5 s of a 5 s run
# went to storing 248 events. These subclasses differ from Dagster's in that one thing: each
# process keeps one engine per database file, with its pool of open connections. The files, the
# schema, the migrations and the queries are Dagster's own. Postgres (deploy/postgres) pools its
# connections already and does not use this.


class PooledSqliteInstance(dg.DagsterInstance):
    """A Dagster instance whose default storage, when dagster.yaml has no ``storage:`` key, is
    ``PooledSqliteStorage`` in the instance's own folder, where Dagster's SQLite storage would
    be. An instance class (dagster.yaml's ``instance_class``), not a ``storage: custom:`` block,
    because only an instance class is told the folder of the dagster.yaml it was loaded from: a
    storage block would have to name it through ``DAGSTER_HOME``, and
    ``DagsterInstance.from_config(folder)`` would then write to whatever instance that variable
    named."""

    @classmethod
    def config_schema(cls) -> dict:
        return {}

    @staticmethod
    def config_defaults(base_dir: str) -> dict:
        import yaml
        from dagster._core.instance.ref import InstanceRef
        from dagster._serdes import ConfigurableClassData

        defaults = dict(InstanceRef.config_defaults(base_dir))
        defaults["storage"] = ConfigurableClassData(__name__, "PooledSqliteStorage",
                                                    yaml.dump({"base_dir": base_dir}, default_flow_style=False))
        return defaults


class _Engines:
    """SQLAlchemy engines, one per SQLite file, for this process only.

    A forked child never uses (or closes) its parent's connections: SQLite forbids carrying an
    open connection across ``fork()``. It gets engines of its own, and the inherited ones are
    kept referenced so that garbage collection never closes them under the parent. At most
    ``capacity`` files stay open (a webserver reads one event database per run it shows); the
    least recently used engine is disposed beyond that.
    """

    def __init__(self, capacity: int = 16, **engine_args: Any):
        self._capacity = capacity
        self._engine_args = engine_args
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._engines: OrderedDict[str, Any] = OrderedDict()
        self._inherited: list[OrderedDict[str, Any]] = []

    def get(self, conn_string: str):
        with self._lock:
            self._adopt()
            engine = self._engines.get(conn_string)
            if engine is None:
                from sqlalchemy import create_engine

                # unbounded overflow: as many connections at once as NullPool allowed, and
                # five kept open between operations
                engine = create_engine(conn_string, max_overflow=-1, **self._engine_args)
                self._engines[conn_string] = engine
                while len(self._engines) > self._capacity:
                    self._engines.popitem(last=False)[1].dispose()
            self._engines.move_to_end(conn_string)
            return engine

    def dispose(self) -> None:
        with self._lock:
            self._adopt()
            for engine in self._engines.values():
                engine.dispose()
            self._engines = OrderedDict()

    def _adopt(self) -> None:
        """In a process forked since the engines were made: set the parent's aside, untouched."""
        if os.getpid() != self._pid:
            self._inherited.append(self._engines)
            self._engines, self._pid = OrderedDict(), os.getpid()


@contextmanager
def _transaction(engine) -> Iterator[Any]:
    with engine.connect() as conn:
        with conn.begin():
            yield conn


def _pooled_storage_classes():
    """The three pooled storages and the unified one, defined on first use so that importing
    this module does not import Dagster's storage modules (SQLAlchemy, Alembic)."""
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

    class KeptConnections:
        """``connect()`` of Dagster's SQLite run and schedule storages, on a kept engine."""

        _conn_string: str

        def __init__(self, *args, **kwargs):
            self._pooled_engines = _Engines()
            super().__init__(*args, **kwargs)

        @contextmanager
        def connect(self) -> Iterator[Any]:
            with _transaction(self._pooled_engines.get(self._conn_string)) as conn:
                yield conn

        def dispose(self) -> None:
            self._pooled_engines.dispose()
            super().dispose()

    class PooledSqliteRunStorage(KeptConnections, SqliteRunStorage):
        pass

    class PooledSqliteScheduleStorage(KeptConnections, SqliteScheduleStorage):
        pass

    class PooledSqliteEventLogStorage(SqliteEventLogStorage):
        def __init__(self, base_dir: str, inst_data=None):
            self._pooled_engines = _Engines(connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
            super().__init__(base_dir, inst_data=inst_data)

        @contextmanager
        def _connect(self, shard: str) -> Iterator[Any]:
            # as Dagster's, one operation at a time per storage, less the engine per call
            with self._db_lock:
                engine = self._pooled_engines.get(self.conn_string_for_shard(shard))
                if shard not in self._initialized_dbs:
                    self._initdb(engine)
                    self._initialized_dbs.add(shard)
                with _transaction(engine) as conn:
                    yield conn

        def has_table(self, table_name: str) -> bool:
            # asked of the index at every tagged asset event
            engine = self._pooled_engines.get(self.conn_string_for_shard(INDEX_SHARD_NAME))
            with engine.connect() as conn:
                return bool(engine.dialect.has_table(conn, table_name))

        def wipe(self) -> None:
            # wiping deletes the database files: no connection may outlive them
            self._pooled_engines.dispose()
            super().wipe()

        def dispose(self) -> None:
            self._pooled_engines.dispose()
            super().dispose()

    class PooledSqliteStorage(DagsterSqliteStorage):
        """Dagster's SQLite storage, files and layout unchanged, with pooled connections."""

        def __init__(self, base_dir: str, inst_data=None):
            self.base_dir = base_dir
            self._run_storage = PooledSqliteRunStorage.from_local(_runs_directory(base_dir))
            self._event_log_storage = PooledSqliteEventLogStorage(_event_logs_directory(base_dir))
            self._schedule_storage = PooledSqliteScheduleStorage.from_local(_schedule_directory(base_dir))
            self._inst_data = inst_data
            super(DagsterSqliteStorage, self).__init__()

        @classmethod
        def from_config_value(cls, inst_data, config_value):
            return cls(config_value["base_dir"], inst_data=inst_data)

    PooledSqliteStorage.__module__ = __name__
    return PooledSqliteStorage


def __getattr__(name: str):
    # ``PooledSqliteStorage`` is looked up by name when Dagster opens the instance
    if name == "PooledSqliteStorage":
        globals()[name] = _pooled_storage_classes()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# 7. Runs launched from a preloaded fork server --------------------------------------------------
# Dagster's launcher has the code server spawn an interpreter per run, which imports the code
# location before the run starts (runs/launcher.py). This one forks the runs of the project's
# code location from a server that imported it once; every other run goes to Dagster's.


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


class PreloadedRunLauncher(dg.DefaultRunLauncher):
    """Dagster's default run launcher, except that the runs of this project's code location
    are forked from a server that already imported it (``runs/launcher.py``): a launch takes
    a fork, not a new interpreter that imports the code location. Named in dagster.yaml's
    ``run_launcher``."""

    def __init__(self, inst_data=None):
        super().__init__(inst_data=inst_data)
        from trajectory_assets.runs.launcher import LaunchedRuns

        self._forked = LaunchedRuns()

    def launch_run(self, context) -> None:
        from trajectory_assets.runs.launcher import LaunchFailed

        run = context.dagster_run
        reason = self._forked.why_not_here(self._instance, run)
        if reason is not None:
            self._instance.report_engine_event(f"Launched through the code server: {reason}.", run, cls=type(self))
            return super().launch_run(context)
        try:
            self._forked.launch(self._instance, run)
        except LaunchFailed as error:
            from dagster._core.errors import DagsterLaunchFailedError

            raise DagsterLaunchFailedError(str(error)) from None
        self._run_ids.add(run.run_id)  # what join() waits for

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        handled = self._forked.terminate(self._instance, run)
        return super().terminate(run_id) if handled is None else handled

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun):
        from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus

        from trajectory_assets.runs.run_workers import executor_alive, recorded_executor

        executor = recorded_executor(run)
        alive = executor_alive(executor) if executor is not None else None
        if alive is None:  # as for Dagster's launcher, which checks none: run monitoring fails any other status
            return CheckRunHealthResult(WorkerStatus.RUNNING, "not forked by this launcher on this machine: "
                                        "its process is not checked")
        return CheckRunHealthResult(WorkerStatus.RUNNING if alive else WorkerStatus.FAILED,
                                    None if alive else f"its process ({executor}) is gone")

    def dispose(self) -> None:
        self._forked.dispose()
        super().dispose()
