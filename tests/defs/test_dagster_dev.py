"""The real UI path: `dagster dev` on loopback, the sensor and automation do all the work.

Dropping rollout files into the source folder must be all it takes: the test only starts
the server, copies files, and reads the result through the GraphQL API the UI uses. Browser
tests then open, in Debian's Chromium, the asset graph, an export's page, the report's
Markdown with its plots, and the report page (reports/index.html) the run wrote.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.split_files import split_text
from tests.browser import ARTIFACTS, chromium_page, needs_chromium
from tests.conftest import PROJECT_ROOT, SAMPLE, make_rollout, write_jsonl
from tests.fixtures.probes import importing_processes, probe_env
from trajectory_assets.io.source_files import batch_key, discover
from trajectory_assets.runs.run_plan import BATCHES_TAG
from trajectory_assets.runs.run_workers import EXECUTOR_TAG
from trajectory_assets.sources import INPUTS_SUFFIXES

BATCH_ASSETS = {"raw_rollouts", "validated_trajectories", "quarantined_records"}
DATASET_ASSETS = {"sft_dataset", "dpo_dataset", "grpo_dataset", "sft_hermes_dataset", "stats_report"}
STATE_QUERY = """
{
  assetNodes {
    assetKey { path }
    partitionStats { numMaterialized numPartitions numFailed }
    assetMaterializations(limit: 1) { runId }
    freshnessStatusInfo { freshnessStatus }
    assetChecksOrError {
      ... on AssetChecks { checks { name executionForLatestMaterialization { status } } }
    }
  }
}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ui_folders(root: Path) -> dict:
    """A new instance (the project's dagster.yaml), the sample as the source, and the
    environment of the UI's code location on them."""
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    source = root / "incoming"
    shutil.copytree(SAMPLE, source / "rollouts")
    env = {**os.environ, "DAGSTER_HOME": str(home), "TRAJECTORY_SOURCE": str(source),
           "TRAJECTORY_STORAGE": str(root / "out"), "TRAJECTORY_SENSOR_INTERVAL": "2"}
    return {"source": source, "storage": root / "out", "env": env}


@contextlib.contextmanager
def running_dagster_dev(root: Path, env: dict) -> Iterator[str]:
    """`dagster dev` on a loopback port until the block ends; yields its URL once it answers."""
    port = free_port()
    log = open(root / "dagster_dev.log", "w")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: requests.get(f"{url}/server_info", timeout=2).ok, 120, "dagster dev to answer")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # graceful: the daemon and webserver stop together
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui")
    folders = ui_folders(root)
    with running_dagster_dev(root, folders["env"]) as url:
        yield {"url": url, "source": folders["source"], "storage": folders["storage"],
               "log": root / "dagster_dev.log", "env": folders["env"]}


def wait_for(condition, seconds: float, what: str, interval: float = 2.0):
    deadline = time.monotonic() + seconds
    last_error = None
    while time.monotonic() < deadline:
        try:
            result = condition()
            if result:
                return result
        except Exception as error:  # the server may still be starting
            last_error = error
        time.sleep(interval)
    raise AssertionError(f"timed out after {seconds}s waiting for {what} (last error: {last_error})")


def ui_state(url: str) -> dict:
    response = requests.post(f"{url}/graphql", json={"query": STATE_QUERY}, timeout=30)
    response.raise_for_status()
    nodes = response.json()["data"]["assetNodes"]
    return {"/".join(node["assetKey"]["path"]): node for node in nodes}


def everything_green(url: str, batches: int, batch_assets=BATCH_ASSETS, dataset_assets=DATASET_ASSETS):
    """The UI's state once every batch asset has ``batches`` partitions materialized, every
    dataset asset is materialized, and every check's latest execution succeeded; else None."""
    state = ui_state(url)
    if not set(batch_assets) | set(dataset_assets) <= set(state):
        return None
    for name in batch_assets:
        stats = state[name]["partitionStats"]
        if (stats["numPartitions"], stats["numMaterialized"]) != (batches, batches) or stats["numFailed"]:
            return None
    if any(not state[name]["assetMaterializations"] for name in dataset_assets):
        return None
    statuses = [
        check["executionForLatestMaterialization"]["status"]
        for node in state.values()
        for check in node["assetChecksOrError"].get("checks", [])
        if check["executionForLatestMaterialization"] is not None
    ]
    if not statuses or any(status != "SUCCEEDED" for status in statuses):
        return None
    return state


