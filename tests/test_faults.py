"""Faults mid-run: a killed process leaves no half-written file under its final name, the
next run completes normally; storage that goes away fails the run with a clear message."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, SAMPLE, loopback_s3, make_rollout, message_item, write_jsonl
from trajectory_assets.cli import main
from trajectory_assets.io.source_files import batch_key


def cli_process(*args, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "trajectory_assets.cli", *args], cwd=PROJECT_ROOT,
        env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults") / "in"
    rows = [make_rollout([message_item(f"answer {i} " + "x" * 2000)], request_input=f"task {i % 700}",
                         reward=float(i % 3) / 2, _ng_task_index=i % 700, agent_ref={"name": "a"})
            for i in range(6000)]
    for part in range(3):
        write_jsonl(root / f"part_{part}.jsonl", rows[part::3])
    return root


def final_files(root):
    """The files under their final names (not the runs' working folder, staging/)."""
    return {p.relative_to(root): p for p in root.rglob("*")
            if p.is_file() and ".tmp-" not in p.name and p.relative_to(root).parts[0] != "staging"}


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory):
    """What an uninterrupted run writes."""
    storage = tmp_path_factory.mktemp("reference")
    assert main(["run", "--source", str(source), "--storage", str(storage), "--workers", "1"]) == 0
    return storage


@pytest.mark.parametrize("kill_after", [1.5, 3.0, 5.0])
def test_a_run_killed_mid_write_leaves_only_whole_files_and_the_next_run_completes(source, reference, tmp_path,
                                                                                   kill_after):
    target = tmp_path / "target"
    process = cli_process("run", "--source", str(source), "--storage", str(target), "--workers", "1")
    time.sleep(kill_after)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    expected = final_files(reference)
    for relative, path in final_files(target).items():
        # whatever is under a final name is complete: identical to the reference's file
        if relative.suffix in (".jsonl", ".parquet") or relative.parts[0] == "exports":
            assert path.read_bytes() == expected[relative].read_bytes(), relative
    assert main(["run", "--source", str(source), "--storage", str(target), "--workers", "1"]) == 0
    compared = [relative for relative in final_files(reference)
                if relative.parts[:2] in (("exports", "sft"), ("exports", "dpo")) and relative.suffix == ".jsonl"]
    assert len(compared) >= 3  # the sft split is in shards here (6,000 records)
    for relative in [*compared, Path("exports/grpo/manifest.json")]:
        assert (target / relative).read_bytes() == (reference / relative).read_bytes(), relative
    assert final_files(target).keys() == final_files(reference).keys()


def test_storage_that_goes_away_fails_the_run_with_a_clear_message(tmp_path, monkeypatch):
    import s3fs

    with loopback_s3(monkeypatch, AWS_MAX_ATTEMPTS="2", AWS_RETRY_MODE="standard") as server:
        s3fs.S3FileSystem().mkdir("faults")
        process = cli_process("run", "--source", str(SAMPLE), "--storage", "s3://faults/out", "--workers", "1",
                              env=server.env)
        time.sleep(1.0)
        server.stop()  # the endpoint disappears while the run is going
        _, stderr = process.communicate(timeout=240)
    message = stderr.decode().strip()
    assert process.returncode == 1, message
    assert message.startswith("trajectory-assets: run failed:") and "\n" not in message
    assert "Traceback" not in message


def test_two_runs_on_the_same_storage_do_not_corrupt_each_other(source, reference, tmp_path):
    shared = tmp_path / "shared"
    runs = [cli_process("run", "--source", str(source), "--storage", str(shared), "--workers", "1") for _ in range(2)]
    for run in runs:
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr.decode()
    for relative, path in final_files(reference).items():
        if relative.parts[0] in ("exports", "trajectories", "quarantine"):
            assert (shared / relative).read_bytes() == path.read_bytes(), relative
    assert not [p for p in shared.rglob("*") if ".tmp-" in p.name]  # every temporary file was renamed


