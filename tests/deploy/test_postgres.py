"""The Postgres instance (deploy/postgres/dagster.yaml) against a real PostgreSQL server on
loopback: concurrent batch runs write the one instance, and the exports equal a SQLite run's."""

import shutil

import dagster as dg
import pytest
import yaml

from tests.conftest import (PROJECT_ROOT, AdHocCall, in_ci, make_rollout, message_item, temporary_dagster_home,
                            write_jsonl, written_files)
from tests.deploy.postgres_server import loopback_postgres, postgres_bin
from trajectory_assets.cli import main
from trajectory_assets.dagster_internals import check_executions, storage_classes

POSTGRES_CONFIG = PROJECT_ROOT / "deploy" / "postgres" / "dagster.yaml"
if postgres_bin() is None and in_ci():
    pytest.fail("CI is set but PostgreSQL's server binaries are missing (make test installs them)", pytrace=False)
pytestmark = pytest.mark.skipif(
    postgres_bin() is None, reason="PostgreSQL server binaries are not installed (make test installs Debian's "
    "postgresql when it runs as root)")


@pytest.fixture(scope="module")
def postgres():
    with loopback_postgres() as server:
        yield server


@pytest.fixture
def postgres_home(tmp_path, postgres, monkeypatch, request):
    """A DAGSTER_HOME with the shipped Postgres config, on a new database of the server."""
    home = tmp_path / "pg_home"
    home.mkdir()
    shutil.copy(POSTGRES_CONFIG, home / "dagster.yaml")
    for name, value in postgres.new_database(request.node.name.lower()[:60]).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def test_the_postgres_instance_differs_from_the_sqlite_one_only_in_storage():
    postgres = yaml.safe_load(POSTGRES_CONFIG.read_text())
    sqlite = yaml.safe_load((PROJECT_ROOT / "dagster_home" / "dagster.yaml").read_text())
    assert set(postgres.pop("storage")) == {"postgres"}
    assert sqlite.pop("instance_class")["class"] == "PooledSqliteInstance"  # the SQLite storage's connections
    assert postgres == sqlite


def rollout_folder(root, files: int):
    for index in range(files):
        rows = [make_rollout([message_item(f"answer {index}.{n}")], request_input=f"task {index}.{n % 3}",
                             reward=(n % 4) / 3, _ng_task_index=n % 3, agent_ref={"name": "agent"})
                for n in range(12)]
        write_jsonl(root / f"part_{index}.jsonl", rows + ["not json"])
    return root


