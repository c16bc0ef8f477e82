"""One test per name of ``trajectory_assets/dagster_internals.py``, the only module that
uses Dagster's private API. Each runs the private function on a toy graph and checks the
behaviour the project relies on, so that a Dagster upgrade that changes it fails here, with
the name of what changed, instead of somewhere downstream."""


import os
import signal
from datetime import timedelta

import dagster as dg
import pytest
import yaml

from trajectory_assets import PROJECT_ROOT
from trajectory_assets import dagster_internals as internals

LETTERS = dg.StaticPartitionsDefinition(["a", "b", "c"])
CHANGED = "a private Dagster API used in trajectory_assets/dagster_internals.py changed"


@dg.asset(partitions_def=LETTERS)
def upstream(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(data_version=dg.DataVersion("bytes-of-" + ",".join(context.partition_keys)))


@dg.asset(partitions_def=LETTERS, deps=[upstream], code_version="7")
def downstream() -> None:
    pass


@dg.asset(freshness_policy=dg.FreshnessPolicy.time_window(fail_window=timedelta(minutes=30)))
def fresh_asset() -> None:
    pass


TOY = dg.Definitions(assets=[upstream, downstream, fresh_asset],
                     jobs=[dg.define_asset_job("toy", selection=[upstream, downstream], partitions_def=LETTERS,
                                               tags={"team": "toy"})])


def toy_job() -> dg.JobDefinition:
    """What a forked process loads (``build_reconstructable_job``)."""
    return TOY.resolve_job_def("toy")


def reconstructable_toy():
    return dg.build_reconstructable_job("tests.test_dagster_internals", "toy_job",
                                        reconstructor_working_directory=str(PROJECT_ROOT))


def latest(instance, key: str, partition: str):
    return instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey(key),
                                                                 asset_partitions=[partition]), limit=1).records[0]


def test_code_location_job_origin_is_the_one_dagster_dev_loads():
    workspace = yaml.safe_load((PROJECT_ROOT / "workspace.yaml").read_text())["load_from"][0]["python_module"]
    origin = internals.code_location_job_origin(str(PROJECT_ROOT / "workspace.yaml"), "__repository__", "toy")
    assert origin.location_name == f"{workspace['module_name']}:{workspace['attribute']}", CHANGED
    assert origin.job_name == "toy" and origin.repository_origin.repository_name == "__repository__", CHANGED


def test_create_and_execute_recorded_run_in_this_process():
    origin = internals.code_location_job_origin(str(PROJECT_ROOT / "workspace.yaml"), "__repository__", "toy")
    with dg.instance_for_test() as instance:
        run = internals.create_recorded_run(instance, toy_job(), reconstructable_toy(), origin, {},
                                            {"dagster/partition": "a", "mine": "1"})
        assert run.status == dg.DagsterRunStatus.NOT_STARTED, CHANGED
        assert run.remote_job_origin == origin and run.job_code_origin is not None, CHANGED
        assert run.tags["team"] == "toy" and run.tags["mine"] == "1", CHANGED  # the job's tags, then ours
        events = list(internals.execute_recorded_run(reconstructable_toy(), run, instance))
        assert events[-1].event_type == dg.DagsterEventType.RUN_SUCCESS, CHANGED
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.SUCCESS, CHANGED
        assert set(internals.step_durations(instance, run.run_id)) == {"upstream", "downstream"}, CHANGED
        # the default executor ran each step in a subprocess: the pid is that process's
        pids = internals.step_processes(instance, run.run_id)
        assert set(pids) == {"upstream", "downstream"} and len(set(pids.values())) == 2, CHANGED
        assert os.getpid() not in pids.values(), CHANGED


