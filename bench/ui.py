"""The UI path against the CLI, measured in one session on the same corpus.

    python -m bench.ui [--corpus ../shared/corpus/nemo_gym] [--repeats 2] [--compare-launcher]

**ui**: what a new user does. `dagster dev -w workspace.yaml` on a loopback port with a new
instance (the project's dagster.yaml) and `TRAJECTORY_SOURCE` set to the corpus; nothing is
clicked. The batch sensor registers and ingests the files, declarative automation builds
the datasets. The wall time runs from starting `dagster dev` until, read through the
webserver's GraphQL API, every batch is materialized, every export and the report were
materialized after the last batch, and no check failed (asked only once some run was made
and none is waiting or running: asking for every asset's state loads the webserver, the runs'
states hardly). The time until the webserver first answers is reported too, and when each of
the UI's runs was created, started and ended.
**cli**: `trajectory-assets run` on the same files, with a new instance of its own, from
process start to exit.
**ui_default_launcher** (with ``--compare-launcher``): **ui** with Dagster's default run
launcher (dagster.yaml without its ``run_launcher``): each run's worker is spawned by the code
server and imports the code location, instead of being forked from the preloaded server of
``runs/launcher.py``.

The variants alternate (the order rotates each repeat) so drift on this shared machine hits
them all. Reports the median of each, their ratio (the target: ui <= 2 x cli), the runs each path
made, and whether both wrote byte-identical exports and reports. JSON and Markdown go to
bench/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "nemo_gym"
OUT = ROOT / "bench" / "out"
BIN = Path(sys.executable).parent
TIMEOUT_S = 900
STATE = """
{
  assetNodes {
    assetKey { path }
    partitionStats { numMaterialized numPartitions numFailed }
    assetMaterializations(limit: 1) { timestamp }
    assetChecksOrError { ... on AssetChecks { checks { executionForLatestMaterialization { status } } } }
  }
}
"""
RUNS = """
{ runsOrError { ... on Runs { results { jobName status creationTime startTime endTime tags { key value } } } } }
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _new_instance(folder: Path, default_launcher: bool = False) -> Path:
    """A new instance with the project's dagster.yaml (without its run launcher: Dagster's default)."""
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", folder / "dagster.yaml")
    if default_launcher:
        settings = yaml.safe_load((folder / "dagster.yaml").read_text())
        del settings["run_launcher"]
        (folder / "dagster.yaml").write_text(yaml.safe_dump(settings))
    return folder


def _graphql(url: str, query: str) -> dict:
    response = requests.post(f"{url}/graphql", json={"query": query}, timeout=30)
    response.raise_for_status()
    return response.json()["data"]


# a run in one of these states may still materialize something
UNSETTLED = {"QUEUED", "NOT_STARTED", "MANAGED", "STARTING", "STARTED", "CANCELING"}


def _runs_settled(url: str) -> bool:
    """Whether some run was made and none is waiting or running: only then is every asset's
    state worth asking for. The runs' states cost the webserver about 6 ms to give; every
    asset's state about 110 ms, which, asked every half second throughout, took about a fifth
    of a core from the runs being timed (measured once, on the 47 shared files)."""
    return settled([run["status"] for run in _graphql(url, RUNS)["runsOrError"]["results"]])


def settled(statuses: list[str]) -> bool:
    """Whether runs in these states (``DagsterRunStatus`` names) may have built everything:
    some run was made, and none is waiting or running."""
    return bool(statuses) and not UNSETTLED & set(statuses)


def _datasets_built(url: str, batches: int) -> bool:
    """Every batch materialized; every other asset materialized after the last batch; no
    check failed (checks not run yet count as not done)."""
    nodes = {"/".join(node["assetKey"]["path"]): node for node in _graphql(url, STATE)["assetNodes"]}
    batch_assets = [node for node in nodes.values() if node["partitionStats"]]
    if any(node["partitionStats"]["numMaterialized"] != batches or node["partitionStats"]["numFailed"]
           for node in batch_assets):
        return False
    last_batch = max(float(node["assetMaterializations"][0]["timestamp"]) for node in batch_assets)
    for node in nodes.values():
        if node in batch_assets:
            continue
        if not node["assetMaterializations"] or float(node["assetMaterializations"][0]["timestamp"]) < last_batch:
            return False
    statuses = [check["executionForLatestMaterialization"]
                for node in nodes.values() for check in node["assetChecksOrError"].get("checks", [])]
    return all(status is not None and status["status"] == "SUCCEEDED" for status in statuses)


