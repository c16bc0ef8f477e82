"""Redaction's share of ingest time, measured two ways in one session.

    python -m bench.redaction --size 250 --repeats 3

Builds the benchmark corpus of that size (bench/corpus.py: the real NeMo Gym rollouts of
../shared/corpus, replicated), then, with redaction on and off, A/B interleaved `--repeats`
times (the order alternating, so drift on this shared machine hits both alike):

1. the pure `ingest` in this process, as the `validated_trajectories` asset calls it (read,
   id, redact, convert, contract check; rows and quarantine written to Parquet / JSON lines
   in a scratch folder), summing the time spent inside `Redactor.redact`, in CPU seconds of
   this process. The strict measure: its denominator is the conversion work alone.
   - share: time inside `redact` / ingest with redaction (the issue's target: <= 10%);
   - share (A/B): (ingest with - ingest without) / ingest with;
2. the ingest phase of a real `trajectory-assets run --exports sft` (every batch, the CLI's
   parallel workers, Dagster included; bench/profile.py's phase timer), each run in a fresh
   process with `redaction.enabled` true / false: share (A/B) of what a run spends.

Each line is also scanned by the redactor alone, to report its throughput and how many
lines the prefilter let through to a rule.
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

import orjson
import pyarrow.parquet as pq

from bench.corpus import build_corpus
from bench.run import CORPUS, OUT
from trajectory_assets.formats.redaction import Redactor
from trajectory_assets.ingest import TRAJECTORY_ARROW_SCHEMA, ingest
from trajectory_assets.io.sources import SourceFile


# CPU time of this process: the in-process measure is about work, and the machine is shared
clock = time.process_time


class TimedRedactor(Redactor):
    seconds = 0.0

    def redact(self, data):
        start = clock()
        try:
            return super().redact(data)
        finally:
            self.seconds += clock() - start


def ingest_all(files: list[Path], scratch: Path, redactor: Redactor | None) -> float:
    start = clock()
    for path in files:
        source = SourceFile(str(path), path.name)
        with pq.ParquetWriter(scratch / "rows.parquet", TRAJECTORY_ARROW_SCHEMA) as parquet, \
                open(scratch / "quarantine.jsonl", "wb") as quarantine:
            ingest([source], parquet.write_table,
                   lambda rows: quarantine.write(b"".join(orjson.dumps(row) + b"\n" for row in rows)),
                   redactor=redactor)
    return clock() - start


def run_phase(source: Path, work: Path, redaction: bool) -> float:
    """Seconds of a fresh `trajectory-assets run`'s ingest phase, redaction on or off."""
    storage, config = work / "run", work / f"redaction-{redaction}.yaml"
    shutil.rmtree(storage, ignore_errors=True)
    config.write_text(f"redaction:\n  enabled: {str(redaction).lower()}\n")
    out = subprocess.run([sys.executable, "-m", "bench.redaction", "--phase", str(source), str(storage), str(config)],
                         check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])["ingest (every batch)"]


def scan(files: list[Path]) -> dict:
    redactor = Redactor()
    lines = candidates = found = 0
    size = 0
    start = clock()
    for path in files:
        with open(path, "rb") as handle:
            for line in handle:
                lines += 1
                size += len(line)
                found += bool(redactor.findings(line))
    seconds = clock() - start
    for path in files:  # apart from the timing: how many lines had a literal for a rule
        with open(path, "rb") as handle:
            candidates += sum(bool(redactor.candidates(line)) for line in handle)
    return {"lines": lines, "lines_with_a_literal": candidates, "lines_redacted": found,
            "redactor_alone_mb_per_s": round(size / 1e6 / seconds, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=250, help="corpus size in MB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default="/tmp/trajectory-assets-bench", help="scratch folder for the corpus")
    parser.add_argument("--in-process-only", action="store_true", help="skip the runs (2.), for a quick look")
    parser.add_argument("--phase", nargs=3, metavar=("SOURCE", "STORAGE", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:  # one run, in this fresh process: print its phases as JSON
        from bench.profile import profile_phases

        source, storage, config = args.phase
        phases = profile_phases(Path(source), Path(storage), "--config", config, "--exports", "sft")
        print(json.dumps(phases))
        return
    if not CORPUS.is_dir():
        raise SystemExit(f"the benchmark replicates real rollouts from {CORPUS}, which is absent")
    source = Path(args.work) / f"corpus_{args.size}mb"
    shape = build_corpus(args.size << 20, source, CORPUS)
    files = sorted(source.glob("*.jsonl"))
    with_redaction, without, inside, phase_on, phase_off = [], [], [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for on in ((True, False) if repeat % 2 == 0 else (False, True)):  # A/B, order alternating
                redactor = TimedRedactor() if on else None
                seconds = ingest_all(files, Path(scratch), redactor)
                (with_redaction if on else without).append(seconds)
                if on:
                    inside.append(redactor.seconds)
                phase = float("nan") if args.in_process_only else run_phase(source, Path(scratch), on)
                (phase_on if on else phase_off).append(phase)
                print(f"  repeat {repeat + 1}  redaction {'on ' if on else 'off'}  ingest {seconds:6.2f} s"
                      + (f"  inside redact {redactor.seconds:5.2f} s" if on else "")
                      + f"  run's ingest phase {phase:6.2f} s", flush=True)
    on_s, off_s, redact_s, run_on, run_off = (statistics.median(values) for values in (
        with_redaction, without, inside, phase_on, phase_off))
    result = {
        "corpus": shape, "repeats": args.repeats, "detector": Redactor().detector,
        "ingest_with_redaction_s": round(on_s, 2), "ingest_without_s": round(off_s, 2),
        "inside_redact_s": round(redact_s, 2), "share": round(redact_s / on_s, 4),
        "share_ab": round((on_s - off_s) / on_s, 4),
        "run_ingest_phase_with_s": round(run_on, 2), "run_ingest_phase_without_s": round(run_off, 2),
        "run_share_ab": round((run_on - run_off) / run_on, 4), **scan(files),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "redaction.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (OUT / "redaction.md").write_text(table)
    print(table)


def markdown(r: dict) -> str:
    corpus = r["corpus"]
    size = f"{corpus['bytes'] / 1e6:.0f} MB, {corpus['rows']} rows, {corpus['files']} files"
    return "\n".join([
        "| corpus | measured | redaction on | off | inside `redact` | share | share (A/B) |",
        "|---|---|---|---|---|---|---|",
        f"| {size} | `ingest()` in one process | {r['ingest_with_redaction_s']:.2f} s | {r['ingest_without_s']:.2f} s "
        f"| {r['inside_redact_s']:.2f} s | {r['share']:.1%} | {r['share_ab']:.1%} |",
        f"| {size} | ingest phase of `trajectory-assets run` | {r['run_ingest_phase_with_s']:.2f} s "
        f"| {r['run_ingest_phase_without_s']:.2f} s | | | {r['run_share_ab']:.1%} |",
        "",
        f"The redactor alone: {r['redactor_alone_mb_per_s']} MB/s.",
        "",
        f"{r['lines']} lines: {r['lines_with_a_literal']} had a literal of some rule, "
        f"{r['lines_redacted']} held a secret; {r['detector']}.",
    ]) + "\n"


if __name__ == "__main__":
    main()
