"""What the export phase's shard size costs: `trajectory-assets run` with each target of
``shards.target_trajectories``, interleaved, on one corpus.

    python -m bench.shard_size --size 250 --targets 1250,2500,5000,10000,20000 --repeats 1

For each target: the wall and CPU time of the whole run, the peak PSS of the process tree and
of its largest step, the number of shard steps and the longest one's CPU (``bench.run``'s
measures, each run in a fresh process and instance). Smaller shards spread the phase over
more steps (more cores, less memory each) and pay each step's fixed cost more often; the
default is the target where that stops paying, here.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from bench.corpus import build_corpus
from bench.run import CORPUS, ROOT, largest_step_pss, measure, parallelism

CLI = ROOT / ".venv" / "bin" / "trajectory-assets"


def bench_targets(size_mb: int, targets: list[int], repeats: int, work: Path) -> list[dict]:
    source = work / f"corpus_{size_mb}mb"
    build_corpus(size_mb << 20, source, CORPUS)
    samples: dict[int, list[dict]] = {target: [] for target in targets}
    for repeat in range(repeats):
        order = targets[repeat % len(targets):] + targets[: repeat % len(targets)]
        for target in order:
            storage = work / f"shards_{target}"
            shutil.rmtree(storage, ignore_errors=True)
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config:
                config.write(f"shards:\n  target_trajectories: {target}\n")
                config.flush()
                samples[target].append(measure([str(CLI), "run", "--source", str(source), "--storage", str(storage),
                                                "--config", config.name], steps=True))
            last = samples[target][-1]
            print(f"  target {target:6d}  repeat {repeat + 1}  {last['wall_s']:6.2f} s  CPU {last['cpu_s']:6.1f} s",
                  flush=True)
    rows = []
    for target in targets:
        runs = samples[target]
        measured = parallelism(runs[0]["steps"], runs[0]["sampled_cpu_s"])
        shards = measured["stages"]["shard step"]
        rows.append({
            "target": target,
            "wall_s": round(statistics.median(run["wall_s"] for run in runs), 2),
            "cpu_s": round(statistics.median(run["cpu_s"] for run in runs), 1),
            "peak_pss_tree_mib": round(max(run["peak_pss_tree"] or 0 for run in runs) / 2**20),
            "largest_step_pss_mib": largest_step_pss(runs),
            "shards": len(shards),
            "longest_shard_cpu_s": max((step["cpu_s"] or 0 for step in shards), default=None),
            "bound": measured["bound"],
        })
    return rows


def markdown(size_mb: int, rows: list[dict]) -> str:
    lines = [f"| target (trajectories per shard), {size_mb} MB | shards | wall | CPU (tree) | peak PSS (tree) | "
             "largest step's peak PSS | longest shard's CPU | parallelism bound |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['target']} | {row['shards']} | {row['wall_s']:.2f} s | {row['cpu_s']:.1f} s | "
                     f"{row['peak_pss_tree_mib']} MiB | {row['largest_step_pss_mib']} MiB | "
                     f"{row['longest_shard_cpu_s']} s | {row['bound']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=250, help="corpus size in MB")
    parser.add_argument("--targets", default="1250,2500,5000,10000,20000")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--work", default="/tmp/trajectory-assets-bench", help="scratch folder")
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        raise SystemExit(f"the benchmark replicates real rollouts from {CORPUS}, which is absent")
    rows = bench_targets(args.size, [int(target) for target in args.targets.split(",")], args.repeats, Path(args.work))
    print(markdown(args.size, rows))


if __name__ == "__main__":
    main()
