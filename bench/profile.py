"""Where a run's time goes: its phases, then the parts of each export family's step.

    python -m bench.profile --size 1000
    python -m bench.profile --source samples/rollouts      (the phases alone, of a tiny run)

1. Runs `trajectory-assets run` (every export) on the benchmark corpus of that size with a new
   instance, then reads each phase from the runs it recorded: the CLI's start (the code
   location imported), ingest (ranges of batches, in process or forked), the datasets run and
   each of its steps (the three export families, in process or two at a time, then the stats
   report).
2. Runs each family's step again, alone in this process, on that run's stored trajectories,
   with timers around its parts: reading and curating (the plan and the payload scan),
   rendering every format, the contract checks, writing the files, and the per-chunk memory
   release. Wall-clock timers, not a sampling profiler: they add no overhead worth counting
   and need nothing installed. ``--clock cpu`` times the family steps in CPU seconds of this
   process instead, which a loaded machine disturbs far less (the phases of step 1 are always
   wall time: they span worker processes). Each family step runs in a process forked from
   this one after it imported the code location, as a step is forked from the run's fork
   server, and also reports its working set: the peak RSS of that process during the step
   above its RSS before it (sampled every 20 ms), what a step holds beyond the pages it
   shares with the process it was forked from.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.corpus import build_corpus
from bench.run import CORPUS


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def _timed(spent: Counter, part: str, function: Callable, timer: Callable[[], float] | None = None) -> Callable:
    def timed(*args, **kwargs):
        now = timer or clock
        start = now()
        try:
            return function(*args, **kwargs)
        finally:
            spent[part] += now() - start

    return timed


def profile_phases(source: Path, storage: Path) -> Counter:
    import shutil
    import tempfile

    import dagster as dg

    from trajectory_assets.cli import main
    from trajectory_assets.dagster_internals import step_durations

    spent: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="profile-home-") as home:
        shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home)
        previous = os.environ.get("DAGSTER_HOME")
        os.environ["DAGSTER_HOME"] = home
        start = time.time()
        try:
            # as the console script runs it: this process has run nothing yet, so the CLI forks
            # its fork server from it (runs/processes.py)
            if main(["run", "--source", str(source), "--storage", str(storage)], single_call_process=True) != 0:
                raise SystemExit("the run failed")
        finally:
            os.environ.pop("DAGSTER_HOME") if previous is None else os.environ.update(DAGSTER_HOME=previous)
        spent["whole run"] = time.time() - start
        with dg.DagsterInstance.from_config(home) as instance:
            records = instance.get_run_records()
            # an ad hoc call's jobs: ingest_<its namespace>, build_<its namespace> (docs/datasets.md)
            ingest = [r for r in records if r.dagster_run.job_name.startswith("ingest_")]
            (datasets,) = [r for r in records if r.dagster_run.job_name.startswith("build_")]
            first_created = min(r.create_timestamp.timestamp() for r in records)
            spent["CLI start (until the first run)"] = first_created - start
            spent[f"ingest ({len(ingest)} runs at once, run start-up included)"] = (
                max(r.end_time for r in ingest) - first_created)
            spent["datasets run start-up"] = datasets.start_time - datasets.create_timestamp.timestamp()
            for step, seconds in step_durations(instance, datasets.dagster_run.run_id).items():
                spent[f"  step {step}"] = seconds
            spent["datasets run (steps overlap)"] = datasets.end_time - datasets.start_time
    return spent


ROOT = Path(__file__).resolve().parent.parent


def _rss() -> int:
    """This process's resident set, bytes."""
    with open("/proc/self/status", "rb") as handle:
        for line in handle:
            if line.startswith(b"VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def profile_family(family: str, storage: Path) -> tuple[Counter, int]:
    """One family's step, in this process, with its parts timed (what is left is reading the
    payloads, curating and planning, and the manifests), and its working set in bytes."""
    from trajectory_assets.config import PipelineConfig
    from schemas.validation import ChunkedContract
    from trajectory_assets.exports import shard_phase
    from trajectory_assets.exports.families import dpo, grpo, sft
    from trajectory_assets.exports.registry import family_exports
    from trajectory_assets.io.batch_summary import read_summary
    from trajectory_assets.io import export_files
    from trajectory_assets.io.storage import Storage
    from trajectory_assets.io.trajectory_table import StoredTrajectories

    spent: Counter = Counter()
    families = (sft, dpo, grpo)
    # methods patched on their classes, not subclassed: a shard's tally is pickled with its contract
    patched = [(ChunkedContract, "check"), (ChunkedContract, "result"), (export_files._SplitFile, "write"),
               (shard_phase, "release_memory"), *((module, "render_all") for module in families)]
    originals = [(owner, name, getattr(owner, name)) for owner, name in patched]
    ChunkedContract.check = _timed(spent, "contract checks", ChunkedContract.check)
    ChunkedContract.result = _timed(spent, "contract checks", ChunkedContract.result)  # checks the rows held back
    export_files._SplitFile.write = _timed(spent, "writing files", export_files._SplitFile.write)
    for module in families:
        module.render_all = _timed(spent, "rendering every format", module.render_all)
    shard_phase.release_memory = _timed(spent, "memory release", shard_phase.release_memory)

    exports = family_exports(family)
    before = peak = _rss()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, _rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = clock()
    try:
        store = Storage(str(storage))
        batches = sorted(path.name[: -len(".parquet")]
                         for path in (storage / "trajectories" / "batches").glob("*.parquet"))
        list(shard_phase.write_exports(store, StoredTrajectories(store, batches), dict.fromkeys(batches, ""),
                                       PipelineConfig(), exports, {export.name: "profile" for export in exports}, {}))
    finally:
        done.set()
        sampler.join()
        for owner, name, original in originals:
            setattr(owner, name, original)
    spent["whole step"] = clock() - start
    inner = sum(seconds for part, seconds in spent.items() if part != "whole step")
    spent["reading, curating, the rest"] = spent["whole step"] - inner
    return spent, peak - before


def print_phases(what: str, phases: Counter) -> None:
    print(f"\n{what}, `trajectory-assets run`, seconds (from the runs it recorded):")
    for part, seconds in phases.items():
        print(f"  {part:36s} {seconds:6.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1000, help="corpus size in MB")
    parser.add_argument("--work", default="/tmp/trajectory-assets-bench", help="scratch folder for corpora and outputs")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="how the family steps are timed")
    parser.add_argument("--source", help="only the phases of a run of these files instead (the bundled sample, "
                                         "samples/rollouts: what a run costs however few its records)")
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    if args.source:
        storage = Path(args.work) / "profile_source"
        shutil.rmtree(storage, ignore_errors=True)
        print_phases(args.source, profile_phases(Path(args.source).resolve(), storage))
        return
    if not CORPUS.is_dir():
        raise SystemExit(f"the benchmark replicates real rollouts from {CORPUS}, which is absent")
    work = Path(args.work)
    # a storage of its own per size, emptied first: the family steps read every batch in it
    source, storage = work / f"corpus_{args.size}mb", work / f"profile_{args.size}mb"
    shutil.rmtree(storage, ignore_errors=True)
    build_corpus(args.size << 20, source, CORPUS)
    print_phases(f"{args.size} MB corpus", profile_phases(source, storage))
    # imported once, shared with each forked step, as the run's fork server does (what it preloads)
    import trajectory_assets.runs.step_preload  # noqa: F401
    from trajectory_assets.exports.registry import EXPORT_FAMILIES

    for family in EXPORT_FAMILIES:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as fresh:
            spent, working_set = fresh.submit(profile_family, family, storage).result()
        whole = spent.pop("whole step")
        print(f"{family} family step alone: {whole:.1f} s ({args.clock}), working set {working_set / 2**20:.0f} MiB")
        for part, seconds in spent.most_common():
            print(f"  {part:36s} {seconds:6.1f}  {seconds / whole:4.0%}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
