"""Times trajectory-assets against the seed's plain recipe and the parse-only floor.

    python -m bench.run --sizes 250,1000 --repeats 2      (or: make bench)

For each corpus size it builds a corpus (bench/corpus.py), then runs the three variants
A/B interleaved in one session (the order rotates each repeat, so drift on this shared,
noisy machine hits all of them alike), each in a fresh process, recording wall time and
that process's peak RSS (``os.wait4``). Reports the median wall time, MB/s, peak RSS and
the ratios run/recipe and run/floor, as JSON and as a Markdown table in bench/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.corpus import build_corpus

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "nemo_gym"
OUT = ROOT / "bench" / "out"


def variants(source: Path, work: Path) -> dict[str, list[str]]:
    python = sys.executable
    return {
        "floor": [python, "-m", "bench.floor", str(source)],
        "recipe": [python, "-m", "bench.recipe", str(source), str(work / "recipe")],
        "run": [str(Path(python).parent / "trajectory-assets"), "run", "--source", str(source),
                "--storage", str(work / "run")],
    }


def measure(command: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}  # a temporary instance
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"{command[:3]} failed: {process.stderr.read().decode()[-2000:]}")
    # ru_maxrss is in KiB on Linux; it covers this process, not the machine
    return wall, usage.ru_maxrss * 1024


def bench_size(size_mb: int, repeats: int, work: Path) -> dict:
    source = work / f"corpus_{size_mb}mb"
    shape = build_corpus(size_mb << 20, source, CORPUS)
    commands = variants(source, work)
    names = list(commands)
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name in names}
    for repeat in range(repeats):
        order = names[repeat % len(names):] + names[: repeat % len(names)]
        for name in order:
            shutil.rmtree(work / name, ignore_errors=True)
            samples[name].append(measure(commands[name]))
            print(f"  {size_mb} MB  repeat {repeat + 1}  {name:6s} {samples[name][-1][0]:7.2f} s", flush=True)
    megabytes = shape["bytes"] / 1e6
    result = {"size_mb": size_mb, "corpus": shape, "variants": {}}
    for name in names:
        wall = statistics.median(w for w, _ in samples[name])
        result["variants"][name] = {
            "wall_s": round(wall, 3),
            "mb_per_s": round(megabytes / wall, 2),
            "peak_rss_mib": round(max(r for _, r in samples[name]) / 2**20, 1),
            "walls_s": [round(w, 3) for w, _ in samples[name]],
        }
    run = result["variants"]["run"]["wall_s"]
    result["run_over_recipe"] = round(run / result["variants"]["recipe"]["wall_s"], 2)
    result["run_over_floor"] = round(run / result["variants"]["floor"]["wall_s"], 2)
    return result


def markdown(results: list[dict]) -> str:
    lines = [
        "| corpus | variant | wall (median) | MB/s | peak RSS | run / recipe | run / floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for name, v in result["variants"].items():
            ratios = (f"{result['run_over_recipe']}x", f"{result['run_over_floor']}x") if name == "run" else ("", "")
            lines.append(
                f"| {result['corpus']['bytes'] / 1e6:.0f} MB, {result['corpus']['rows']} rows, "
                f"{result['corpus']['files']} files | {name} | {v['wall_s']:.2f} s | {v['mb_per_s']} | "
                f"{v['peak_rss_mib']} MiB | {ratios[0]} | {ratios[1]} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="250,1000", help="corpus sizes in MB, comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work", default="/tmp/trajectory-assets-bench", help="scratch folder for corpora and outputs")
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        raise SystemExit(f"the benchmark replicates real rollouts from {CORPUS}, which is absent")
    work = Path(args.work)
    results = [bench_size(int(size), args.repeats, work) for size in args.sizes.split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    (OUT / "results.json").write_text(json.dumps({"machine": machine, "results": results}, indent=2) + "\n")
    table = markdown(results)
    (OUT / "results.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
