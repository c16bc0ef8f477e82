"""S3 through s3fs against a real S3 HTTP endpoint on loopback (moto's server mode)."""

import json

import pytest

from tests.split_files import split_paths
from tests.conftest import SAMPLE, LoopbackS3, loopback_s3
from trajectory_assets.cli import main
from trajectory_assets.io.source_files import discover, fingerprint
from trajectory_assets.sources import INPUTS_SUFFIXES
from trajectory_assets.io.storage import Storage

BUCKET = "rollout-bucket"


@pytest.fixture(scope="module")
def s3_server():
    server = LoopbackS3()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def s3_endpoint(s3_server) -> str:
    return s3_server.endpoint


@pytest.fixture
def s3(s3_server, monkeypatch):
    import s3fs

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()  # pick up this endpoint, not a cached client
    fs = s3fs.S3FileSystem()
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    fs.put(str(SAMPLE) + "/", f"{BUCKET}/rollouts/", recursive=True)
    yield fs
    fs.rm(BUCKET, recursive=True)
    s3fs.S3FileSystem.clear_instance_cache()


def test_discover_and_fingerprint_objects(s3):
    found = discover([f"s3://{BUCKET}/rollouts"], INPUTS_SUFFIXES)
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
    store.remove("a/b.json")
    store.remove("a/b.json")  # a missing object is fine
    assert not store.exists("a/b.json")


def test_copy_is_server_side_and_a_checksum_follows_the_objects_bytes(s3):
    store = Storage(f"s3://{BUCKET}/out")
    store.write_bytes("exports/a.jsonl", b"committed")
    store.copy("exports/a.jsonl", "staging/run/a.jsonl")
    assert store.read_bytes("staging/run/a.jsonl") == b"committed" and store.exists("exports/a.jsonl")
    first = store.checksum("exports/a.jsonl")
    assert store.checksum("staging/run/a.jsonl") == first  # the ETag: the same bytes
    store.write_bytes("exports/a.jsonl", b"written again")
    assert store.checksum("exports/a.jsonl") != first


def test_remove_folder_deletes_the_objects_under_its_prefix_only(s3):
    store = Storage(f"s3://{BUCKET}/out")
    store.write_bytes("k.decontamination/1.json", b"{}")
    store.write_bytes("k.decontamination/2.json", b"{}")
    store.write_bytes("k.decontamination.json", b"{}")
    store.remove_folder("k.decontamination")
    assert not store.exists("k.decontamination/1.json") and not store.exists("k.decontamination/2.json")
    assert store.exists("k.decontamination.json")
    store.remove_folder("k.decontamination")  # already gone: fine


def test_a_failed_write_keeps_the_previous_object(s3):
    """fsspec's ``__exit__`` commits even on an exception: the half object must not replace the old one."""
    store = Storage(f"s3://{BUCKET}/out")
    store.write_bytes("exports/sft/train.jsonl", b'{"old": 1}\n')
    with pytest.raises(RuntimeError, match="blocking check failed"):
        with store.open_write("exports/sft/train.jsonl") as handle:
            handle.write(b'{"half": ')
            raise RuntimeError("blocking check failed")
    assert s3.cat_file(f"{BUCKET}/out/exports/sft/train.jsonl") == b'{"old": 1}\n'


MIB = 1 << 20


def test_a_failed_multipart_write_is_aborted_and_keeps_the_previous_object(s3):
    store = Storage(f"s3://{BUCKET}/out")
    old = b"o" * (11 * MIB)
    with store.open_write("big.jsonl") as handle:
        handle.blocksize = 5 * MIB  # S3's smallest part: force the multipart path (s3fs's default is 50 MiB)
        handle.write(old)
    assert s3.cat_file(f"{BUCKET}/out/big.jsonl") == old
    with pytest.raises(RuntimeError):
        with store.open_write("big.jsonl") as handle:
            handle.blocksize = 5 * MIB
            for _ in range(3):
                handle.write(b"n" * (4 * MIB))
            assert handle.mpu is not None and handle.parts  # parts were uploaded already
            raise RuntimeError("killed mid-write")
    s3.invalidate_cache()
    assert s3.cat_file(f"{BUCKET}/out/big.jsonl") == old
    assert not s3.call_s3("list_multipart_uploads", Bucket=BUCKET).get("Uploads")  # the upload was aborted


