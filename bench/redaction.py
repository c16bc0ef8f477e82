"""Redaction's share of ingest time.

    python -m bench.redaction --size 250 --repeats 4      (make bench runs it too)

Builds the benchmark corpus of that size (bench/corpus.py: the real NeMo Gym rollouts of
../shared/corpus, replicated), then measures, `--repeats` times (an even number balances the
A/B order), in this process and in CPU seconds (the machine is shared: CPU time is what the
work costs, whatever else runs):

1. **run**: the ingest phase of a real `trajectory-assets run --workers 1 --exports sft`:
   every batch's ingest job through Dagster (the `validated_trajectories` asset and its
   checks), the time spent inside `Redactor.redact` summed. Share = inside / phase. This is
   what the issue's target (<= 10%) is about: redaction's share of a run's ingest time.
2. **ingest()**: the pure conversion alone, as the asset calls it (read, id, redact, convert,
   contract check; rows and quarantine written to a scratch folder), with redaction on and
   off A/B (order alternating each repeat). Share = inside / ingest with redaction, and the
   A/B difference / ingest with redaction: the strict bound, without Dagster's share.

Each line is also scanned by the redactor alone, with each prefilter this machine has
(Hyperscan, Aho-Corasick), for its throughput and how many lines the prefilter passed to a
rule. Writes bench/out/redaction.{json,md} (with `--aho-corasick`, the runs use the fallback
prefilter and write bench/out/redaction-aho-corasick.{json,md}).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from unittest.mock import patch

import orjson
import pyarrow.parquet as pq

from bench.corpus import build_corpus
from bench.run import CORPUS, OUT
from trajectory_assets.redaction import redactor as redaction
from trajectory_assets.redaction.redactor import Redactor
from trajectory_assets.ingest.conversion import ingest
from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
from trajectory_assets.io.source_files import SourceFile

clock = time.process_time


class TimedRedactor(Redactor):
    total = 0.0  # CPU seconds inside `redact`, over every instance (the run makes one per batch)

    def redact(self, data):
        start = clock()
        try:
            return super().redact(data)
        finally:
            TimedRedactor.total += clock() - start


def run_ingest_phase(source: Path, storage: Path) -> tuple[float, float]:
    """(CPU seconds of the run's ingest phase, of which inside `redact`)."""
    from trajectory_assets.cli import main
    from trajectory_assets.defs import ingest as ingest_step

    spent = [0.0]
    run_batch, redactor = ingest_step._ingest_batch, ingest_step.Redactor

    def timed_batch(*args, **kwargs):
        start = clock()
        try:
            return run_batch(*args, **kwargs)
        finally:
            spent[0] += clock() - start

    # the CLI runs in this process (--execution in-process), so the batches are ingested here
    ingest_step._ingest_batch, ingest_step.Redactor, TimedRedactor.total = timed_batch, TimedRedactor, 0.0
    shutil.rmtree(storage, ignore_errors=True)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the CLI's own summary
            failed = main(["run", "--source", str(source), "--storage", str(storage), "--execution", "in-process",
                           "--exports", "sft"])
        if failed:
            raise SystemExit("the run failed")
    finally:
        ingest_step._ingest_batch, ingest_step.Redactor = run_batch, redactor
    return spent[0], TimedRedactor.total


def ingest_all(files: list[Path], scratch: Path, redactor: Redactor | None) -> float:
    start = clock()
    for path in files:
        with pq.ParquetWriter(scratch / "rows.parquet", TRAJECTORY_ARROW_SCHEMA) as parquet, \
                open(scratch / "quarantine.jsonl", "wb") as quarantine:
            ingest([SourceFile(str(path), path.name)], parquet.write_table,
                   lambda rows: quarantine.write(b"".join(orjson.dumps(row) + b"\n" for row in rows)),
                   redactor=redactor)
    return clock() - start


def scan(files: list[Path]) -> dict:
    """The redactor alone over every line, with each prefilter this machine has."""
    lines = [line for path in files for line in path.read_bytes().splitlines()]
    size = sum(map(len, lines))
    result: dict = {"lines": len(lines)}
    for prefilter in filter(None, (redaction.HyperscanPrefilter if redaction.hyperscan else None,
                                   redaction.AhoCorasickPrefilter)):
        with patch.object(redaction, "PREFILTER", prefilter):
            redactor = Redactor()
        start = clock()
        found = sum(bool(redactor.findings(line)) for line in lines)
        result[f"redactor_alone_mb_per_s_{prefilter.__name__}"] = round(size / 1e6 / (clock() - start), 1)
    result["lines_with_a_candidate"] = sum(bool(redactor.candidates(line)) for line in lines)
    result["lines_redacted"] = found
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=250, help="corpus size in MB")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--work", default="/tmp/trajectory-assets-bench", help="scratch folder for the corpus")
    parser.add_argument("--aho-corasick", action="store_true",
                        help="run with the Aho-Corasick prefilter, as a machine without Hyperscan's wheel does")
    args = parser.parse_args(argv)
    if args.aho_corasick:
        redaction.PREFILTER = redaction.AhoCorasickPrefilter
    if not CORPUS.is_dir():
        raise SystemExit(f"the benchmark replicates real rollouts from {CORPUS}, which is absent")
    source = Path(args.work) / f"corpus_{args.size}mb"
    shape = build_corpus(args.size << 20, source, CORPUS)
    files = sorted(source.glob("*.jsonl"))
    samples: dict[str, list[float]] = {name: [] for name in ("phase", "phase_redact", "on", "off", "redact")}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            phase, inside = run_ingest_phase(source, Path(scratch) / "run")
            samples["phase"].append(phase)
            samples["phase_redact"].append(inside)
            for on in ((True, False) if repeat % 2 == 0 else (False, True)):
                redactor = TimedRedactor() if on else None
                TimedRedactor.total = 0.0
                samples["on" if on else "off"].append(ingest_all(files, Path(scratch), redactor))
                if on:
                    samples["redact"].append(TimedRedactor.total)
            print(f"  repeat {repeat + 1}: run's ingest phase {phase:6.2f} s (redact {inside:5.2f} s); ingest() "
                  f"on {samples['on'][-1]:6.2f} s (redact {samples['redact'][-1]:5.2f} s), off {samples['off'][-1]:6.2f} s",
                  flush=True)
    median = {name: statistics.median(values) for name, values in samples.items()}
    result = {
        "corpus": shape, "repeats": args.repeats, "detector": Redactor().detector,
        "prefilter": redaction.PREFILTER.__name__, "cpu_seconds": {
            name: [round(v, 3) for v in values] for name, values in samples.items()},
        "run_ingest_phase_s": round(median["phase"], 2), "run_inside_redact_s": round(median["phase_redact"], 2),
        "run_share": round(median["phase_redact"] / median["phase"], 4),
        "ingest_with_s": round(median["on"], 2), "ingest_without_s": round(median["off"], 2),
        "ingest_inside_redact_s": round(median["redact"], 2), "ingest_share": round(median["redact"] / median["on"], 4),
        "ingest_share_ab": round((median["on"] - median["off"]) / median["on"], 4), **scan(files),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    name = "redaction-aho-corasick" if args.aho_corasick else "redaction"
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (OUT / f"{name}.md").write_text(table)
    print(table)


def markdown(r: dict) -> str:
    corpus = r["corpus"]
    size = f"{corpus['bytes'] / 1e6:.0f} MB, {corpus['rows']} rows, {corpus['files']} files"
    return "\n".join([
        "| corpus | measured (CPU s, median) | with redaction | without | inside `redact` | share |",
        "|---|---|---|---|---|---|",
        f"| {size} | ingest phase of `trajectory-assets run` | {r['run_ingest_phase_s']:.2f} s | "
        f"| {r['run_inside_redact_s']:.2f} s | **{r['run_share']:.1%}** |",
        f"| {size} | `ingest()` alone | {r['ingest_with_s']:.2f} s | {r['ingest_without_s']:.2f} s "
        f"| {r['ingest_inside_redact_s']:.2f} s | {r['ingest_share']:.1%} (A/B {r['ingest_share_ab']:.1%}) |",
        "",
        f"Prefilter of the runs: {r['prefilter']}. The redactor alone over every line: "
        + ", ".join(f"{value} MB/s with {key.rsplit('_', 1)[1]}" for key, value in r.items()
                    if key.startswith("redactor_alone"))
        + f"; {r['lines']} lines, {r['lines_with_a_candidate']} with a prefilter candidate, {r['lines_redacted']} "
          f"redacted; {r['detector']}.",
    ]) + "\n"


if __name__ == "__main__":
    main()