def test_partition_tags_make_a_run_target_one_partition_or_a_range():
    with dg.instance_for_test() as instance:
        one = toy_job().execute_in_process(instance=instance, tags={internals.PARTITION_NAME_TAG: "b"})
        assert {e.partition for e in one.asset_materializations_for_node("upstream")} == {"b"}, CHANGED
        ranged = toy_job().execute_in_process(instance=instance, tags={
            internals.ASSET_PARTITION_RANGE_START_TAG: "a", internals.ASSET_PARTITION_RANGE_END_TAG: "b"})
        assert {e.partition for e in ranged.asset_materializations_for_node("upstream")} == {"a", "b"}, CHANGED
        keys = internals.partition_keys_in_range(LETTERS, instance, dg.PartitionKeyRange("b", "c"))
        assert keys == ["b", "c"], CHANGED


def test_materialization_version_tags_derive_the_version_as_dagster_does():
    with dg.instance_for_test() as instance:
        assert dg.materialize([upstream, downstream], instance=instance, partition_key="a").success
        upstream_record, dagsters = latest(instance, "upstream", "a"), latest(instance, "downstream", "a")
        ours = internals.materialization_version_tags("7", None, {dg.AssetKey("upstream"): upstream_record})
        assert ours == {key: value for key, value in dagsters.asset_materialization.tags.items() if key in ours}, CHANGED
        assert set(ours) >= {"dagster/code_version", "dagster/data_version",
                             "dagster/input_data_version/upstream", "dagster/input_event_pointer/upstream"}, CHANGED
        given = internals.materialization_version_tags("7", "content-hash", {})
        assert given["dagster/data_version"] == "content-hash", CHANGED
        assert internals.recorded_data_version(upstream_record) == "bytes-of-a", CHANGED
        assert internals.recorded_input_event(dagsters, dg.AssetKey("upstream")) == upstream_record.storage_id, CHANGED
        assert internals.recorded_data_version(None) is None


def test_check_target_points_an_evaluation_at_a_materialization():
    with dg.instance_for_test() as instance:
        assert dg.materialize([upstream], instance=instance, partition_key="c").success
        record = latest(instance, "upstream", "c")
        target = internals.check_target(record)
        evaluation = dg.AssetCheckEvaluation(asset_key=dg.AssetKey("upstream"), check_name="c", passed=True,
                                             partition="c", target_materialization_data=target)
        assert evaluation.target_materialization_data.storage_id == record.storage_id, CHANGED
        assert internals.check_target(None) is None


def test_runs_can_be_marked_canceling_canceled_and_failed():
    origin = internals.code_location_job_origin(str(PROJECT_ROOT / "workspace.yaml"), "__repository__", "toy")
    with dg.instance_for_test() as instance:
        canceled, failed = (internals.create_recorded_run(instance, toy_job(), reconstructable_toy(), origin, {}, {})
                            for _ in range(2))
        internals.mark_run_canceling(instance, canceled, "stop")
        assert instance.get_run_by_id(canceled.run_id).status == dg.DagsterRunStatus.CANCELING, CHANGED
        internals.mark_run_canceled(instance, instance.get_run_by_id(canceled.run_id), "stopped")
        assert instance.get_run_by_id(canceled.run_id).status == dg.DagsterRunStatus.CANCELED, CHANGED
        internals.mark_run_failed(instance, failed, "its process died")
        assert instance.get_run_by_id(failed.run_id).status == dg.DagsterRunStatus.FAILURE, CHANGED
        with internals.instance_from_ref(internals.instance_ref(instance)) as other:
            assert other.get_run_by_id(failed.run_id).status == dg.DagsterRunStatus.FAILURE, CHANGED


def test_execution_interrupts_are_what_dagster_raises_when_a_run_is_interrupted():
    from dagster._core.errors import raise_execution_interrupts
    from dagster._utils.interrupts import capture_interrupts

    with pytest.raises(internals.EXECUTION_INTERRUPTS):
        with capture_interrupts(), raise_execution_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0.5)  # let the handler run