def test_a_failed_write_of_a_new_key_leaves_no_object(s3):
    store = Storage(f"s3://{BUCKET}/out")
    with pytest.raises(RuntimeError):
        with store.open_write("new.jsonl") as handle:
            handle.write(b"x")
            raise RuntimeError("failed")
    s3.invalidate_cache()
    assert not s3.exists(f"{BUCKET}/out/new.jsonl")


def test_s3_run_gives_the_same_records_and_exports_as_a_local_run(s3, tmp_path):
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path / "local")]) == 0
    assert main(["run", "--source", f"s3://{BUCKET}/rollouts", "--storage", f"s3://{BUCKET}/out"]) == 0
    for export in ("sft", "dpo", "grpo"):
        local_folder = tmp_path / "local" / "exports" / export
        for path in [*split_paths(local_folder, "train"), *split_paths(local_folder, "validation")]:
            assert s3.cat_file(f"{BUCKET}/out/exports/{export}/{path.name}") == path.read_bytes()
        # the shards were moved into place: nothing else in the folder, no staging left
        assert sorted(name.rsplit("/", 1)[1] for name in s3.ls(f"{BUCKET}/out/exports/{export}", refresh=True)) == sorted(
            path.name for path in local_folder.iterdir())
        assert not s3.exists(f"{BUCKET}/out/staging/{export}")
        manifest = json.loads(s3.cat_file(f"{BUCKET}/out/exports/{export}/manifest.json"))
        local = json.loads((tmp_path / "local" / "exports" / export / "manifest.json").read_text())
        assert [s["sha256"] for s in manifest["sources"]] == [s["sha256"] for s in local["sources"]]
        assert all(s["uri"].startswith(f"s3://{BUCKET}/rollouts/") for s in manifest["sources"])
        assert not s3.exists(f"{BUCKET}/out/indexes/{export}")  # no row index beside the files
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


def test_a_run_survives_the_endpoint_going_away_for_two_seconds(tmp_path, monkeypatch):
    """The S3 server stops mid-run and comes back on the same port 2 s later: the steps that
    hit the outage are retried (STORAGE_RETRY; botocore's own retries are switched off with
    AWS_MAX_ATTEMPTS=1, so they cannot mask it) and the run ends as a clean run does."""
    import os
    import subprocess
    import sys
    import time

    import s3fs

    from tests.conftest import PROJECT_ROOT

    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path / "local")]) == 0
    with loopback_s3(monkeypatch, AWS_MAX_ATTEMPTS="1", AWS_RETRY_MODE="standard") as server:
        fs = s3fs.S3FileSystem()
        fs.mkdir("outage")
        fs.put(str(SAMPLE) + "/", "outage/rollouts/", recursive=True)
        process = subprocess.Popen(
            [sys.executable, "-m", "trajectory_assets.cli", "run", "--source", "s3://outage/rollouts",
             "--storage", "s3://outage/out", "--workers", "1"],
            cwd=PROJECT_ROOT, env={**os.environ, **server.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while not fs.find("outage/out/raw/") and time.monotonic() < deadline:  # the run is writing
                time.sleep(0.05)
                fs.invalidate_cache()
            assert process.poll() is None, "the run ended before the outage"
            server.stop()
            time.sleep(2)
            server.start()  # the same port; moto keeps its objects in this process
            _, stderr = process.communicate(timeout=300)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, 9)
                process.wait()
        assert process.returncode == 0, stderr.decode()
        for export in ("sft", "dpo", "grpo"):
            local_folder = tmp_path / "local" / "exports" / export
            for name in [*(path.name for split in ("train", "validation") for path in split_paths(local_folder, split)),
                         "manifest.json"]:
                remote = fs.cat_file(f"outage/out/exports/{export}/{name}")
                local = (tmp_path / "local" / "exports" / export / name).read_bytes()
                if name == "manifest.json":  # the same, but for where the sources were read from
                    remote, local = json.loads(remote), json.loads(local)
                    for manifest in (remote, local):
                        manifest["sources"] = [s["sha256"] for s in manifest["sources"]]
                        manifest.get("config", {}).pop("sources", None)
                assert remote == local, (export, name)
        assert json.loads(fs.cat_file("outage/out/reports/stats.json")) == json.loads(
            (tmp_path / "local" / "reports" / "stats.json").read_text())
        assert not fs.call_s3("list_multipart_uploads", Bucket="outage").get("Uploads")