def test_concurrent_batch_runs_write_one_postgres_instance_and_match_sqlite(tmp_path, postgres_home):
    source = rollout_folder(tmp_path / "in", files=9)
    # three ingest runs forked at once, each a range of three batches, all writing the one
    # database, then the datasets run (its steps forked too)
    assert main(["run", "--source", str(source), "--storage", str(tmp_path / "pg_out"), "--execution", "forked",
                 "--workers", "3"]) == 0
    call = AdHocCall.of([source], tmp_path / "pg_out")
    with dg.DagsterInstance.get() as instance:
        assert storage_classes(instance) == ("PostgresRunStorage", "PostgresEventLogStorage")
        runs = instance.get_run_records()
        ingest = [r for r in runs if r.dagster_run.job_name == call.ingest_job]
        assert len(ingest) == 3 and all(r.dagster_run.is_success for r in runs)
        batches = instance.get_dynamic_partitions(call.partitions)
        assert len(batches) == 9
        records = instance.fetch_materializations(call.key("validated_trajectories"), limit=20).records
        assert sorted(r.partition_key for r in records) == sorted(batches)
        for batch in batches:
            checks = check_executions(instance, dg.AssetCheckKey(call.key("validated_trajectories"),
                                                                 "nothing_lost"), batch)
            assert [status for status, _ in checks] == ["SUCCEEDED"]

    sqlite_home = temporary_dagster_home(tmp_path / "sqlite_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(sqlite_home))
        assert main(["run", "--source", str(source), "--storage", str(tmp_path / "sqlite_out"), "--workers", "1"]) == 0
    postgres_files, sqlite_files = written_files(tmp_path / "pg_out"), written_files(tmp_path / "sqlite_out")
    from trajectory_assets.exports.registry import EXPORTS

    assert len([name for name in postgres_files if name.startswith("exports/")]) == len(EXPORTS) * 4 + 1
    assert postgres_files == sqlite_files


def test_a_second_call_on_the_same_instance_adds_runs_and_drops_removed_batches(tmp_path, postgres_home):
    source = rollout_folder(tmp_path / "in", files=3)
    assert main(["run", "--source", str(source), "--storage", str(tmp_path / "out")]) == 0
    (source / "part_0.jsonl").unlink()
    assert main(["run", "--source", str(source), "--storage", str(tmp_path / "out")]) == 0
    call = AdHocCall.of([source], tmp_path / "out")
    with dg.DagsterInstance.get() as instance:
        assert len(instance.get_dynamic_partitions(call.partitions)) == 2
        assert len([r for r in instance.get_run_records() if r.dagster_run.job_name == call.datasets_job]) == 2
    manifest = yaml.safe_load((tmp_path / "out" / "exports" / "sft" / "manifest.json").read_text())
    assert len(manifest["batches"]) == 2


def test_the_storage_pool_gets_its_default_limit_before_runs_are_launched_together(postgres_home):
    """Two runs that both find the pool without a limit both insert one, and on Postgres the
    loser's run fails (dagster-io/dagster#33552): the CLI gives the pool its default limit
    (``dagster.yaml``: 4) before it launches them; a later call finds it there."""
    from trajectory_assets.dagster_internals import pool_limits as pools
    from trajectory_assets.defs.retries import STORAGE_POOL, initialize_storage_pool

    with dg.DagsterInstance.get() as instance:
        assert STORAGE_POOL not in pools(instance)
        initialize_storage_pool(instance)
        initialize_storage_pool(instance)
        assert pools(instance)[STORAGE_POOL] == (4, True)  # (the limit, from the default)


def test_two_calls_at_once_on_different_sources_on_postgres(tmp_path, postgres_home):
    """tests/runs/test_namespaces.py's case on the Postgres instance: both exit 0, each dataset
    byte-identical to its call run alone."""
    import os

    from tests.runs.test_namespaces import split_sample, two_sources_at_once

    first, second = split_sample(tmp_path / "in")
    two_sources_at_once(tmp_path, first, second, dict(os.environ))


def test_two_datasets_sharing_a_source_at_once_on_postgres(tmp_path, postgres_home):
    import os

    from tests.runs.test_namespaces import two_datasets_sharing_a_source

    two_datasets_sharing_a_source(tmp_path, dict(os.environ))


def test_a_cli_call_while_dagster_dev_serves_leaves_the_uis_dataset_on_postgres(tmp_path, postgres_home):
    """tests/defs/test_dagster_dev.py's case on the Postgres instance: `dagster dev` builds the
    sample, then a CLI call on another source leaves its partitions, materializations and runs."""
    import os

    from tests.conftest import SAMPLE
    from tests.defs.test_dagster_dev import a_cli_call_leaves_the_ui_as_it_was, everything_green, running_dagster_dev, wait_for

    source = tmp_path / "incoming"
    shutil.copytree(SAMPLE, source / "rollouts")
    env = {**os.environ, "TRAJECTORY_SOURCE": str(source), "TRAJECTORY_STORAGE": str(tmp_path / "ui_out"),
           "TRAJECTORY_SENSOR_INTERVAL": "2"}
    with running_dagster_dev(tmp_path, env) as url:
        wait_for(lambda: everything_green(url, 3), 420, "the sample's 3 batches and every dataset, all checks green")
        a_cli_call_leaves_the_ui_as_it_was(env, tmp_path / "cli")