INGEST_RUNS = """
{
  runsOrError(filter: {pipelineName: "ingest_rollout_batch"}) {
    ... on Runs { results { status tags { key value } } }
  }
}
"""


def batches_named_by_runs(url: str) -> list[str]:
    response = requests.post(f"{url}/graphql", json={"query": INGEST_RUNS}, timeout=30)
    runs = response.json()["data"]["runsOrError"]["results"]
    assert all(run["status"] == "SUCCESS" for run in runs)
    return [key for run in runs for tag in run["tags"] if tag["key"] == "trajectory/batches"
            for key in tag["value"].split(",")]


def test_dropping_files_into_the_source_is_all_it_takes(dagster_dev):
    url = dagster_dev["url"]
    state = wait_for(lambda: everything_green(url, 3), 420, "the sample's 3 batches and every dataset, all checks green")
    first_runs = {name: state[name]["assetMaterializations"][0]["runId"] for name in DATASET_ASSETS}
    checks = {check["name"] for node in state.values() for check in node["assetChecksOrError"].get("checks", [])}
    assert {"nothing_lost", "trajectory_contract", "quarantine_contract", "contract", "no_split_leak",
            "dpo_margin"} <= checks
    # the sensor put the sample's three batches into ranged runs, each run naming its batches
    assert sorted(batches_named_by_runs(url)) == sorted(
        batch_key(source.source_id) for source in discover([str(dagster_dev["source"])], INPUTS_SUFFIXES))
    # the freshness daemon has judged the freshly built datasets (their policy: rebuilt within a day)
    wait_for(lambda: all((ui_state(url)[name]["freshnessStatusInfo"] or {}).get("freshnessStatus") == "HEALTHY"
                         for name in DATASET_ASSETS), 180, "the datasets' freshness evaluated as passing")

    # a new batch lands: it is registered, ingested alone, and the datasets refresh
    write_jsonl(dagster_dev["source"] / "rollouts" / "late_batch.jsonl",
                [make_rollout(request_input="late arrival", agent_ref={"name": "late_agent"})])
    state = wait_for(lambda: everything_green(url, 4), 420, "the new batch and refreshed datasets")
    wait_for(
        lambda: all(ui_state(url)[name]["assetMaterializations"][0]["runId"] != first_runs[name]
                    for name in DATASET_ASSETS),
        300, "exports re-materialized after the new batch",
    )
    grpo = split_text(dagster_dev["storage"] / "exports" / "grpo", "train") + split_text(
        dagster_dev["storage"] / "exports" / "grpo", "validation")
    assert "late_agent" in grpo


@needs_chromium
def test_browser_shows_the_asset_graph_and_an_export(dagster_dev):
    url = dagster_dev["url"]
    wait_for(lambda: everything_green(url, batches(dagster_dev)), 420, "a green graph")
    with chromium_page() as (page, _):
        # the whole graph: everything upstream of the report, asset by asset
        page.goto(f"{url}/assets/stats_report?view=lineage&lineageScope=upstream&lineageDepth=5", wait_until="networkidle")
        for name in ("raw_rollouts", "sft_dataset", "dpo_dataset", "grpo_dataset", "stats_report"):
            page.get_by_text(name, exact=True).first.wait_for(state="attached", timeout=60_000)
        page.wait_for_timeout(2000)  # let the graph layout settle before the picture
        page.screenshot(path=str(ARTIFACTS / "asset_graph.png"))
        page.goto(f"{url}/assets/sft_dataset", wait_until="networkidle")
        page.get_by_text("trajectory_id").first.wait_for(timeout=60_000)  # the contract's columns
        page.screenshot(path=str(ARTIFACTS / "sft_dataset.png"), full_page=True)
    assert (ARTIFACTS / "asset_graph.png").stat().st_size > 10_000
    assert (ARTIFACTS / "sft_dataset.png").stat().st_size > 10_000


def batches(dagster_dev) -> int:
    from trajectory_assets.io.source_files import discover

    return len(discover([str(dagster_dev["source"])], INPUTS_SUFFIXES))  # a materialized inputs file is no batch


