"""What signing conversations at ingest (``dedup: near``) costs ingest and saves the export plan,
measured in one process and one run.

    python -m bench.near_signatures --size 250 --repeats 2

Builds a corpus of ``--size`` MB (bench/corpus.py, as ``bench.run`` does), then, one batch
after the other (``ingest/batch.py``'s ``ingest_batch``, as each ingest step does):

- **ingest** without signatures, then **with them** (``NearSignatures``, signing each stored
  row as it is written and storing the signatures beside the batch), alternated batch by
  batch; the CPU spent inside the recorder is timed too;
- **the plan** of each family (``FAMILIES[family].plan``, as the export phase's plan step
  runs it) with ``dedup: near`` in every family, with the signatures beside every batch
  ("after") and with none ("before": every kept conversation read and signed, what the plan
  did before signatures were stored), alternated ``--repeats`` times. Both must leave out the
  same trajectories; the script stops if they do not.

CPU is ``time.process_time`` in this process (one core). Writes bench/out/near_signatures.json
and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from bench.corpus import build_corpus

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "nemo_gym"
OUT = ROOT / "bench" / "out"
cpu = time.process_time
FAMILIES = ("sft", "dpo", "grpo")


class TimedSignatures:
    """``NearSignatures``, timed: the CPU seconds spent in it."""

    def __init__(self) -> None:
        from trajectory_assets.ingest.near_signatures import NearSignatures

        self.recorder = NearSignatures()
        self.seconds = 0.0

    def add(self, rows) -> None:
        began = cpu()
        self.recorder.add(rows)
        self.seconds += cpu() - began

    def save(self, store, key) -> None:
        began = cpu()
        self.recorder.save(store, key)
        self.seconds += cpu() - began


def ingest_both(source: Path, plain: Path, signed: Path) -> dict:
    """Every file of ``source`` ingested into ``plain`` without signatures and into ``signed``
    with them, batch by batch alternating which goes first: CPU seconds of each, of the recorder, rows."""
    from trajectory_assets import layout
    from trajectory_assets.config import PipelineConfig
    from trajectory_assets.ingest.batch import ingest_batch, write_source_record
    from trajectory_assets.io.source_files import SourceFile, batch_key
    from trajectory_assets.io.storage import Storage

    config = PipelineConfig()
    stores = {"plain": Storage(str(plain)), "signed": Storage(str(signed))}
    seconds = {"plain": 0.0, "signed": 0.0, "recorder": 0.0}
    rows = 0
    for number, path in enumerate(sorted(source.glob("*.jsonl"))):
        key = batch_key(path.name)
        for store in stores.values():
            write_source_record(key, store, SourceFile(str(path), path.name))
        for side in (("plain", "signed") if number % 2 == 0 else ("signed", "plain")):
            recorder = TimedSignatures() if side == "signed" else None
            began = cpu()
            ingest_batch(key, stores[side], config, signatures=recorder)
            seconds[side] += cpu() - began
            if recorder is not None:
                seconds["recorder"] += recorder.seconds
        rows += stores["plain"].read_json(layout.batch_summary(key))["records_valid"]
    return {**seconds, "rows": rows}


def plan_cpu(storage: Path) -> tuple[dict[str, float], dict[str, int]]:
    """Each family's plan over ``storage`` with dedup: near: CPU seconds, and the near duplicates it left out."""
    from trajectory_assets.config import PipelineConfig
    from trajectory_assets.exports.families import FAMILIES as PLANNERS
    from trajectory_assets.io.storage import Storage
    from trajectory_assets.io.trajectory_table import StoredTrajectories

    config = PipelineConfig.model_validate({family: {"dedup": "near"} for family in FAMILIES})
    store = Storage(str(storage))
    keys = sorted(path.name.removesuffix(".summary.json")
                  for path in (storage / "trajectories" / "batches").glob("*.summary.json"))
    table = StoredTrajectories(store, keys)
    seconds, near = {}, {}
    for family in FAMILIES:
        began = cpu()
        plan = PLANNERS[family].plan(table, getattr(config, family), None, None)
        seconds[family] = cpu() - began
        near[family] = plan.excluded.get("near_duplicate", 0)
    return seconds, near


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=250, help="corpus size in MB")
    parser.add_argument("--repeats", type=int, default=2, help="plan rounds, each with and without signatures")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-near-") as work:
        work = Path(work)
        source = work / "corpus"
        build_corpus(args.size << 20, source, CORPUS)
        ingest = ingest_both(source, work / "plain", work / "signed")
        print(f"ingest: {ingest['plain']:.2f} s CPU without signatures, {ingest['signed']:.2f} s with "
              f"({ingest['recorder']:.2f} s in the recorder), {ingest['rows']} rows", flush=True)
        side_files = sorted((work / "signed" / "trajectories" / "batches").glob("*.minhash.parquet"))
        side_bytes = sum(path.stat().st_size for path in side_files)
        hidden = work / "hidden"
        hidden.mkdir()
        samples: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        excluded = {}
        for repeat in range(args.repeats):
            for side in (("before", "after") if repeat % 2 == 0 else ("after", "before")):
                for path in side_files:  # "before": no signatures beside any batch
                    stored, away = path, hidden / path.name
                    if side == "before" and stored.exists():
                        stored.rename(away)
                    elif side == "after" and away.exists():
                        away.rename(stored)
                seconds, near = plan_cpu(work / "signed")
                samples[side].append(seconds)
                if excluded.setdefault(side, near) != near or excluded.get("before", near) != near:
                    raise SystemExit(f"the plans left out different near duplicates: {excluded} and {side} {near}")
                print(f"  plan {side:6s} repeat {repeat + 1}: " + ", ".join(f"{f} {s:.2f} s" for f, s in seconds.items()),
                      flush=True)
        shutil.rmtree(hidden)
    best = {side: {family: min(sample[family] for sample in runs) for family in FAMILIES}
            for side, runs in samples.items()}
    result = {"size_mb": args.size, "rows": ingest["rows"], "ingest_cpu_s": ingest, "side_files_bytes": side_bytes,
              "plan_cpu_s": best, "near_duplicates": excluded["after"], "repeats": args.repeats}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "near_signatures.json").write_text(json.dumps(result, indent=2))
    print(f"\n{args.size} MB, {ingest['rows']} trajectories; signatures stored: {side_bytes / 2**20:.1f} MiB\n")
    print("| step | before (signed from messages) | after (signatures stored) | after / before |")
    print("|---|---|---|---|")
    for family in FAMILIES:
        before, after = best["before"][family], best["after"][family]
        print(f"| {family} plan, CPU s | {before:.2f} | {after:.2f} | {after / before:.2f} |")
    total_before, total_after = sum(best["before"].values()), sum(best["after"].values())
    print(f"| three plans, CPU s | {total_before:.2f} | {total_after:.2f} | {total_after / total_before:.2f} |")
    print(f"| ingest, CPU s | {ingest['plain']:.2f} | {ingest['signed']:.2f} | {ingest['signed'] / ingest['plain']:.2f} |")
    print(f"\nnear duplicates left out, per family: {excluded['after']} (the same either way)")


if __name__ == "__main__":
    main()
