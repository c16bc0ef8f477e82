"""Faults mid-run: a killed process leaves no half-written file under its final name, the
next run completes normally; storage that goes away fails the run with a clear message."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import PROJECT_ROOT, SAMPLE, make_rollout, message_item, write_jsonl
from trajectory_assets.cli import main


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
    return {p.relative_to(root): p for p in root.rglob("*") if p.is_file() and ".tmp-" not in p.name}


@pytest.mark.parametrize("kill_after", [1.5, 4.0, 7.0])
def test_a_run_killed_mid_write_leaves_only_whole_files_and_the_next_run_completes(source, tmp_path, kill_after):
    reference = tmp_path / "reference"
    assert main(["run", "--source", str(source), "--storage", str(reference), "--workers", "1"]) == 0
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
    for relative in ("exports/sft/train.jsonl", "exports/dpo/train.jsonl", "exports/grpo/manifest.json"):
        assert (target / relative).read_bytes() == (reference / relative).read_bytes()


def test_storage_that_goes_away_fails_the_run_with_a_clear_message(tmp_path, monkeypatch):
    import socket

    import s3fs
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_MAX_ATTEMPTS": "2", "AWS_RETRY_MODE": "standard"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    s3fs.S3FileSystem().mkdir("faults")
    process = cli_process("run", "--source", str(SAMPLE), "--storage", "s3://faults/out", "--workers", "1", env=env)
    time.sleep(1.0)
    server.stop()  # the endpoint disappears while the run is going
    try:
        _, stderr = process.communicate(timeout=240)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    message = stderr.decode().strip()
    assert process.returncode == 1, message
    assert message.startswith("trajectory-assets: run failed:") and "\n" not in message
    assert "Traceback" not in message


def test_two_runs_on_the_same_storage_do_not_corrupt_each_other(source, tmp_path):
    reference = tmp_path / "reference"
    assert main(["run", "--source", str(source), "--storage", str(reference), "--workers", "1"]) == 0
    shared = tmp_path / "shared"
    runs = [cli_process("run", "--source", str(source), "--storage", str(shared), "--workers", "1") for _ in range(2)]
    for run in runs:
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr.decode()
    for relative, path in final_files(reference).items():
        if relative.parts[0] in ("exports", "trajectories", "quarantine"):
            assert (shared / relative).read_bytes() == path.read_bytes(), relative
    assert not [p for p in shared.rglob("*") if ".tmp-" in p.name]  # every temporary file was renamed