@needs_chromium
def test_the_report_materialization_links_the_page_and_shows_its_plots(dagster_dev):
    url = dagster_dev["url"]
    wait_for(lambda: everything_green(url, batches(dagster_dev)), 420, "a green graph")
    page_file = dagster_dev["storage"] / "reports" / "index.html"
    with chromium_page() as (page, _):
        page.goto(f"{url}/assets/stats_report", wait_until="networkidle")
        page.get_by_text(str(page_file)).first.wait_for(timeout=60_000)  # the page's path, in the metadata
        page.get_by_text("[Show Markdown]").first.click()
        page.get_by_text("Trajectory statistics").first.wait_for(timeout=30_000)
        page.wait_for_function("document.querySelectorAll('img[src^=\"data:image/png\"]').length >= 4")
        drawn = page.evaluate("[...document.querySelectorAll('img[src^=\"data:image/png\"]')]"
                              ".map(image => image.complete ? image.naturalWidth : 0)")
        page.locator("img[src^='data:image/png']").first.scroll_into_view_if_needed()
        page.wait_for_timeout(1000)  # the dialog fades in
        page.screenshot(path=str(ARTIFACTS / "stats_report_markdown.png"))
    assert len(drawn) == 4 and min(drawn) > 100  # the Markdown's plots, drawn inside Dagster's UI


@needs_chromium
def test_the_report_page_of_a_real_run_renders_plots_and_every_export(dagster_dev):
    url = dagster_dev["url"]
    wait_for(lambda: everything_green(url, batches(dagster_dev)), 420, "a green graph")
    storage = dagster_dev["storage"]
    exports = sorted(path.parent.name for path in (storage / "exports").glob("*/manifest.json"))
    page_file = storage / "reports" / "index.html"
    with chromium_page(width=1300, height=1000) as (page, watched):
        page.goto(page_file.as_uri(), wait_until="load")
        figures = page.evaluate("[...document.querySelectorAll('figure img')].map(image => [image.alt, "
                                "image.complete ? image.naturalWidth : 0])")
        page.screenshot(path=str(ARTIFACTS / "report_page.png"))
        rendered = {}
        for export in exports:
            samples = page.locator(f".sample[data-export='{export}']")
            # a sample shows as turns (chat, pair, task): never an empty card
            rendered[export] = samples.count() and samples.first.locator(".turn").count()
            if export in ("sft", "dpo", "grpo"):
                samples.first.scroll_into_view_if_needed()
                page.screenshot(path=str(ARTIFACTS / f"report_{export}.png"))
        page.locator("#quarantine").scroll_into_view_if_needed()
        quarantine = page.locator("#quarantine ~ .sample pre").count()
        page.screenshot(path=str(ARTIFACTS / "report_quarantine.png"))
    assert len(figures) == 6 and all(width > 100 for _, width in figures), figures
    from trajectory_assets.exports.registry import EXPORTS

    assert len(exports) == len(EXPORTS) and all(rendered.values()), rendered
    assert quarantine == 2  # the sample's two rejected records, raw
    assert watched.console_errors == [] and watched.page_errors == [] and watched.dialogs == []
    assert [request for request in watched.requests if not request.startswith("data:")] == [page_file.as_uri()]


def settled_state(home: str) -> dict:
    """What the instance holds of the environment's dataset, once no run is queued or going: its
    batch partitions, each of its assets' materializations, and its runs."""
    import dagster as dg

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", home)
        with dg.DagsterInstance.get() as instance:
            runs = {record.dagster_run.run_id: (record.dagster_run.job_name, record.dagster_run.status.value)
                    for record in instance.get_run_records()}
            if any(status in ("QUEUED", "NOT_STARTED", "STARTING", "STARTED") for _, status in runs.values()):
                return {}
            keys = [key for key in instance.all_asset_keys() if len(key.path) == 1]
            return {
                "partitions": sorted(instance.get_dynamic_partitions("rollout_batches")),
                "materializations": {key.to_user_string(): sorted(
                    record.storage_id for record in instance.fetch_materializations(key, limit=500).records)
                    for key in keys},
                # an ad hoc call's jobs are ingest_adhoc_<hash> and build_adhoc_<hash>
                "runs": {run_id: run for run_id, run in runs.items() if "_adhoc_" not in run[0]},
            }


