"""Shared fixtures: paths, and a small builder of NeMo Gym rollout rows."""

from __future__ import annotations

import dataclasses
import contextlib
import json
import os
import shutil
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SAMPLE = PROJECT_ROOT / "samples" / "rollouts"
# ../shared (its corpus of real files, the format notes), found through this one place: the
# folder beside the checkout, or the one SHARED_VARIABLE names. Naming a folder that does not
# exist says it is absent on purpose (.ci/run's lone-clone pass): see shared_data.
SHARED_VARIABLE = "TRAJECTORY_ASSETS_SHARED"
SHARED = Path(os.environ.get(SHARED_VARIABLE) or PROJECT_ROOT.parent / "shared")
CORPUS = SHARED / "corpus"


# The tiers of `make test` (docs/testing.md). Every test not named here is a unit or contract
# test: it needs no Dagster instance (a fixture below makes creating one fail), and `make
# test-fast` runs them alone (about 7 minutes here). End-to-end tests run the graph through Dagster
# (the CLI, jobs in process); system tests start real servers and processes (`dagster dev`,
# PostgreSQL, moto's S3, Chromium, the trainers, killed runs).
E2E = {
    "test_cli.py", "test_harbor_pipeline.py", "test_hermes_pipeline.py", "test_hostile_inputs.py", "test_redaction_pipeline.py",
    "conformance/", "defs/test_pipeline.py", "defs/test_automation.py", "defs/test_freshness.py",
    "runs/test_run_plan.py", "test_dagster_internals.py", "report/test_page.py",
    "exports/test_registry.py", "test_extension.py",
}
SYSTEM = {"defs/test_dagster_dev.py", "defs/test_dagster_dev_datasets.py", "runs/test_namespaces.py",
          "runs/test_runner.py", "runs/test_instance.py", "runs/test_launcher.py",
          "deploy/", "trainers/",
          "io/test_s3.py", "test_faults.py"}


def _tier(path: Path) -> str | None:
    relative = path.relative_to(Path(__file__).parent).as_posix()
    for tier, names in (("system", SYSTEM), ("e2e", E2E)):
        if any(relative == name or (name.endswith("/") and relative.startswith(name)) for name in names):
            return tier
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: runs the graph through Dagster (a Dagster instance)")
    config.addinivalue_line("markers", "system: starts real servers and processes")


def pytest_collection_modifyitems(items):
    for item in items:
        tier = _tier(Path(str(item.fspath)))
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(autouse=True)
def no_instance_in_unit_tests(request, monkeypatch):
    """A unit or contract test that creates a Dagster instance fails, naming the tiers: it
    belongs in E2E (or SYSTEM), so that the fast tier stays fast."""
    if request.node.get_closest_marker("e2e") or request.node.get_closest_marker("system"):
        return
    import dagster as dg

    def refuse(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} creates a Dagster instance: name its module in E2E or SYSTEM "
                             "(tests/conftest.py)")

    monkeypatch.setattr(dg.DagsterInstance, "__init__", refuse)


def in_ci() -> bool:
    """Whether CI is set: there, a test whose tools or data are missing fails instead of skipping."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def shared_data(relative: str) -> Path:
    """``SHARED / relative`` (e.g. "corpus/hermes") for a test that reads it. Absent, the test
    skips with the reason; with CI set it fails instead, since CI runs with ../shared beside the
    clone and a missing folder is a broken setup, unless SHARED_VARIABLE is set: then the
    folder was hidden on purpose."""
    path = SHARED / relative
    if path.exists():
        return path
    if os.environ.get(SHARED_VARIABLE):
        pytest.skip(f"{path} is absent ({SHARED_VARIABLE} names {SHARED})")
    if in_ci():
        pytest.fail(f"CI is set but {path} is absent (set {SHARED_VARIABLE} to a missing folder to run "
                    "without ../shared on purpose)", pytrace=False)
    pytest.skip(f"{path} is absent: ../shared is not beside this checkout")


def temporary_dagster_home(folder: Path) -> Path:
    """A Dagster instance folder with the project's dagster.yaml (SQLite storage in it)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", folder / "dagster.yaml")
    return folder


@pytest.fixture(scope="session", autouse=True)
def session_instance(tmp_path_factory):
    """Tests never write to the project's dagster_home: the CLI records its runs in
    DAGSTER_HOME, which points at a temporary instance (this one for module fixtures, a
    fresh one per test below). Checked when the session ends."""
    project_home = PROJECT_ROOT / "dagster_home"
    before = sorted(project_home.rglob("*"))
    previous = {name: os.environ.get(name) for name in ("DAGSTER_HOME", "TRAJECTORY_CATALOG")}
    os.environ["DAGSTER_HOME"] = str(temporary_dagster_home(tmp_path_factory.mktemp("dagster_home")))
    # no declared dataset unless a test declares one: a catalog/ in the checkout changes nothing here
    os.environ["TRAJECTORY_CATALOG"] = str(tmp_path_factory.mktemp("no_catalog") / "absent")
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    assert sorted(project_home.rglob("*")) == before, "a test wrote to the project's dagster_home"


