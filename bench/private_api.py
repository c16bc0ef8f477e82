"""What two of Dagster's private names used for speed save on a CLI call, with and without
each, alternated in one session on the same commit.

    python -m bench.private_api [--source samples/rollouts] [--repeats 4]

Each variant is a `trajectory-assets run --source SOURCE` on a new instance and a new storage
folder, as the console script runs it, timed from process start to exit:

**project**: the project's dagster.yaml and CLI.
**dagster_sqlite**: dagster.yaml without its ``instance_class``: Dagster's own SQLite storage
instead of ``PooledSqliteInstance`` (runs/pooled_sqlite.py), same files.
**new_process**: each run the CLI records is executed by a new ``dagster api execute_run``
process, the command a code server's default launcher spawns for a run, instead of in the
CLI's process (``dagster_internals.execute_recorded_run``) or one forked from it. The code
server's own start is not counted, so the difference is a lower bound of what in-process
execution saves over launching through a code server.

The variants alternate, the order rotating each repeat, so that drift on a shared machine hits
all of them. Prints each variant's median and range (seconds) and its ratio to **project**.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("project", "dagster_sqlite", "new_process")


def execute_in_a_new_process(reconstructable_job, run, instance):
    """In place of ``dagster_internals.execute_recorded_run``: the run executed by ``dagster api
    execute_run`` in a new process, which loads the job from the run's Python origin (its
    events are in the instance; the CLI reads the run's status from there)."""
    import dagster as dg

    from trajectory_assets import dagster_internals as internals

    args = {"__class__": "ExecuteRunArgs", "pipeline_origin": json.loads(dg.serialize_value(run.job_code_origin)),
            "pipeline_run_id": run.run_id,
            "instance_ref": json.loads(dg.serialize_value(internals.instance_ref(instance))),
            "set_exit_code_on_failure": None}
    subprocess.run([str(Path(sys.executable).parent / "dagster"), "api", "execute_run", json.dumps(args)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield from ()


def call(variant: str, source: str, storage: str) -> None:
    """(In the timed process.) The CLI's console script, in the variant's way."""
    if variant == "new_process":
        from trajectory_assets import dagster_internals

        dagster_internals.execute_recorded_run = execute_in_a_new_process
    from trajectory_assets.cli import entry

    sys.argv = ["trajectory-assets", "run", "--source", source, "--storage", storage]
    entry()


def timed_call(variant: str, source: Path, work: Path) -> float:
    home, storage = work / f"{variant}-home", work / f"{variant}-storage"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(storage, ignore_errors=True)
    home.mkdir()
    config = yaml.safe_load((ROOT / "dagster_home" / "dagster.yaml").read_text())
    if variant == "dagster_sqlite":
        del config["instance_class"]
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench.private_api", "--call", variant, "--source", str(source),
                           "--storage", str(storage)], cwd=ROOT, env={**_env(), "DAGSTER_HOME": str(home)},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def _env() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=str(ROOT / "samples" / "rollouts"))
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--call", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--storage", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.call:
        return call(args.call, args.source, args.storage)
    variants = args.variants.split(",")
    seconds: dict[str, list[float]] = {variant: [] for variant in variants}
    with tempfile.TemporaryDirectory(prefix="bench-private-api-") as work:
        for repeat in range(args.repeats):
            order = variants[repeat % len(variants):] + variants[:repeat % len(variants)]
            for variant in order:
                seconds[variant].append(timed_call(variant, Path(args.source).resolve(), Path(work)))
                print(f"repeat {repeat + 1} {variant}: {seconds[variant][-1]:.2f} s", flush=True)
    base = statistics.median(seconds[variants[0]])
    print(f"\n| variant | median (s) | range (s) | median / {variants[0]}'s |\n|---|---|---|---|")
    for variant, values in seconds.items():
        median = statistics.median(values)
        print(f"| {variant} | {median:.2f} | {min(values):.2f}–{max(values):.2f} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