def run_ingest(source_folder, storage, key_of):
    """Runs the per-batch job in-process for the batch of ``key_of`` (a source id); returns
    (result, step retry events, one-line failure reason)."""
    import dagster as dg

    from trajectory_assets import layout
    from trajectory_assets.definitions import RunSettings, build_definitions
    from trajectory_assets.runs.run_plan import INGEST_JOB
    from trajectory_assets.runs.runner import failure_reason
    from trajectory_assets.io.source_files import batch_key

    defs = build_definitions(RunSettings(sources=[str(source_folder)], storage=str(storage)))
    key = batch_key(key_of)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(layout.BATCH_PARTITIONS, [key])
        result = defs.resolve_job_def(INGEST_JOB).execute_in_process(
            instance=instance, partition_key=key, raise_on_error=False)
        retries = [e.step_key for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
        reason = next((failure_reason(event) for event in result.all_events if event.is_step_failure), None)
    return result, retries, reason


def test_bad_records_and_unreadable_sources_are_never_retried(tmp_path):
    from tests.fixtures.hostile import write_hostile_folder

    write_hostile_folder(tmp_path / "in")
    for source_id in ("in/truncated.jsonl", "in/broken link.jsonl", "in/x::y.jsonl"):
        result, retries, reason = run_ingest(tmp_path / "in", tmp_path / "out", source_id)
        assert result.success, reason
        assert retries == [], source_id


def test_a_storage_error_in_a_batch_is_retried_and_the_batch_completes(tmp_path, monkeypatch):
    from trajectory_assets.io.storage import Storage

    write_jsonl(tmp_path / "in" / "a.jsonl", [make_rollout([message_item("ok")])])
    real_write_bytes = Storage.write_bytes
    calls = []

    def flaky_write_bytes(self, relative, data):
        calls.append(relative)
        if len(calls) == 1:
            raise ConnectionResetError("connection reset by peer")
        return real_write_bytes(self, relative, data)

    monkeypatch.setattr(Storage, "write_bytes", flaky_write_bytes)
    result, retries, reason = run_ingest(tmp_path / "in", tmp_path / "out", "in/a.jsonl")
    assert result.success, reason
    assert retries == ["ingest_batches"]  # retried once (after 1 s), then done
    assert (tmp_path / "out" / "quarantine" / "batches").is_dir()


def test_a_bug_fails_the_batch_at_once_with_a_one_line_reason(tmp_path, monkeypatch):
    import trajectory_assets.ingest.batch as batch

    write_jsonl(tmp_path / "in" / "a.jsonl", [make_rollout([message_item("ok")])])

    def broken(*args, **kwargs):
        raise KeyError("no_such_column")

    monkeypatch.setattr(batch, "ingest", broken)
    started = time.monotonic()
    result, retries, reason = run_ingest(tmp_path / "in", tmp_path / "out", "in/a.jsonl")
    assert not result.success and retries == []  # the same code on the same bytes fails the same way
    assert reason == f"ingest_batches: batch {batch_key('in/a.jsonl')}: KeyError: 'no_such_column'"
    assert time.monotonic() - started < 30


def test_only_storage_faults_pass_through_to_the_retry_policy():
    import dagster as dg
    from botocore.exceptions import EndpointConnectionError

    from trajectory_assets.defs.retries import STORAGE_RETRY, storage_faults_only
    from trajectory_assets.io.storage import StorageError

    assert STORAGE_RETRY.max_retries == 3 and STORAGE_RETRY.backoff == dg.Backoff.EXPONENTIAL
    for fault in (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), TimeoutError("read timed out"),
                  ConnectionRefusedError(111, "refused"), StorageError("cannot write s3://b/k")):
        with pytest.raises(type(fault)):
            with storage_faults_only():
                raise fault
    with pytest.raises(dg.Failure) as failed:
        with storage_faults_only():
            raise ValueError("a bug")
    assert failed.value.allow_retries is False and failed.value.description == "ValueError: a bug"
