"""The CLI's runs (runs/runner.py): recorded in the instance as the UI records its own,
executed in the CLI's one process (or forked from one preloaded server), canceled by Ctrl-C,
failed, never left started, when a process dies. Each test drives a real CLI process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import dagster as dg
import pytest

from tests.conftest import PROJECT_ROOT, SAMPLE, AdHocCall, make_rollout, message_item, write_jsonl, written_files
from tests.fixtures.probes import importing_processes, probe_env
from trajectory_assets.dagster_internals import check_executions
from trajectory_assets.runs.run_plan import BATCHES_TAG
from trajectory_assets.runs.run_workers import EXECUTOR_TAG



def cli(*args: str, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trajectory_assets.cli", "run", *args], cwd=PROJECT_ROOT,
                            env=env or dict(os.environ), **popen)


def finish(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=timeout)
    return process.returncode, (stderr or b"").decode()


def runs(home) -> list[dg.DagsterRun]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return [record.dagster_run for record in instance.get_run_records()][::-1]  # oldest first


@pytest.fixture(scope="module")
def slow_source(tmp_path_factory):
    """Six files of 11 MB: after the first batch is ingested, each run still has work left."""
    root = tmp_path_factory.mktemp("slow") / "in"
    rows = [make_rollout([message_item(f"answer {i} " + "x" * 2000)], request_input=f"task {i}") for i in range(30000)]
    for part in range(6):
        write_jsonl(root / f"part_{part}.jsonl", rows[part::6])
    return root


def test_an_in_process_call_imports_the_code_location_once_and_records_its_runs(tmp_path, temporary_instance):
    env = probe_env(tmp_path / "probe", PROBE_IMPORTS=str(tmp_path / "imports"))
    process = cli("--source", str(SAMPLE), "--storage", str(tmp_path / "out"), "--execution", "in-process",
                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    code, stderr = finish(process)
    assert code == 0, stderr
    assert importing_processes(tmp_path / "imports") == [process.pid]  # no code server, no run worker
    made = runs(temporary_instance)
    call = AdHocCall.of([SAMPLE], tmp_path / "out")
    assert [run.job_name for run in made] == [call.ingest_job, call.datasets_job] and all(r.is_success for r in made)
    assert [run.tags[EXECUTOR_TAG].split(":")[1] for run in made] == [str(process.pid)] * 2
    assert [run.tags[EXECUTOR_TAG].split(" ")[1] for run in made] == [run.run_id for run in made]


def test_a_forked_call_imports_it_in_the_cli_only(tmp_path, temporary_instance):
    """With two workers: two ingest runs forked from the fork server, which is forked from the
    CLI once it has imported the code location, then the datasets run (its steps forked from
    the same server). Each run is recorded as the UI records a run it
    launched: the code location's origins, the call's sources and storage in its config, each
    batch's materializations and checks; and the outputs are those of an in-process call."""
    env = probe_env(tmp_path / "probe", PROBE_IMPORTS=str(tmp_path / "imports"))
    storage = tmp_path / "out"
    process = cli("--source", str(SAMPLE), "--storage", str(storage), "--execution", "forked", "--workers", "2",
                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    code, stderr = finish(process)
    assert code == 0, stderr
    importers = importing_processes(tmp_path / "imports")
    assert importers == [process.pid]  # not its fork server, nor the runs and steps forked from it

    made = runs(temporary_instance)
    call = AdHocCall.of([SAMPLE], storage)
    assert [run.job_name for run in made] == [call.ingest_job, call.ingest_job, call.datasets_job]
    assert all(run.is_success for run in made)
    for run in made:
        assert run.remote_job_origin.location_name == "trajectory_assets.definitions:defs"
        assert run.remote_job_origin.job_name == run.job_name
        resources = run.run_config["resources"]
        assert resources[f"{call.name}__sources"]["config"]["paths"] == [str(SAMPLE)]
        assert resources[f"{call.name}__storage"]["config"]["root"] == str(storage)
    assert made[-1].run_config["execution"]["config"]["steps"] == "multiprocess"
    with dg.DagsterInstance.from_config(str(temporary_instance)) as instance:
        batches = instance.get_dynamic_partitions(call.partitions)
        assert sorted(key for run in made[:2] for key in run.tags[BATCHES_TAG].split(",")) == sorted(batches)
        for asset in ("raw_rollouts", "validated_trajectories", "quarantined_records"):
            records = instance.fetch_materializations(call.key(asset), limit=10).records
            assert sorted(record.partition_key for record in records) == sorted(batches)
            assert {record.run_id for record in records} == {made[0].run_id, made[1].run_id}
        for batch in batches:
            checks = check_executions(instance, dg.AssetCheckKey(call.key("validated_trajectories"),
                                                                 "nothing_lost"), batch)
            assert [status for status, _ in checks] == ["SUCCEEDED"]
        exported = instance.fetch_materializations(call.key("sft_dataset"), limit=1).records[0]
        assert exported.run_id == made[-1].run_id

    in_process = tmp_path / "in_process"
    code, stderr = finish(cli("--source", str(SAMPLE), "--storage", str(in_process), "--execution", "in-process",
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    assert code == 0, stderr
    assert written_files(storage) == written_files(in_process)


@pytest.mark.parametrize("execution", ["in-process", "forked"])
def test_ctrl_c_cancels_every_run_the_call_started(slow_source, tmp_path, temporary_instance, execution):
    """SIGINT to the terminal's process group while the batches are being ingested: every run
    still going ends CANCELED (none FAILURE, none left going; a forked run may have finished
    first), the datasets run never starts, and the CLI exits 130."""
    with dg.DagsterInstance.from_config(str(temporary_instance)) as instance:  # its databases exist from here on
        process = cli("--source", str(slow_source), "--storage", str(tmp_path / "out"), "--execution", execution,
                      "--workers", "2", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 120
        call = AdHocCall.of([slow_source], tmp_path / "out")
        while time.monotonic() < deadline and not instance.fetch_materializations(
                call.key("validated_trajectories"), limit=1).records:
            time.sleep(0.05)
    assert process.poll() is None, "the CLI ended before the first batch was ingested"
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
    code, stderr = finish(process, timeout=120)
    assert code == 130 and "interrupted" in stderr, stderr
    made = runs(temporary_instance)
    assert made and {run.job_name for run in made} == {call.ingest_job}
    statuses = [run.status for run in made]
    assert dg.DagsterRunStatus.CANCELED in statuses
    assert set(statuses) <= {dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.SUCCESS}, statuses
    assert not (tmp_path / "out" / "exports").exists()


def test_a_forked_run_whose_process_dies_is_failed_and_named(tmp_path, temporary_instance):
    """The process of one ingest run is killed (SIGKILL: no exception, no cleanup) when it
    opens its source: the CLI fails that run, names it, and starts no datasets run; the other
    run completes."""
    for name in ("a", "b"):
        write_jsonl(tmp_path / "in" / f"{name}.jsonl", [make_rollout(request_input=f"task {name}")])
    env = probe_env(tmp_path / "probe", PROBE_KILL_ON_OPEN="in/b.jsonl", PROBE_KILL_FORKED_ONLY="1")
    code, stderr = finish(cli("--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out"),
                              "--execution", "forked", "--workers", "2", env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    assert code == 1 and "exited with code -9" in stderr and "Traceback" not in stderr, stderr
    made = runs(temporary_instance)
    statuses = {run.tags[BATCHES_TAG].split("-")[0]: run.status for run in made}
    assert statuses == {"in_a.jsonl": dg.DagsterRunStatus.SUCCESS, "in_b.jsonl": dg.DagsterRunStatus.FAILURE}


def test_a_datasets_step_whose_process_dies_fails_its_run(tmp_path, temporary_instance):
    env = probe_env(tmp_path / "probe", PROBE_KILL_ON_OPEN="/exports/dpo/", PROBE_KILL_FORKED_ONLY="1")
    code, stderr = finish(cli("--source", str(SAMPLE), "--storage", str(tmp_path / "out"), "--execution", "forked",
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    assert code == 1 and "merge_dpo" in stderr, stderr
    made = runs(temporary_instance)
    datasets_job = AdHocCall.of([SAMPLE], tmp_path / "out").datasets_job
    assert [(run.job_name, run.status) for run in made][-1] == (datasets_job, dg.DagsterRunStatus.FAILURE)
    assert all(run.is_finished for run in made)


def test_a_run_left_started_by_a_killed_cli_is_failed_by_the_next_call(tmp_path, temporary_instance):
    """In process, a crash in a step is a crash of the CLI: its run stays STARTED until the
    next call on this machine sees that the process that ran it is gone and fails it."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [make_rollout()])
    env = probe_env(tmp_path / "probe", PROBE_KILL_ON_OPEN="in/a.jsonl")
    code, _ = finish(cli("--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out"), "--execution",
                         "in-process", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    assert code == -signal.SIGKILL
    (abandoned,) = runs(temporary_instance)
    assert abandoned.status == dg.DagsterRunStatus.STARTED

    code, stderr = finish(cli("--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    assert code == 0, stderr
    by_id = {run.run_id: run for run in runs(temporary_instance)}
    assert by_id[abandoned.run_id].status == dg.DagsterRunStatus.FAILURE
    assert all(run.is_success for run_id, run in by_id.items() if run_id != abandoned.run_id)
