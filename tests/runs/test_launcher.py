"""The UI's runs forked from a preloaded server (runs/launcher.py), driven from the test's
process: when that server is started again, a run that cannot load, a datasets run whose
steps fork. Launches by `dagster dev` (a re-execution, a crash, a termination) are in
tests/defs/test_dagster_dev.py; the launcher's Dagster side in tests/test_dagster_internals.py."""

from __future__ import annotations

import os

from tests.conftest import PROJECT_ROOT, edited
from trajectory_assets.runs.launcher import LaunchedRuns, code_stamp


def test_the_code_stamp_changes_with_a_source_file_or_the_config_file(tmp_path, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text("split: {validation_fraction: 0.1}\n")
    monkeypatch.setenv("TRAJECTORY_CONFIG", str(config))
    before = code_stamp()
    assert before == code_stamp() and str(config) in {path for path, _, _ in before}
    assert str(PROJECT_ROOT / "schemas" / "__init__.py") in {path for path, _, _ in before}
    config.write_text("split: {validation_fraction: 0.25}\n")
    after_config = code_stamp()
    assert after_config != before
    with edited(PROJECT_ROOT / "trajectory_assets" / "jsonutil.py"):
        assert code_stamp() != after_config


def _fork_server_pid() -> int:
    return os.getppid()


def fork_server_of(forks) -> int:
    """The pid of the server a process forked from ``forks`` has as its parent."""
    with forks.Pool(1) as pool:
        return pool.apply(_fork_server_pid)


def test_the_fork_server_is_started_again_after_a_source_edit_only(temporary_instance):
    launched = LaunchedRuns()
    try:
        first = fork_server_of(launched._fork_server())
        assert fork_server_of(launched._fork_server()) == first  # nothing changed: the same server
        with edited(PROJECT_ROOT / "trajectory_assets" / "jsonutil.py"):
            assert fork_server_of(launched._fork_server()) != first
    finally:
        launched.dispose()


def test_a_run_whose_process_cannot_load_it_fails_to_launch(temporary_instance):
    """The forked process answers with its error before the run starts (here the run was
    deleted after it was queued): the launch fails with that error, as Dagster's launcher's
    does, and nothing is left running."""
    import dagster as dg
    import pytest

    from trajectory_assets.runs.launcher import LaunchFailed
    from trajectory_assets.runs.runner import _Jobs

    launched = LaunchedRuns()
    try:
        with dg.DagsterInstance.get() as instance:
            run = _Jobs(None).create_run(instance, "ingest_rollout_batch", {}, {}, None, "test")
            instance.delete_run(run.run_id)
            with pytest.raises(LaunchFailed, match="could not start it: Traceback"):
                launched.launch(instance, run)
    finally:
        launched.dispose()


def test_a_launched_datasets_run_forks_its_steps_from_a_server_of_its_own(tmp_path, temporary_instance):
    """The UI's path for large data: a datasets run, forked by the launcher, whose executor
    forks each step (``steps: multiprocess``) ends SUCCESS and writes the exports the CLI
    wrote, byte for byte."""
    import subprocess
    import sys
    import time

    import dagster as dg

    from tests.conftest import SAMPLE
    from trajectory_assets.runs.run_plan import MAIN_JOB
    from trajectory_assets.runs.runner import _Jobs

    storage = tmp_path / "out"
    # the environment's dataset (unprefixed): what the launched run of the code location's job reads
    environment = {**os.environ, "TRAJECTORY_SOURCE": str(SAMPLE), "TRAJECTORY_STORAGE": str(storage)}
    subprocess.run([sys.executable, "-m", "trajectory_assets.cli", "run", "--source", str(SAMPLE), "--storage",
                    str(storage), "--execution", "in-process"], cwd=PROJECT_ROOT, check=True, capture_output=True,
                   timeout=300, env=environment)
    (storage / "exports").rename(tmp_path / "exports_of_the_cli")
    run_config = {"resources": {"sources": {"config": {"paths": [str(SAMPLE)]}},
                                "storage": {"config": {"root": str(storage)}}},
                  "execution": {"config": {"steps": "multiprocess"}}}
    launched = LaunchedRuns()
    try:
        with dg.DagsterInstance.get() as instance:
            run = _Jobs(None).create_run(instance, MAIN_JOB, run_config, {}, None, "test")
            launched.launch(instance, run)
            deadline = time.monotonic() + 240
            while not instance.get_run_by_id(run.run_id).is_finished and time.monotonic() < deadline:
                time.sleep(0.5)
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.SUCCESS
    finally:
        launched.dispose()
    def files(folder):
        return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}

    assert files(storage / "exports") == files(tmp_path / "exports_of_the_cli")  # byte for byte


def test_terminating_a_run_whose_process_is_gone_cancels_it_at_once(temporary_instance):
    """Terminate on a run recorded as forked on this machine by a process that no longer
    exists: nothing is left to interrupt, so the run ends CANCELED there and then; a run no
    process of this machine was recorded on is left to Dagster's launcher (None)."""
    import socket

    import dagster as dg

    from trajectory_assets.runs.run_workers import executor_tag
    from trajectory_assets.runs.runner import _Jobs

    with dg.DagsterInstance.get() as instance:
        run = _Jobs(None).create_run(instance, "ingest_rollout_batch", {}, {}, None, "test")
        untagged = instance.get_run_by_id(run.run_id).tags
        assert LaunchedRuns.terminate(instance, dg.DagsterRun(job_name=run.job_name, run_id="other",
                                                              tags=untagged)) is None
        instance.add_run_tags(run.run_id, executor_tag(f"{socket.gethostname()}:{2**22 + 1}:1", run.run_id))
        assert LaunchedRuns.terminate(instance, instance.get_run_by_id(run.run_id)) is True
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