def test_pools_and_the_run_queue_as_the_instance_configures_them():
    overrides = {"concurrency": {"pools": {"default_limit": 3}, "runs": {"max_concurrent_runs": 5}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        assert internals.pool_default_limit(instance) == 3 and internals.run_queue_limit(instance) == 5, CHANGED
        assert "p" not in internals.pool_limits(instance)
        internals.initialize_pool_limit(instance, "p")
        internals.initialize_pool_limit(instance, "p")  # a second call finds it there
        assert internals.pool_limits(instance)["p"] == (3, True), CHANGED
        internals.hold_pool_slot(instance, "p", "run-1", "step")
        assert internals.pool_slots(instance, "p") == (3, 1, 0), CHANGED
        internals.hold_pool_slot(instance, "p", "run-1", "step", held=False)
        assert internals.pool_slots(instance, "p") == (3, 0, 0), CHANGED
        assert internals.storage_classes(instance)[1].endswith("EventLogStorage"), CHANGED
    with dg.instance_for_test() as instance:
        assert internals.run_queue_limit(instance) == 10, CHANGED  # Dagster's default run queue


def test_stale_status_and_check_executions_read_what_the_ui_shows():
    @dg.asset_check(asset=upstream, partitions_def=LETTERS)
    def upstream_check() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=True)

    defs = dg.Definitions(assets=[upstream, downstream], asset_checks=[upstream_check])
    with dg.instance_for_test() as instance:
        result = dg.materialize([upstream, downstream, upstream_check], instance=instance, partition_key="a")
        assert internals.stale_status(instance, defs, dg.AssetKey("downstream"), "a") == "FRESH", CHANGED
        assert internals.stale_status(instance, defs, dg.AssetKey("downstream"), "b") == "MISSING", CHANGED
        executions = internals.check_executions(instance, upstream_check.check_key, "a")
        assert executions == [("SUCCEEDED", result.run_id)], CHANGED


def test_freshness_state_is_the_daemons_verdict_at_a_given_time():
    with dg.instance_for_test() as instance:
        assert internals.freshness_state(instance, TOY, dg.AssetKey("fresh_asset")) == "UNKNOWN", CHANGED
        assert dg.materialize([fresh_asset], instance=instance).success
        built = instance.get_latest_materialization_event(dg.AssetKey("fresh_asset")).timestamp
        assert internals.freshness_state(instance, TOY, dg.AssetKey("fresh_asset"), built + 60) == "PASS", CHANGED
        assert internals.freshness_state(instance, TOY, dg.AssetKey("fresh_asset"), built + 31 * 60) == "FAIL", CHANGED


def test_config_errors_come_from_dagsters_config_system():
    assert internals.config_errors("instance", {"telemetry": {"enabled": False}}) == [], CHANGED
    assert internals.config_errors("instance", {"telemetry": {"enabled": "yes please"}}), CHANGED
    assert internals.config_errors(dg.Field(int).config_type, 3) == [], CHANGED


def materialized_partitions(instance) -> list[str]:
    records = instance.fetch_materializations(dg.AssetKey("upstream"), limit=100).records
    return sorted(record.partition_key for record in records)


def write_in_a_forked_child(instance) -> None:
    """Writes, then closes its storage: with connections of its own, the parent's set aside
    and still referenced (so never closed by this process)."""
    import sys

    assert dg.materialize([upstream], instance=instance, partition_key="a").success
    engines = instance.event_log_storage._pooled_engines
    inherited = [engine for parent in engines._inherited for engine in parent.values()]
    own = engines._pid == os.getpid() and len(engines._engines) > 0
    engines.dispose()
    sys.exit(0 if own and inherited and not engines._engines else 3)


def test_pooled_sqlite_storage_is_dagsters_own_with_its_connections_kept(temporary_instance):
    """dagster.yaml names it; the files are where Dagster's SQLite storage puts them; each
    process opens a database file once, a forked child opens its own, and a wipe leaves no
    connection to a deleted file."""
    import multiprocessing

    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    from trajectory_assets.runs.pooled_sqlite import PooledSqliteInstance

    dagsters = internals.sqlite_storage_parts()
    # the methods overridden are still the ones that open a connection per operation
    assert "_connect" in vars(dagsters.event_logs) and "connect" in vars(dagsters.runs), CHANGED
    assert "connect" in vars(dagsters.schedules) and "wipe" in vars(dagsters.event_logs), CHANGED
    assert dagsters.runs_directory("/home").startswith("/home") and isinstance(dagsters.index_shard, str), CHANGED
    opened: list[int] = []

    def count(*_):
        opened.append(os.getpid())

    def connections_for_three_runs(instance) -> int:
        opened.clear()  # opening a storage checks each file's schema, with engines of Dagster's
        for partition in "abc":
            assert dg.materialize([upstream], instance=instance, partition_key=partition).success
        return len(opened)

    event.listen(Pool, "connect", count)
    try:
        with dg.instance_for_test() as plain:  # Dagster's own SQLite storage
            per_operation = connections_for_three_runs(plain)
        with dg.DagsterInstance.get() as instance:
            assert type(instance) is PooledSqliteInstance, "dagster.yaml names the instance class"
            assert internals.storage_classes(instance) == ("PooledSqliteRunStorage", "PooledSqliteEventLogStorage")
            assert isinstance(instance.event_log_storage, dagsters.event_logs), CHANGED
            # each run's own database created (two connections), one to the index: not one per
            # query and event
            kept = connections_for_three_runs(instance)
            assert kept <= 3 * 2 + 1 < per_operation // 4, f"{kept} connections opened, {per_operation} by Dagster's"
            child = multiprocessing.get_context("fork").Process(target=write_in_a_forked_child, args=(instance,))
            child.start()
            child.join(60)
            assert child.exitcode == 0, "a forked child used, or let go of, its parent's connections"
            assert dg.materialize([upstream], instance=instance, partition_key="b").success
            assert materialized_partitions(instance) == ["a", "a", "b", "b", "c"]
            instance.wipe()
            assert dg.materialize([upstream], instance=instance, partition_key="c").success
            assert len(instance.get_runs()) == 1
            assert materialized_partitions(instance) == ["c"]
    finally:
        event.remove(Pool, "connect", count)
    for name in ("history/runs.db", "history/runs/index.db", "schedules/schedules.db"):
        assert (temporary_instance / name).is_file(), f"{name}: not where Dagster's SQLite storage keeps it"
    # opened by its folder, whatever DAGSTER_HOME names; a storage: key replaces the default
    elsewhere = temporary_instance.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "dagster.yaml").write_text((temporary_instance / "dagster.yaml").read_text())
    with dg.DagsterInstance.from_config(str(elsewhere)) as instance:
        assert dg.materialize([upstream], instance=instance, partition_key="a").success
    assert (elsewhere / "history" / "runs.db").is_file()
    with dg.DagsterInstance.get() as home:
        assert materialized_partitions(home) == ["c"], "a run of another folder's instance landed in DAGSTER_HOME"
    (elsewhere / "dagster.yaml").write_text((temporary_instance / "dagster.yaml").read_text()
                                           + f"storage:\n  sqlite:\n    base_dir: {elsewhere / 'plain'}\n")
    with dg.DagsterInstance.from_config(str(elsewhere)) as instance:
        assert internals.storage_classes(instance) == ("SqliteRunStorage", "SqliteEventLogStorage")