@pytest.fixture(autouse=True)
def temporary_instance(tmp_path_factory, monkeypatch) -> Path:
    home = temporary_dagster_home(tmp_path_factory.mktemp("dagster_home"))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def default_sigterm() -> Iterator[None]:
    """SIGTERM kills the test worker again after each test. A Dagster run in this process
    leaves SIGTERM raising KeyboardInterrupt (``dagster._utils.interrupts`` maps it to SIGINT's
    handler), and a process the worker forks later inherits that: a forked pool's workers then
    raised KeyboardInterrupt on the pool's SIGTERM, in copies of the worker, and CI lost a
    worker to it as "keyboard-interrupt"."""
    yield
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def edited(path: Path) -> Iterator[None]:
    """``path`` with a comment appended (a change to its bytes, none to its behaviour) until
    the block ends; then its original text again."""
    original = path.read_text()
    path.write_text(original + "\n# an edit\n")
    try:
        yield
    finally:
        path.write_text(original)


def written_files(storage: Path) -> dict[str, bytes]:
    """Every dataset, card, manifest, report and quarantine file of a run, by relative path."""
    return {
        path.relative_to(storage).as_posix(): path.read_bytes()
        for folder in ("exports", "reports", "quarantine")
        for path in sorted((storage / folder).rglob("*"))
        if path.is_file()
    }


def message_item(text: str, role: str = "assistant") -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "output_text", "text": text}]}


def call_item(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": arguments, "call_id": call_id}


def output_item(call_id: str, output: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def make_rollout(
    output: list[dict[str, Any]] | None = None,
    *,
    request_input: Any = "Say hi.",
    reward: Any = 1.0,
    legacy: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    output = output if output is not None else [message_item("Hi!")]
    row: dict[str, Any] = {"responses_create_params": {"input": request_input}, "reward": reward}
    if legacy:
        row["output"] = output
    else:
        row["response"] = {"status": "completed", "model": "m", "output": output}
    row.update(extra)
    return row


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path




def trajectory_frame(rows: list[dict[str, Any]], source_id: str = "src.jsonl"):
    """The validated-trajectory table (as the exports read it) for in-memory rollout rows."""
    import pyarrow as pa

    from trajectory_assets.jsonutil import dumps, sha256_hex
    from trajectory_assets.sources import convert_record
    from trajectory_assets.ingest.conversion import trajectory_row
    from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
    from trajectory_assets.io.source_files import SourceFile

    source = SourceFile(uri=f"/data/{source_id}", source_id=source_id)
    table_rows = []
    for line, row in enumerate(rows, start=1):
        raw = dumps(row)
        trajectory = convert_record(raw, source_id=source_id)
        table_rows.append(trajectory_row(trajectory, trajectory_id=sha256_hex(raw)[:32], source=source, line=line))
    return pa.Table.from_pylist(table_rows, schema=TRAJECTORY_ARROW_SCHEMA).to_pandas()


class LoopbackS3:
    """moto's S3 server on a free 127.0.0.1 port, and the standard AWS environment that points
    at it. It can be stopped and started again on the same port (an outage); moto keeps its
    objects in this process meanwhile."""

    def __init__(self, **extra_env: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", **extra_env}
        self._server = None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


@contextlib.contextmanager
def loopback_s3(monkeypatch, **extra_env: str) -> Iterator[LoopbackS3]:
    """A running :class:`LoopbackS3` with its environment set for this test (s3fs clients
    created before are dropped, so nothing talks to another endpoint)."""
    import s3fs

    s3 = LoopbackS3(**extra_env)
    s3.start()
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield s3
    finally:
        s3.stop()
        s3fs.S3FileSystem.clear_instance_cache()


@dataclasses.dataclass(frozen=True)
class AdHocCall:
    """The names an ad hoc CLI call's runs and assets get in the instance (docs/datasets.md)."""

    name: str

    @classmethod
    def of(cls, sources: list, storage) -> "AdHocCall":
        from trajectory_assets.project import call_name

        return cls(call_name([str(source) for source in sources], str(storage)))

    @property
    def ingest_job(self) -> str:
        return f"ingest_{self.name}"

    @property
    def datasets_job(self) -> str:
        return f"build_{self.name}"

    @property
    def partitions(self) -> str:
        return f"{self.name}_batches"

    def key(self, asset: str):
        import dagster as dg

        return dg.AssetKey([self.name, asset])
