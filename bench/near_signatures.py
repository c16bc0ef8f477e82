"""What signing conversations at ingest (``dedup: near``) costs ingest and saves the export plan,
measured in one process and one run.

    python -m bench.near_signatures --size 250 --repeats 2

Builds a corpus of ``--size`` MB (bench/corpus.py, as ``bench.run`` does), then, one batch
after the other (``ingest/batch.py``'s ``ingest_batch``, as each ingest step does):

- **ingest** without signatures, then **with them** (``NearSignatures``, signing each stored
  row as it is written and storing the signatures beside the batch), alternated batch by
  batch; the CPU spent inside the recorder is timed too;
- **the plan** of each family (``FAMILIES[family].plan``, as the export phase's plan step
  runs it) with ``dedup: near`` in every family, each round in a fresh process: at
  ``--against`` (every kept conversation read and signed), in this tree with no signatures
  stored (a batch ingested before: the same, with the faster signing) and with them beside
  every batch, rotated ``--repeats`` times. All must leave out the same trajectories; the
  script stops if they do not.

CPU is ``time.process_time`` of the process that does the work (one core). Writes bench/out/near_signatures.json
and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
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


# one plan of each family with dedup: near, in a process of its own (as the plan step is one),
# over the storage and batches in argv: {family: [CPU seconds, near duplicates left out]}
PLANS = """
import json, sys, time
from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.families import FAMILIES
from trajectory_assets.io.storage import Storage
from trajectory_assets.io.trajectory_table import StoredTrajectories
families = ("sft", "dpo", "grpo")
config = PipelineConfig.model_validate({family: {"dedup": "near"} for family in families})
table = StoredTrajectories(Storage(sys.argv[1]), json.loads(sys.argv[2]))
measured = {}
for family in families:
    began = time.process_time()
    plan = FAMILIES[family].plan(table, getattr(config, family), None, None)
    measured[family] = [time.process_time() - began, plan.excluded.get("near_duplicate", 0)]
print(json.dumps(measured))
"""


def plan_cpu(checkout: Path, storage: Path) -> tuple[dict[str, float], dict[str, int]]:
    """Each family's plan over ``storage`` with dedup: near, run by the code of ``checkout`` in
    a fresh process: CPU seconds (its imports of datasketch and numba included, as a plan step
    pays them), and the near duplicates it left out."""
    keys = sorted(path.name.removesuffix(".summary.json")
                  for path in (storage / "trajectories" / "batches").glob("*.summary.json"))
    done = subprocess.run([sys.executable, "-c", PLANS, str(storage), json.dumps(keys)], cwd=checkout,
                          env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True, text=True, check=True)
    measured = json.loads(done.stdout)
    return {family: value[0] for family, value in measured.items()}, {family: value[1] for family, value in measured.items()}


SIDES = ("base", "unsigned", "signed")  # the base revision; this tree without the side files; with them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=250, help="corpus size in MB")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the three plans, rotated")
    parser.add_argument("--against", default="e9ded74", help="the revision whose plan is the base")
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
        base = work / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.against], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
        excluded: dict[str, dict[str, int]] = {}
        try:
            for repeat in range(args.repeats):
                for side in SIDES[repeat % 3:] + SIDES[:repeat % 3]:
                    for path in side_files:  # the side files are beside the batches only for "signed"
                        away = hidden / path.name
                        if side != "signed" and path.exists():
                            path.rename(away)
                        elif side == "signed" and away.exists():
                            away.rename(path)
                    seconds, near = plan_cpu(base if side == "base" else ROOT, work / "signed")
                    samples[side].append(seconds)
                    excluded.setdefault(side, near)
                    if any(found != near for found in excluded.values()):
                        raise SystemExit(f"the plans left out different near duplicates: {excluded}, {side}: {near}")
                    print(f"  plan {side:8s} repeat {repeat + 1}: "
                          + ", ".join(f"{family} {value:.2f} s" for family, value in seconds.items()), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=True)
    best = {side: {family: min(sample[family] for sample in runs) for family in FAMILIES}
            for side, runs in samples.items()}
    result = {"size_mb": args.size, "against": args.against, "rows": ingest["rows"], "ingest_cpu_s": ingest,
              "side_files_bytes": side_bytes, "plan_cpu_s": best, "near_duplicates": excluded["signed"],
              "repeats": args.repeats}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "near_signatures.json").write_text(json.dumps(result, indent=2))
    print(f"\n{args.size} MB, {ingest['rows']} trajectories; signatures stored: {side_bytes / 2**20:.1f} MiB; "
          f"CPU s, the best of {args.repeats}\n")
    print(f"| step | {args.against} | this tree, no signatures stored | signatures stored | stored / {args.against} |")
    print("|---|---|---|---|---|")
    for family in FAMILIES:
        row = [best[side][family] for side in SIDES]
        print(f"| {family} plan | {row[0]:.2f} | {row[1]:.2f} | {row[2]:.2f} | {row[2] / row[0]:.2f} |")
    row = [sum(best[side].values()) for side in SIDES]
    print(f"| three plans | {row[0]:.2f} | {row[1]:.2f} | {row[2]:.2f} | {row[2] / row[0]:.2f} |")
    print(f"| ingest | {ingest['plain']:.2f} (no signatures) | | {ingest['signed']:.2f} "
          f"({ingest['recorder']:.2f} in the recorder) | {ingest['signed'] / ingest['plain']:.2f} (of ingest alone) |")
    print(f"\nnear duplicates left out, per family: {excluded['signed']} (the same in all three)")


if __name__ == "__main__":
    main()