def test_an_instance_whose_dagster_yaml_names_the_classes_old_module_still_loads(temporary_instance):
    """dagster.yaml named both classes in dagster_internals.py before they moved to runs/: such
    an instance loads them from their new modules, with a warning of one line that names the
    module to write instead."""
    from trajectory_assets.runs.launcher import PreloadedRunLauncher
    from trajectory_assets.runs.pooled_sqlite import PooledSqliteInstance

    old = temporary_instance.parent / "old_dagster_yaml"
    old.mkdir()
    text = (temporary_instance / "dagster.yaml").read_text()
    for module in ("trajectory_assets.runs.pooled_sqlite", "trajectory_assets.runs.launcher"):
        assert f"module: {module}\n" in text
        text = text.replace(f"module: {module}\n", "module: trajectory_assets.dagster_internals\n")
    (old / "dagster.yaml").write_text(text)
    with pytest.warns(FutureWarning) as warned, dg.DagsterInstance.from_config(str(old)) as instance:
        assert type(instance) is PooledSqliteInstance and type(instance.run_launcher) is PreloadedRunLauncher
        assert dg.materialize([upstream], instance=instance, partition_key="a").success
    messages = {str(warning.message) for warning in warned if issubclass(warning.category, FutureWarning)}
    assert messages == {
        "dagster.yaml names trajectory_assets.dagster_internals.PooledSqliteInstance, which moved: "
        "write `module: trajectory_assets.runs.pooled_sqlite`",
        "dagster.yaml names trajectory_assets.dagster_internals.PreloadedRunLauncher, which moved: "
        "write `module: trajectory_assets.runs.launcher`"}
    assert (old / "history" / "runs.db").is_file()
    with pytest.raises(AttributeError):
        internals.NoSuchName  # noqa: B018


