"""The real UI path: `dagster dev` on loopback, the sensor and automation do all the work.

Dropping rollout files into the source folder must be all it takes: the test only starts
the server, copies files, and reads the result through the GraphQL API the UI uses. A
browser test then opens the asset graph and an export's page in Debian's Chromium.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import PROJECT_ROOT, SAMPLE, make_rollout, write_jsonl
from trajectory_assets.io.sources import batch_key, discover

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = PROJECT_ROOT / "tests" / "artifacts"
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


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    source = root / "incoming"
    shutil.copytree(SAMPLE, source / "rollouts")
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "TRAJECTORY_SOURCE": str(source),
        "TRAJECTORY_STORAGE": str(root / "out"),
        "TRAJECTORY_SENSOR_INTERVAL": "5",
    }
    log = open(root / "dagster_dev.log", "w")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: requests.get(f"{url}/server_info", timeout=2).ok, 120, "dagster dev to answer")
        yield {"url": url, "source": source, "storage": root / "out", "log": root / "dagster_dev.log"}
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # graceful: the daemon and webserver stop together
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


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


def everything_green(url: str, batches: int):
    state = ui_state(url)
    for name in BATCH_ASSETS:
        stats = state[name]["partitionStats"]
        if (stats["numPartitions"], stats["numMaterialized"]) != (batches, batches) or stats["numFailed"]:
            return None
    if any(not state[name]["assetMaterializations"] for name in DATASET_ASSETS):
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
        batch_key(source.source_id) for source in discover([str(dagster_dev["source"])]))
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
    grpo = (dagster_dev["storage"] / "exports" / "grpo" / "train.jsonl").read_text() + (
        dagster_dev["storage"] / "exports" / "grpo" / "validation.jsonl").read_text()
    assert "late_agent" in grpo


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (make test installs it)")
def test_browser_shows_the_asset_graph_and_an_export(dagster_dev):
    from playwright.sync_api import sync_playwright

    url = dagster_dev["url"]
    wait_for(lambda: everything_green(url, len(list(dagster_dev["source"].rglob("*.jsonl*")))), 420, "a green graph")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        # the whole graph: everything upstream of the report, asset by asset
        page.goto(f"{url}/assets/stats_report?view=lineage&lineageScope=upstream&lineageDepth=5", wait_until="networkidle")
        for name in ("raw_rollouts", "sft_dataset", "dpo_dataset", "grpo_dataset", "stats_report"):
            page.get_by_text(name, exact=True).first.wait_for(state="attached", timeout=60_000)
        page.wait_for_timeout(2000)  # let the graph layout settle before the picture
        page.screenshot(path=str(ARTIFACTS / "asset_graph.png"))
        page.goto(f"{url}/assets/sft_dataset", wait_until="networkidle")
        page.get_by_text("trajectory_id").first.wait_for(timeout=60_000)  # the contract's columns
        page.screenshot(path=str(ARTIFACTS / "sft_dataset.png"), full_page=True)
        browser.close()
    assert (ARTIFACTS / "asset_graph.png").stat().st_size > 10_000
    assert (ARTIFACTS / "sft_dataset.png").stat().st_size > 10_000
