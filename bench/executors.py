"""Where "small" ends: a CLI call in one process against one that forks, by input size.

    python -m bench.executors [--sizes 0.25,1,4,16,64] [--files 8] [--repeats 3]

For each size it builds a corpus of that many MB in ``--files`` files (bench/corpus.py, the
same real-shaped rows as bench.run), then times ``trajectory-assets run`` on it with
``--execution in-process`` and with ``--execution forked``, alternating (the order rotates
each repeat), each with a new instance. From each run's instance it also reads how long the
ingest runs and the datasets run took, and it measures the stored trajectories (what the
datasets run's ``auto`` executor weighs). Reports the medians, which variant won, and the
thresholds they point to: the smallest size at which forking won the whole call (what
``run_plan.ingest_runs``'s cost estimate is fitted to) and the smallest trajectory size at
which forked steps won the datasets run (``executors.DATASETS_IN_PROCESS_MAX_BYTES``). JSON
and Markdown go to bench/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.corpus import build_corpus

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "nemo_gym"
OUT = ROOT / "bench" / "out"
BIN = Path(sys.executable).parent
MODES = ("in-process", "forked")


def _run(source: Path, work: Path, mode: str) -> dict:
    home = work / f"home-{mode}"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(work / "out", ignore_errors=True)
    home.mkdir()
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    started = time.perf_counter()
    subprocess.run([str(BIN / "trajectory-assets"), "run", "--source", str(source), "--storage", str(work / "out"),
                    "--execution", mode], env={**os.environ, "DAGSTER_HOME": str(home)}, check=True,
                   capture_output=True)
    wall = time.perf_counter() - started
    phases = _phases(home)
    trajectories = sum(path.stat().st_size for path in (work / "out" / "trajectories" / "batches").glob("*.parquet"))
    return {"wall_s": wall, **phases, "trajectory_bytes": trajectories}


def _phases(home: Path) -> dict:
    """Seconds from the first ingest run's start to the last one's end, and the datasets run's."""
    code = ("import json, dagster as dg\n"
            "with dg.DagsterInstance.get() as i:\n"
            "    print(json.dumps([(r.dagster_run.job_name, r.start_time, r.end_time) for r in i.get_run_records()]))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "DAGSTER_HOME": str(home)},
                         check=True, capture_output=True, text=True).stdout
    runs = json.loads(out)
    # an ad hoc call's jobs: ingest_<its namespace>, build_<its namespace> (docs/datasets.md)
    ingest = [(start, end) for job, start, end in runs if job.startswith("ingest_")]
    datasets = [end - start for job, start, end in runs if job.startswith("build_")]
    return {"ingest_s": max(end for _, end in ingest) - min(start for start, _ in ingest), "datasets_s": datasets[0]}


def measure(sizes_mb: list[float], files: int, repeats: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-executors-") as folder:
        work = Path(folder)
        for size in sizes_mb:
            source = work / "corpus"
            shutil.rmtree(source, ignore_errors=True)
            target = int(size * 1e6)
            corpus = build_corpus(target, source, CORPUS, file_bytes=max(1, target // files))
            samples: dict[str, list[dict]] = {mode: [] for mode in MODES}
            order = list(MODES)
            for _ in range(repeats):
                for mode in order:
                    samples[mode].append(_run(source, work, mode))
                order.reverse()
            row = {"size_mb": size, "files": corpus["files"], "bytes": corpus["bytes"], "rows": corpus["rows"],
                   "trajectory_bytes": samples["forked"][0]["trajectory_bytes"]}
            for mode in MODES:
                for measure_name in ("wall_s", "ingest_s", "datasets_s"):
                    row[f"{mode}_{measure_name}"] = round(statistics.median(s[measure_name] for s in samples[mode]), 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def thresholds(rows: list[dict]) -> dict:
    """The smallest input (bytes) at which forking won the whole call, and the smallest
    stored trajectories (bytes) at which forked steps won the datasets run (None: never)."""
    call = next((row["bytes"] for row in rows if row["forked_wall_s"] < row["in-process_wall_s"]), None)
    steps = next((row["trajectory_bytes"] for row in rows
                  if row["forked_datasets_s"] < row["in-process_datasets_s"]), None)
    return {"call_forks_from_bytes": call, "datasets_forks_from_trajectory_bytes": steps}


def markdown(rows: list[dict], found: dict) -> str:
    lines = ["| input | files | trajectories | in-process: wall (ingest, datasets) | forked: wall (ingest, datasets) "
             "| faster |", "|---|---|---|---|---|---|"]
    for row in rows:
        faster = "forked" if row["forked_wall_s"] < row["in-process_wall_s"] else "in-process"
        lines.append(
            f"| {row['bytes'] / 1e6:.2f} MB | {row['files']} | {row['trajectory_bytes'] / 1e6:.2f} MB "
            f"| {row['in-process_wall_s']:.2f} s ({row['in-process_ingest_s']:.2f}, {row['in-process_datasets_s']:.2f}) "
            f"| {row['forked_wall_s']:.2f} s ({row['forked_ingest_s']:.2f}, {row['forked_datasets_s']:.2f}) | {faster} |")
    lines += ["", f"forking wins the call from {found['call_forks_from_bytes']} input bytes; forked steps win the "
              f"datasets run from {found['datasets_forks_from_trajectory_bytes']} trajectory bytes"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0.25,1,4,16,64", help="corpus sizes in MB")
    parser.add_argument("--files", type=int, default=8, help="files (batches) per corpus")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rows = measure([float(size) for size in args.sizes.split(",")], args.files, args.repeats)
    found = thresholds(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "executors.json").write_text(json.dumps({"rows": rows, "thresholds": found}, indent=2) + "\n")
    table = markdown(rows, found)
    (OUT / "executors.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