def test_preloaded_run_launcher_forks_the_project_code_location_only(temporary_instance, tmp_path, monkeypatch):
    """dagster.yaml names the launcher; a run of the project's code location, as the UI
    records it, is one it forks (its Python origin names the module and this interpreter) and
    loads by that origin; a run of another module, another interpreter, or a location with a
    .env of its own goes to Dagster's launcher; its health is its recorded process's."""
    import socket
    import sys

    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.launcher.base import WorkerStatus
    from dagster._record import copy

    from trajectory_assets.runs.launcher import LaunchedRuns, PreloadedRunLauncher
    from trajectory_assets.runs.run_workers import executor_tag, process_identity

    for method in ("launch_run", "terminate", "check_run_worker_health", "dispose"):
        assert callable(getattr(dg.DefaultRunLauncher, method, None)), CHANGED
    failed = internals.launch_failed("no fork")
    assert isinstance(failed, dg.DagsterError) and str(failed) == "no fork", CHANGED
    with dg.DagsterInstance.get() as instance:
        launcher = instance.run_launcher
        assert type(launcher) is PreloadedRunLauncher and launcher.supports_check_run_worker_health
        assert launcher._instance is instance, CHANGED
        internals.track_launched_run(launcher, "run-1")
        assert "run-1" in launcher._run_ids, CHANGED  # what DefaultRunLauncher.join() waits for
        launcher._run_ids.discard("run-1")
        from trajectory_assets.definitions import defs

        job = defs.resolve_job_def("ingest_rollout_batch")
        reconstructable = dg.build_reconstructable_job("trajectory_assets.definitions", "job_by_name",
                                                       ("ingest_rollout_batch",))
        origin = internals.code_location_job_origin(str(PROJECT_ROOT / "workspace.yaml"), "__repository__",
                                                    "ingest_rollout_batch")
        # the Python origin a code server records for the UI's runs: the module, the attribute
        from dagster._core.definitions.reconstruct import ReconstructableRepository

        repository = ReconstructableRepository.for_module("trajectory_assets.definitions", "defs",
                                                          working_directory=str(PROJECT_ROOT))
        ui_job = repository.get_reconstructable_job("ingest_rollout_batch")
        run = internals.create_recorded_run(instance, job, ui_job, origin, {}, {})
        assert internals.run_python_target(run) == (sys.executable, "trajectory_assets.definitions",
                                                    "trajectory_assets.definitions:defs"), CHANGED
        assert internals.run_reconstructable_job(run).get_definition().name == "ingest_rollout_batch", CHANGED
        assert LaunchedRuns.why_not_here(instance, run) is None
        # the CLI's own runs load their job through a function (build_reconstructable_job)
        assert "not a module" in LaunchedRuns.why_not_here(
            instance, internals.create_recorded_run(instance, job, reconstructable, origin, {}, {}))

        def with_repository_origin(**changes):
            def replaced(value, **fields):  # Dagster's records and named tuples alike
                return value._replace(**fields) if hasattr(value, "_replace") else copy(value, **fields)

            origin = run.job_code_origin
            return replaced(run, job_code_origin=replaced(origin, repository_origin=replaced(
                origin.repository_origin, **changes)))

        other_module = with_repository_origin(code_pointer=ModuleCodePointer("other_project.definitions", "defs"))
        assert "other_project.definitions" in LaunchedRuns.why_not_here(instance, other_module)
        other_python = with_repository_origin(executable_path="/opt/other/bin/python")
        assert "/opt/other/bin/python" in LaunchedRuns.why_not_here(instance, other_python)
        (tmp_path / ".env").write_text("TRAJECTORY_SOURCE=/elsewhere\n")
        monkeypatch.setenv("DAGSTER_PROJECT_ENV_FILE_PATHS", f'{{"trajectory_assets.definitions:defs": "{tmp_path}"}}')
        assert internals.location_env(instance, "trajectory_assets.definitions:defs") == {
            "TRAJECTORY_SOURCE": "/elsewhere"}, CHANGED
        assert ".env" in LaunchedRuns.why_not_here(instance, run)

        unchecked = launcher.check_run_worker_health(run)  # run monitoring fails a run of any other status
        assert unchecked.status == WorkerStatus.RUNNING and "not checked" in unchecked.msg, CHANGED
        instance.add_run_tags(run.run_id, executor_tag(process_identity(os.getpid()), run.run_id))
        assert launcher.check_run_worker_health(instance.get_run_by_id(run.run_id)).status == WorkerStatus.RUNNING
        gone = f"{socket.gethostname()}:{2**22 + 1}:1"  # above Linux's largest pid: no such process
        instance.add_run_tags(run.run_id, executor_tag(gone, run.run_id))
        assert launcher.check_run_worker_health(instance.get_run_by_id(run.run_id)).status == WorkerStatus.FAILED


