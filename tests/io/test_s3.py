"""S3 through s3fs against a real S3 HTTP endpoint on loopback (moto's server mode)."""

import json
import socket

import pytest

from tests.conftest import SAMPLE
from trajectory_assets.cli import main
from trajectory_assets.io.sources import discover, fingerprint
from trajectory_assets.io.storage import Storage

BUCKET = "rollout-bucket"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3fs.S3FileSystem.clear_instance_cache()  # pick up this endpoint, not a cached client
    fs = s3fs.S3FileSystem()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    fs.put(str(SAMPLE) + "/", f"{BUCKET}/rollouts/", recursive=True)
    yield fs
    fs.rm(BUCKET, recursive=True)
    s3fs.S3FileSystem.clear_instance_cache()


def test_discover_and_fingerprint_objects(s3):
    found = discover([f"s3://{BUCKET}/rollouts"])
    assert [s.source_id for s in found] == [
        "rollouts/legacy_rollouts.jsonl", "rollouts/math_rollouts.jsonl.gz", "rollouts/weather/rollouts.jsonl",
    ]
    assert all(s.uri.startswith(f"s3://{BUCKET}/rollouts/") for s in found)
    assert fingerprint(found[0].uri).startswith("etag:")


def test_storage_writes_and_reads_objects(s3):
    store = Storage(f"s3://{BUCKET}/out")
    store.write_bytes("a/b.json", b"{}")
    assert store.read_bytes("a/b.json") == b"{}"
    assert store.uri("a/b.json") == f"s3://{BUCKET}/out/a/b.json"
    with pytest.raises(Exception, match="materialize its asset first"):
        store.read_bytes("missing.json")


def test_s3_run_gives_the_same_records_and_exports_as_a_local_run(s3, tmp_path):
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path / "local")]) == 0
    assert main(["run", "--source", f"s3://{BUCKET}/rollouts", "--storage", f"s3://{BUCKET}/out"]) == 0
    for export in ("sft", "dpo", "grpo"):
        for split in ("train", "validation"):
            remote = s3.cat_file(f"{BUCKET}/out/exports/{export}/{split}.jsonl")
            assert remote == (tmp_path / "local" / "exports" / export / f"{split}.jsonl").read_bytes()
        manifest = json.loads(s3.cat_file(f"{BUCKET}/out/exports/{export}/manifest.json"))
        local = json.loads((tmp_path / "local" / "exports" / export / "manifest.json").read_text())
        assert [s["sha256"] for s in manifest["sources"]] == [s["sha256"] for s in local["sources"]]
        assert all(s["uri"].startswith(f"s3://{BUCKET}/rollouts/") for s in manifest["sources"])
    remote_stats = json.loads(s3.cat_file(f"{BUCKET}/out/reports/stats.json"))
    local_stats = json.loads((tmp_path / "local" / "reports" / "stats.json").read_text())
    assert remote_stats == local_stats
    quarantine = s3.cat_file(f"{BUCKET}/out/quarantine/rejected.jsonl").decode().splitlines()
    assert [json.loads(line)["reason"] for line in quarantine] == ["invalid_json", "not_a_rollout"]


def test_storage_options_through_fsspec_environment(s3, s3_endpoint, tmp_path):
    """Options beyond the AWS_* variables go through fsspec's own FSSPEC_S3 setting."""
    import os
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT

    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    env["FSSPEC_S3"] = json.dumps({"endpoint_url": s3_endpoint})
    result = subprocess.run(
        [sys.executable, "-m", "trajectory_assets.cli", "run", "--source", f"s3://{BUCKET}/rollouts",
         "--storage", f"s3://{BUCKET}/opts"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert s3.exists(f"{BUCKET}/opts/exports/sft/manifest.json")