def run_ui(corpus: Path, work: Path, variant: str = "ui") -> dict:
    home = _new_instance(work / f"{variant}_home", default_launcher=variant == "ui_default_launcher")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DAGSTER_HOME": str(home), "TRAJECTORY_SOURCE": str(corpus),
           "TRAJECTORY_STORAGE": str(work / variant)}
    log = open(work / f"{variant}_dagster_dev.log", "w")
    started = time.perf_counter()
    started_at = time.time()  # the runs' times are epoch seconds
    process = subprocess.Popen([str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    answered = None
    batches = len(list(corpus.rglob("*.jsonl*")))
    try:
        while time.perf_counter() - started < TIMEOUT_S:
            try:
                if answered is None and requests.get(f"{url}/server_info", timeout=2).ok:
                    answered = time.perf_counter() - started
                if answered is not None and _runs_settled(url) and _datasets_built(url, batches):
                    wall = time.perf_counter() - started
                    runs = _graphql(url, RUNS)["runsOrError"]["results"]
                    return {"wall_s": round(wall, 2), "server_answered_s": round(answered, 2),
                            "runs": _describe_runs(runs), "timeline": _timeline(runs, started_at),
                            "storage": str(work / variant)}
            except requests.RequestException:
                pass  # still starting
            time.sleep(0.5)
        raise SystemExit(f"the UI path did not finish in {TIMEOUT_S} s; see {log.name}")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def _describe_runs(runs: list[dict]) -> dict:
    """Per job: how many runs, and their durations (start to end)."""
    jobs: dict[str, dict] = {}
    for run in runs:
        job = jobs.setdefault(run["jobName"], {"runs": 0, "seconds": []})
        job["runs"] += 1
        if run["startTime"] and run["endTime"]:
            job["seconds"].append(round(run["endTime"] - run["startTime"], 1))
    return jobs


def _timeline(runs: list[dict], started_at: float) -> list[dict]:
    """Each run's creation (by the batch sensor or the automation tick), start (its worker
    process running) and end, in seconds from starting ``dagster dev``, in creation order:
    where the UI path waits that the CLI does not."""
    return [{"job": run["jobName"], **{name: round(run[key] - started_at, 1) if run[key] else None
                                      for name, key in (("created", "creationTime"), ("started", "startTime"),
                                                        ("ended", "endTime"))}}
            for run in sorted(runs, key=lambda run: run["creationTime"])]


def run_cli(corpus: Path, work: Path) -> dict:
    import dagster as dg

    home = _new_instance(work / "cli_home")
    started = time.perf_counter()
    result = subprocess.run([str(BIN / "trajectory-assets"), "run", "--source", str(corpus), "--storage",
                             str(work / "cli")], cwd=ROOT, env={**os.environ, "DAGSTER_HOME": str(home)},
                            capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"the CLI failed: {result.stderr}")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.get_run_records()
        runs = [{"jobName": r.dagster_run.job_name, "startTime": r.start_time, "endTime": r.end_time}
                for r in records]
    return {"wall_s": round(wall, 2), "runs": _describe_runs(runs), "storage": str(work / "cli")}


def _outputs(storage: Path) -> dict[str, bytes]:
    return {p.relative_to(storage).as_posix(): p.read_bytes()
            for folder in ("exports", "reports", "quarantine") for p in sorted((storage / folder).rglob("*"))
            if p.is_file()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compare-launcher", action="store_true",
                        help="also time the UI path with Dagster's default run launcher")
    args = parser.parse_args(argv)
    corpus = Path(args.corpus).resolve()
    if not corpus.is_dir():
        raise SystemExit(f"corpus {corpus} not found")
    order = ["cli", "ui", *(["ui_default_launcher"] if args.compare_launcher else [])]
    samples: dict[str, list[dict]] = {variant: [] for variant in order}
    identical = []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="bench-ui-") as folder:
            work = Path(folder)
            for variant in order:
                result = run_cli(corpus, work) if variant == "cli" else run_ui(corpus, work, variant)
                samples[variant].append(result)
                print(f"repeat {repeat + 1}: {variant} {result['wall_s']} s", flush=True)
            outputs = [_outputs(work / variant) for variant in order]
            identical.append(all(output == outputs[0] for output in outputs))
        order = order[1:] + order[:1]
    walls = {variant: statistics.median(s["wall_s"] for s in runs) for variant, runs in samples.items()}
    cli, ui = walls["cli"], walls["ui"]
    report = {
        "corpus": str(corpus), "files": len(list(corpus.rglob("*.jsonl*"))), "repeats": args.repeats,
        "cli_wall_s": cli, "ui_wall_s": ui, "ui_server_answered_s": statistics.median(
            s["server_answered_s"] for s in samples["ui"]),
        "ratio_ui_to_cli": round(ui / cli, 2), "target_met": ui <= 2 * cli,
        "outputs_identical": all(identical), "samples": samples,
    }
    if "ui_default_launcher" in walls:
        report["ui_default_launcher_wall_s"] = walls["ui_default_launcher"]
        report["ratio_ui_default_launcher_to_cli"] = round(walls["ui_default_launcher"] / cli, 2)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ui.json").write_text(json.dumps(report, indent=2) + "\n")
    table = [
        "| path | wall (median) | runs (job: count, seconds each) |",
        "|---|---|---|",
        f"| cli | {cli:.1f} s | {_runs_cell(samples['cli'][-1]['runs'])} |",
        f"| ui | {ui:.1f} s (webserver answered after {report['ui_server_answered_s']:.1f} s) | "
        f"{_runs_cell(samples['ui'][-1]['runs'])} |",
        *([f"| ui, Dagster's default launcher | {walls['ui_default_launcher']:.1f} s "
           f"(ui_default_launcher / cli = {report['ratio_ui_default_launcher_to_cli']}) | "
           f"{_runs_cell(samples['ui_default_launcher'][-1]['runs'])} |"] if "ui_default_launcher" in walls else []),
        "",
        f"ui / cli = {report['ratio_ui_to_cli']} (target <= 2: {'met' if report['target_met'] else 'NOT met'}); "
        f"exports and reports byte-identical: {report['outputs_identical']}",
        "",
        *(line for variant in samples if variant != "cli" for line in _timeline_table(variant, samples[variant][-1])),
    ]
    (OUT / "ui.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0 if report["target_met"] and report["outputs_identical"] else 1


def _timeline_table(variant: str, sample: dict) -> list[str]:
    return [
        f"The runs of {variant} in the last repeat, seconds from starting `dagster dev` (done at "
        f"{sample['wall_s']:.1f} s):",
        "",
        "| run | created | started | ended |",
        "|---|---|---|---|",
        *(f"| {run['job']} | {run['created']} | {run['started']} | {run['ended']} |" for run in sample["timeline"]),
        "",
    ]


def _runs_cell(runs: dict) -> str:
    return "; ".join(f"{job}: {info['runs']}, {info['seconds']}" for job, info in sorted(runs.items()))


if __name__ == "__main__":
    sys.exit(main())