def test_remember_migration_scripts(tmp_path):
    """Dagster's storages still look their migration scripts up through
    ``sql.ScriptDirectory.from_config`` when they check a database's revision, and once
    remembered, opening an instance's databases again (as each forked step does) reads no
    script file (a new database is still stamped through Alembic's own command, which reads
    them); the head revision is the one Dagster reads on its own."""
    import inspect

    from alembic.script import Script, ScriptDirectory
    from dagster._core.storage import sql

    assert "ScriptDirectory.from_config(" in inspect.getsource(sql.check_alembic_revision), CHANGED
    # Alembic's own class (an earlier test in this process may have opened the project's instance)
    plain_head = ScriptDirectory.from_config(sql.get_alembic_config(sql.__file__.replace(
        "sql.py", "runs/sqlite/sqlite_run_storage.py"))).get_current_head()
    internals.remember_migration_scripts()
    internals.remember_migration_scripts()  # twice is once
    assert sql.ScriptDirectory.__bases__ == (ScriptDirectory,)  # wrapped once
    loads = []
    original = Script._from_path.__func__

    def counted(cls, scriptdir, path):
        loads.append(path)
        return original(cls, scriptdir, path)

    Script._from_path = classmethod(counted)
    try:
        (tmp_path / "dagster.yaml").write_text((PROJECT_ROOT / "dagster_home" / "dagster.yaml").read_text())
        with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
            run_id = dg.materialize([fresh_asset], instance=instance).run_id
        first = len(loads)
        assert first > 0  # the counting sees the scripts read
        for _ in range(2):
            with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
                assert instance.all_logs(run_id), "the run's own database, opened again"
                assert instance.get_run_by_id(run_id) is not None
    finally:
        Script._from_path = classmethod(original)
    assert len(loads) == first, f"scripts read again: {loads[first:][:3]}"
    config = sql.get_alembic_config(sql.__file__.replace("sql.py", "runs/sqlite/sqlite_run_storage.py"))
    assert sql.ScriptDirectory.from_config(config).get_current_head() == plain_head