def test_a_cli_call_on_another_source_leaves_the_uis_dataset_as_it_was(dagster_dev, tmp_path):
    """A CLI call on another source, on the instance `dagster dev` serves: its batches and assets
    have a namespace of their own, so the UI's partitions, materializations and runs stay as
    they were, and no automation reacts to the call. (On Postgres: tests/deploy/test_postgres.py.)"""
    wait_for(lambda: everything_green(dagster_dev["url"], batches(dagster_dev)), 420, "a green graph")
    a_cli_call_leaves_the_ui_as_it_was(dagster_dev["env"], tmp_path)


def a_cli_call_leaves_the_ui_as_it_was(ui_env: dict, tmp_path: Path) -> None:
    home = ui_env["DAGSTER_HOME"]
    before = wait_for(lambda: settled_state(home), 300, "no run of the UI's going")
    other = tmp_path / "other"
    shutil.copytree(SAMPLE / "weather", other / "weather")
    env = {**ui_env, "TRAJECTORY_SOURCE": "", "TRAJECTORY_STORAGE": ""}  # the call's own, not the UI's
    result = subprocess.run([str(Path(sys.executable).parent / "trajectory-assets"), "run", "--source", str(other),
                             "--storage", str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    time.sleep(8)  # four evaluations of the UI's sensors (2 s apart): none may act on the call
    after = wait_for(lambda: settled_state(home), 300, "no run of the UI's going")
    assert after == before
    assert before["partitions"] and before["runs"]  # there was something to disturb
    assert (tmp_path / "out" / "exports" / "sft" / "manifest.json").exists()


RUNS = """
{ runsOrError { ... on Runs { results { runId jobName status parentRunId } } } }
"""
TICKS = """
query Ticks($name: String!) {
  sensorOrError(sensorSelector: {repositoryLocationName: "trajectory_assets.definitions:defs",
                                 repositoryName: "__repository__", sensorName: $name}) {
    ... on Sensor { sensorState { ticks(limit: 20) { status } } }
  }
}
"""
REEXECUTE = """
mutation Reexecute($parent: String!) {
  launchRunReexecution(reexecutionParams: {parentRunId: $parent, strategy: ALL_STEPS}) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}
"""


def graphql(url: str, query: str, **variables) -> dict:
    response = requests.post(f"{url}/graphql", json={"query": query, "variables": variables}, timeout=30)
    response.raise_for_status()
    return response.json()["data"]


def finished_ticks(url: str, sensor: str) -> int:
    state = graphql(url, TICKS, name=sensor)["sensorOrError"]["sensorState"]
    return sum(tick["status"] in ("SKIPPED", "SUCCESS") for tick in state["ticks"])


@pytest.fixture(scope="module")
def dagster_dev_after_the_cli(tmp_path_factory):
    """What a new user does after a CLI call: `dagster dev` on the same sources, storage and
    DAGSTER_HOME. Every process runs the probe (tests/fixtures/probes.py): it records which
    processes import the code location, and a run forked by the launcher that opens a file
    named crash_me is killed, one that opens hang_me hangs."""
    root = tmp_path_factory.mktemp("cli_then_ui")
    folders = ui_folders(root)
    probe = probe_env(root / "probe", PROBE_IMPORTS=str(root / "imports"), PROBE_KILL_ON_OPEN="crash_me",
                      PROBE_HANG_ON_OPEN="hang_me", PROBE_KILL_FORKED_ONLY="1")
    env = {**folders["env"], **{key: value for key, value in probe.items() if key.startswith("PROBE_")},
           "PYTHONPATH": probe["PYTHONPATH"]}
    subprocess.run([sys.executable, "-m", "trajectory_assets.cli", "run", "--source", str(folders["source"]),
                    "--storage", str(folders["storage"])], cwd=PROJECT_ROOT, env=env, check=True,
                   capture_output=True, timeout=300)
    with running_dagster_dev(root, env) as url:
        yield {"url": url, "storage": folders["storage"], "source": folders["source"], "imports": root / "imports"}


def test_opening_the_ui_on_what_the_cli_built_runs_nothing_again(dagster_dev_after_the_cli):
    """The batch sensor's first ticks (no cursor yet) find every file already ingested with the
    same data version, and declarative automation finds no data changed: no run is requested."""
    url = dagster_dev_after_the_cli["url"]
    wait_for(lambda: finished_ticks(url, "rollout_batch_sensor") >= 2
             and finished_ticks(url, "refresh_datasets_when_batches_land") >= 2, 120, "two ticks of each sensor")
    runs = graphql(url, RUNS)["runsOrError"]["results"]
    assert sorted(run["jobName"] for run in runs) == ["build_training_datasets", "ingest_rollout_batch"]


def test_a_cli_run_is_re_executed_from_the_ui(dagster_dev_after_the_cli):
    """The run page's Re-execute (the launchRunReexecution mutation) on a run the CLI recorded:
    the UI resolves its origin to the code location and runs it again."""
    url = dagster_dev_after_the_cli["url"]
    (parent,) = [run for run in graphql(url, RUNS)["runsOrError"]["results"]
                 if run["jobName"] == "build_training_datasets" and run["parentRunId"] is None]
    launched = graphql(url, REEXECUTE, parent=parent["runId"])["launchRunReexecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    def finished():
        (run,) = [run for run in graphql(url, RUNS)["runsOrError"]["results"] if run["runId"] == run_id]
        return run if run["status"] in ("SUCCESS", "FAILURE", "CANCELED") else None

    run = wait_for(finished, 300, "the re-executed run to finish", interval=1.0)
    assert run["status"] == "SUCCESS" and run["parentRunId"] == parent["runId"]
    # the launcher forked it from its preloaded server: its process never imported the code location
    executor = tagged_runs(url)[run_id]["tags"][EXECUTOR_TAG]
    host_pid, _, executed = executor.partition(" ")
    assert executed == run_id
    assert int(host_pid.split(":")[1]) not in importing_processes(dagster_dev_after_the_cli["imports"])


TAGGED_RUNS = """
{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }
"""
RUN_MESSAGES = """
query Messages($id: ID!) {
  logsForRun(runId: $id) { ... on EventConnection { events { ... on MessageEvent { message } } } }
}
"""
TERMINATE = """
mutation Terminate($id: String!) {
  terminateRun(runId: $id) { __typename ... on PythonError { message } }
}
"""


def tagged_runs(url: str) -> dict[str, dict]:
    return {run["runId"]: {**run, "tags": {tag["key"]: tag["value"] for tag in run["tags"]}}
            for run in graphql(url, TAGGED_RUNS)["runsOrError"]["results"]}


def ingest_run_of(url: str, file_stem: str, statuses: tuple[str, ...]) -> dict | None:
    """The first run that ingests the batch of ``file_stem``, once its status is one of ``statuses``."""
    runs = [run for run in tagged_runs(url).values() if file_stem in run["tags"].get(BATCHES_TAG, "")]
    return runs[-1] if runs and runs[-1]["status"] in statuses else None


def test_a_ui_run_whose_process_dies_is_failed(dagster_dev_after_the_cli):
    """The process the launcher forked for a sensor's run is killed (SIGKILL, no cleanup) when it
    opens its source: the launcher fails the run, saying why, and never leaves it started."""
    url = dagster_dev_after_the_cli["url"]
    write_jsonl(dagster_dev_after_the_cli["source"] / "rollouts" / "crash_me.jsonl", [make_rollout()])
    run = wait_for(lambda: ingest_run_of(url, "crash_me", ("SUCCESS", "FAILURE", "CANCELED")), 180,
                   "the crashed run to end", interval=1.0)
    assert run["status"] == "FAILURE"
    messages = [event.get("message") for event in
                graphql(url, RUN_MESSAGES, id=run["runId"])["logsForRun"]["events"]]
    assert any("exited with code -9 without ending it" in (message or "") for message in messages), messages


def test_terminating_a_ui_run_cancels_it(dagster_dev_after_the_cli):
    """The UI's Terminate on a run whose step hangs: the launcher interrupts its process and
    the run ends CANCELED."""
    url = dagster_dev_after_the_cli["url"]
    write_jsonl(dagster_dev_after_the_cli["source"] / "rollouts" / "hang_me.jsonl", [make_rollout()])
    run = wait_for(lambda: ingest_run_of(url, "hang_me", ("STARTED",)), 180, "the hanging run to start",
                   interval=0.5)
    assert run["tags"][EXECUTOR_TAG].endswith(run["runId"])  # forked by the launcher, which interrupts it
    terminated = graphql(url, TERMINATE, id=run["runId"])["terminateRun"]
    assert terminated["__typename"] == "TerminateRunSuccess", terminated
    run = wait_for(lambda: ingest_run_of(url, "hang_me", ("SUCCESS", "FAILURE", "CANCELED")), 120,
                   "the terminated run to end", interval=0.5)
    assert run["status"] == "CANCELED"
