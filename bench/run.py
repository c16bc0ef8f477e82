"""Times trajectory-assets against the seed's plain recipe and the parse-only floor.

    python -m bench.run --sizes 250,500,1000 --repeats 2      (or: make bench)

For each corpus size it builds a corpus (bench/corpus.py), then runs the variants (floor,
recipe, recipe_pair: two recipes at once, run with every export, run_seed with only the
seed's SFT/DPO/GRPO, run_in_process: run's graph with every run and step in the CLI's
process) A/B interleaved in one session (the order rotates each repeat, so drift
on this shared, noisy machine hits all of them alike), each in a fresh process, recording
wall time, CPU time (user + system of the command and its descendants, from ``os.wait4``)
and the peak memory of the whole process tree (the command and every descendant, e.g. the
run's parallel batch workers): every ~50 ms the tree is walked through /proc and the RSS
and PSS (``smaps_rollup``, which splits shared pages between their sharers instead of
counting them in every process) of its processes are summed; the peak of each sum is kept.
Reports the median wall time, CPU time, MB/s, peak RSS (tree), peak PSS (tree) and each run
variant's ratios to the recipe and the floor, as JSON and as a Markdown table in bench/out/.
(The JSON also keeps ``os.wait4``'s ru_maxrss as ``max_single_rss_mib``: the largest single
process, not the tree.) Then the stats_report's two steps run again, alone, on the last
``run``'s output (bench/report.py, a fresh process per repeat): their time, the part the report page
takes, its share of the run, and the size of ``reports/index.html`` and of the Markdown the
UI stores, as a second table. A third says what held the peak PSS of each run variant at the
largest size: the PSS of each process of the tree at that sample, by role (the CLI, its fork
server, the runs and steps forked from it, log capture; ``ROLES``), so a memory figure can be
traced to the process that holds it. A fourth judges the targets of issues 24 and 42 at the
largest size (the CPU against ``--against``'s checkout, the wall ratios, the parallelism bound,
the peak PSS of the largest step and of the tree, and how each grew from the smallest size).
A fifth says what the cores allow there: how much two recipes at once get done against one
alone, and the ratio to the recipe each run variant would reach if its CPU time kept every
core busy from start to end. A sixth splits each variant's CPU into user and system time,
with the pages its tree touched anew (minor faults, which the system time follows), against
``--against``'s run: run_in_process's row is run's work without its forked processes. A
seventh gives the parallelism bound, which holds on any
machine: the CPU of each step of this checkout's runs (each ingest run, the export phase's
plan, shard and merge steps, the report's two steps: the CPU of the process that executed it,
the pid of its STEP_START event in the run's event log, its CPU time sampled from /proc with
the tree's memory; a process's last ~50 ms before it exits are lost), the longest chain of
dependent steps (the longest path through ``STAGES``, taking the longest step of each stage
on it: today the longest ingest run, the plan, the longest shard, the longest merge, the
report's step over the exports) and the total CPU over that chain, beside the cores the run
kept busy here (CPU ÷ wall). An eighth times a run of the bundled
sample (14 records, so almost nothing but what every run pays) against importing the code
location, interleaved.

A change is measured against an earlier commit in the same rotation, since the recipe's own
time moves by a quarter between sessions here: ``--against CHECKOUT`` adds that checkout's run
and run_seed as ``run@base`` and ``run_seed@base``.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from bench.corpus import build_corpus

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "nemo_gym"
OUT = ROOT / "bench" / "out"


def variants(source: Path, work: Path, against: Path | None = None) -> dict[str, list[str]]:
    python = sys.executable
    # another checkout's CLI (its own .venv), timed beside this one's: an A/B of two commits
    base = {} if against is None else {
        f"{name}@base": [str(against / ".venv" / "bin" / "trajectory-assets"), "run", "--source", str(source),
                         "--storage", str(work / f"{name}@base"), *extra]
        for name, extra in (("run", []), ("run_seed", ["--exports", "sft,dpo,grpo"]))
    }
    return {
        "floor": [python, "-m", "bench.floor", str(source)],
        "recipe": [python, "-m", "bench.recipe", str(source), str(work / "recipe")],
        # two recipes at once: how much two busy processes get from this machine's cores
        "recipe_pair": [python, "-m", "bench.recipe_pair", str(source), str(work / "recipe_pair")],
        # every export (4 seed formats + 7 trainer flavors), as `trajectory-assets run` does by default
        "run": [str(Path(python).parent / "trajectory-assets"), "run", "--source", str(source),
                "--storage", str(work / "run")],
        # what the recipe makes (SFT, DPO, GRPO): the like-for-like comparison
        "run_seed": [str(Path(python).parent / "trajectory-assets"), "run", "--source", str(source),
                     "--storage", str(work / "run_seed"), "--exports", "sft,dpo,grpo"],
        # the same graph as run, every run and step in the CLI's process: what run's work costs
        # without the processes it forks (their start-up and the pages each one touches anew)
        "run_in_process": [str(Path(python).parent / "trajectory-assets"), "run", "--source", str(source),
                           "--storage", str(work / "run_in_process"), "--execution", "in-process"],
        **base,
    }


SAMPLE_S = 0.05  # tree memory sampling period


def _process_tree(root: int) -> tuple[dict[int, int], dict[tuple[int, int], int]]:
    """``root`` and all its live descendants, each with its parent; and the CPU time so far
    (user + system, clock ticks) of each of them by (pid, start time in ticks since boot: a
    reused pid is another process). The kernel here has no /proc/<pid>/task/<tid>/children
    (CONFIG_PROC_CHILDREN), so parents come from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    times: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # exited meanwhile
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # comm may hold ") "; fields[0] is field 3
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        times[int(entry.name)] = (int(fields[19]), int(fields[11]) + int(fields[12]))  # fields 22, 14, 15
    tree, stack = {root: 0}, [root]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, ()):
            tree[child] = pid
            stack.append(child)
    return tree, {(pid, times[pid][0]): times[pid][1] for pid in tree if pid in times}


# What each process of a `trajectory-assets run` is, from its command line: (role, a part of
# the command line that marks it). Order matters: the first match wins.
ROLES = [
    ("fork server", b"multiprocessing.forkserver"),  # a server started as a new interpreter
    ("log capture", b"watch_orphans"),
    ("other", b""),  # the resource tracker, tail
]


def _role(pid: int, root: int, tree: dict[int, int], cmdlines: dict[int, bytes]) -> str:
    """What ``pid`` is (``ROLES``); ``tree`` maps each process to its parent, ``cmdlines`` holds
    command lines as /proc gives them (arguments separated by NULs). A fork server is started
    as a new interpreter (its command line says so) or forked from the CLI (a child of the CLI
    with its command line); what a server forks has the server's command line."""
    if pid == root:
        return "command"  # the CLI itself (or the recipe, or the floor)

    def is_server(one: int) -> bool:
        line, parent = cmdlines.get(one, b""), tree.get(one, 0)
        if parent == root and line == cmdlines.get(root):
            return True  # forked from the CLI
        mark = b"multiprocessing.forkserver"
        return mark in line and mark not in cmdlines.get(parent, b"")  # not one of its forks

    if is_server(tree.get(pid, 0)):
        return "forked run or step"
    if is_server(pid):
        return "fork server"
    line = cmdlines.get(pid, b"").replace(b"\0", b" ")
    return next(role for role, mark in ROLES[1:] if mark in line)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _memory(pid: int) -> tuple[int, int | None]:
    """(RSS, PSS or None) bytes of one process; (0, 0) if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            fields = dict(line.split(b":", 1) for line in handle.read().splitlines()[1:])
        return int(fields[b"Rss"].split()[0]) * 1024, int(fields[b"Pss"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        pass
    try:  # smaps_rollup unreadable: RSS alone from status
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024, None
    except OSError:
        pass
    return 0, 0


def _sample_tree(root: int) -> tuple[int, int | None, dict[str, list[int]], dict[tuple[int, int], int],
                                      dict[tuple[int, int], int]]:
    """(sum of RSS, sum of PSS or None if any process's PSS was unreadable, PSS bytes of each
    process by role, CPU ticks of each process by (pid, start time), PSS bytes of each process
    by (pid, start time)) over the tree."""
    rss = pss = 0
    pss_ok = True
    tree, cpu = _process_tree(root)
    cmdlines = {pid: _cmdline(pid) for pid in tree}
    roles: dict[str, list[int]] = {}
    by_process: dict[tuple[int, int], int] = {}
    started = {pid: start for pid, start in cpu}
    for pid in tree:
        one_rss, one_pss = _memory(pid)
        rss += one_rss
        if one_pss is None:
            pss_ok = False
        else:
            pss += one_pss
            roles.setdefault(_role(pid, root, tree, cmdlines), []).append(one_pss)
            if pid in started:
                by_process[(pid, started[pid])] = one_pss
    return rss, pss if pss_ok else None, roles, cpu, by_process


def step_usage(home: str, cpu_s: dict[tuple[int, int], float], peak_pss: dict[tuple[int, int], int],
               root: int) -> list[dict]:
    """Each step of every run recorded in the instance at ``home`` (a finished CLI call's), with
    the CPU seconds and the peak PSS (MiB) of the process that executed it (``cpu_s``,
    ``peak_pss``: each process of the tree by (pid, start time), as sampled) and whether that
    process also did other work (it ran other steps, or it is the CLI, ``root``): then the
    step's figures are its process's, an overestimate. A step's process is the pid of its
    STEP_START event (the event log's own record, not a guess from timing); None if no sampled
    process, or two, had that pid."""
    import dagster as dg

    from trajectory_assets.dagster_internals import step_processes

    steps = []
    with dg.DagsterInstance.from_config(home) as instance:
        for record in instance.get_run_records():
            run = record.dagster_run
            for step, pid in step_processes(instance, run.run_id).items():
                steps.append({"job": run.job_name, "step": step, "pid": pid})
    for step in steps:
        seen = [process for process in cpu_s if process[0] == step["pid"]]
        step["cpu_s"] = round(cpu_s[seen[0]], 2) if len(seen) == 1 else None
        step["peak_pss_mib"] = (round(peak_pss[seen[0]] / 2**20, 1)
                                if len(seen) == 1 and seen[0] in peak_pss else None)
        step["shared"] = step["pid"] == root or sum(other["pid"] == step["pid"] for other in steps) > 1
    return steps


def measure(command: list[str], cwd: Path = ROOT, steps: bool = False) -> dict:
    """Wall seconds and peak tree memory of one fresh process and its descendants (for a
    `trajectory-assets run`: its fork server and the processes forked from it), started in
    ``cwd`` (a checkout's CLI must start in it: its runs load the code location from there).
    Each process's CPU time is its last sample's (what it spends in its last ~50 ms before it
    exits is lost); with ``steps`` (a `trajectory-assets run`), each step of its runs with the
    CPU and peak PSS of its process (``step_usage``)."""
    peak_rss = peak_pss = 0
    ticks: dict[tuple[int, int], int] = {}  # CPU of each process of the tree, as last sampled
    process_peaks: dict[tuple[int, int], int] = {}  # the peak PSS of each process of the tree
    peak_roles: dict[str, list[int]] = {}  # what held the peak PSS: each process's PSS by role
    pss_ok = True
    samples = 0
    # a file, not a pipe: a chatty child cannot block on it; each run records into a new instance
    with tempfile.TemporaryFile() as stderr, tempfile.TemporaryDirectory(prefix="bench-home-") as home:
        shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home)
        env = {**os.environ, "DAGSTER_HOME": home}
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)  # the child stays un-reaped until
            if pid:                                                  # it exits, so its pid is stable
                break
            rss, pss, roles, cpu, by_process = _sample_tree(process.pid)
            ticks.update(cpu)
            for one, value in by_process.items():
                process_peaks[one] = max(value, process_peaks.get(one, 0))
            samples += 1
            peak_rss = max(peak_rss, rss)
            if pss is None:
                pss_ok = False
            elif pss > peak_pss:
                peak_pss, peak_roles = pss, roles
            time.sleep(SAMPLE_S)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if status != 0:
            stderr.seek(0)
            raise SystemExit(f"{command[:3]} failed: {stderr.read().decode(errors='replace')[-2000:]}")
        cpu_s = {process: count / os.sysconf("SC_CLK_TCK") for process, count in ticks.items()}
        ran = step_usage(home, cpu_s, process_peaks, process.pid) if steps else None
    return {
        "wall_s": wall,
        "peak_rss_tree": peak_rss,
        "peak_pss_tree": peak_pss if pss_ok else None,
        "peak_pss_by_role": {role: sorted(values, reverse=True) for role, values in peak_roles.items()},
        # ru_maxrss (KiB on Linux): the largest single process among the child and its reaped
        # descendants, not their sum
        "max_single_rss": usage.ru_maxrss * 1024,
        # user + system CPU of the command and of every descendant that was waited for (a
        # `trajectory-assets run` waits for its fork server, which waits for its forks)
        "cpu_s": usage.ru_utime + usage.ru_stime,
        # its two parts, and the pages the tree touched for the first time (minor faults: a
        # process's fresh memory, or a forked one's copy of its parent's), which the system time follows
        "user_s": usage.ru_utime,
        "system_s": usage.ru_stime,
        "minor_faults": usage.ru_minflt,
        # the same, summed over each process's last sample
        "sampled_cpu_s": sum(cpu_s.values()),
        "steps": ran,
        "samples": samples,
    }


def longest_chain(stages: dict[str, list[float]], after: dict[str, Sequence[str]]) -> tuple[float, list[str]]:
    """(CPU, stages) of the longest chain of dependent steps. ``stages``: the CPU of each
    stage's steps; ``after``: the stages each stage depends on (each of its steps waits for
    every step of those, and for no step of its own stage). The chain is the longest path
    through them, taking the largest step of each stage on it."""
    ending: dict[str, tuple[float, list[str]]] = {}  # the longest chain ending with each stage

    def ending_with(stage: str) -> tuple[float, list[str]]:
        if stage not in ending:
            cpu, path = max((ending_with(before) for before in after.get(stage, ())), key=lambda chain: chain[0],
                            default=(0.0, []))
            ending[stage] = (cpu + max(stages[stage]), [*path, stage])
        return ending[stage]

    return max((ending_with(stage) for stage in stages), key=lambda chain: chain[0])


def parallelism_bound(total_cpu_s: float, stages: dict[str, list[float]],
                      after: dict[str, Sequence[str]]) -> tuple[float, float]:
    """(total CPU ÷ CPU of the longest chain of dependent steps, that chain's CPU), the chain as
    ``longest_chain`` finds it. No number of cores can run the whole faster than this ratio of
    its CPU time. Stages one after the other:

    >>> parallelism_bound(30.0, {"a": [4.0, 5.0], "b": [6.0, 3.0, 2.0], "c": [1.0]}, {"b": ["a"], "c": ["b"]})
    (2.5, 12.0)

    A side branch (d beside b and c, after a) is on the chain only when it is the longer way:

    >>> after = {"b": ["a"], "c": ["b"], "d": ["a"], "e": ["c", "d"]}
    >>> parallelism_bound(40.0, {"a": [5.0], "b": [6.0, 3.0], "c": [1.0], "d": [2.5], "e": [4.0]}, after)
    (2.5, 16.0)
    >>> parallelism_bound(40.0, {"a": [5.0], "b": [6.0, 3.0], "c": [1.0], "d": [9.0], "e": [4.0]}, after)
    (2.2222222222222223, 18.0)
    """
    chain, _ = longest_chain(stages, after)
    return total_cpu_s / chain, chain


class Stage(NamedTuple):
    after: tuple[str, ...]  # the stages whose every step this stage's steps wait for
    belongs: Callable[[dict], bool]  # whether a step (its job and step names) is one of this stage's


# a `trajectory-assets run`'s stages: every ingest run; then, in the datasets run, the export
# phase's plan step, its shard steps, its merge steps (one per export), and the report's two
# steps, the one over the trajectories beside the export phase (what each stage's steps are,
# from their job and step names: `exports.plan_exports`, `exports.render_shard[shard_00003]`,
# `exports.merge_sft`, `stats_report.report_trajectories`; an ad hoc call's step keys carry its
# prefix, adhoc_<hash>_)
STAGES = {
    "ingest run": Stage((), lambda step: step["job"].startswith("ingest_")),
    "plan step": Stage(("ingest run",), lambda step: step["step"].endswith("plan_exports")),
    "shard step": Stage(("plan step",), lambda step: "render_shard[" in step["step"]),
    "merge step": Stage(("shard step",), lambda step: "merge_" in step["step"].rsplit(".", 1)[-1]),
    "report step over the trajectories": Stage(("ingest run",),
                                               lambda step: step["step"].endswith("report_trajectories")),
    "report step over the exports": Stage(("merge step", "report step over the trajectories"),
                                          lambda step: step["step"].endswith("report_exports")),
}
# the stages with a step per shard or per export: one line each in the table, not one per step
MANY_STEPS = ("shard step", "merge step")


def parallelism(steps: list[dict], total_cpu_s: float) -> dict:
    """The steps of a run (``step_cpu``) by stage (``STAGES``), the longest chain's CPU and
    stages (``longest_chain``) and the bound over ``total_cpu_s``; the bound is None when a
    stage has no step or a step's CPU is unknown, a lower bound when a step's process did other
    work too."""
    stages = {stage: sorted((step for step in steps if belongs(step)), key=lambda step: -(step["cpu_s"] or 0))
              for stage, (_, belongs) in STAGES.items()}
    known = all(stages.values()) and all(step["cpu_s"] is not None for members in stages.values() for step in members)
    chain, path = (longest_chain({stage: [step["cpu_s"] for step in members] for stage, members in stages.items()},
                                 {stage: after for stage, (after, _) in STAGES.items()})
                   if known else (None, None))
    return {"stages": stages, "total_cpu_s": round(total_cpu_s, 2), "chain_cpu_s": chain and round(chain, 2),
            "chain": path, "bound": chain and round(total_cpu_s / chain, 2),
            "shared": any(step["shared"] for step in steps)}


def bench_size(size_mb: int, repeats: int, work: Path, against: Path | None = None) -> dict:
    source = work / f"corpus_{size_mb}mb"
    shape = build_corpus(size_mb << 20, source, CORPUS)
    commands = variants(source, work, against)
    names = list(commands)
    samples: dict[str, list[dict]] = {name: [] for name in names}
    for repeat in range(repeats):
        order = names[repeat % len(names):] + names[: repeat % len(names)]
        for name in order:
            shutil.rmtree(work / name, ignore_errors=True)
            samples[name].append(measure(commands[name], against if name.endswith("@base") else ROOT,
                                         steps=name in ("run", "run_seed")))
            last = samples[name][-1]
            pss = f"{last['peak_pss_tree'] / 2**20:7.1f}" if last["peak_pss_tree"] is not None else "      ?"
            print(f"  {size_mb} MB  repeat {repeat + 1}  {name:8s} {last['wall_s']:7.2f} s  "
                  f"RSS(tree) {last['peak_rss_tree'] / 2**20:7.1f} MiB  PSS(tree) {pss} MiB", flush=True)
    megabytes = shape["bytes"] / 1e6
    result = {"size_mb": size_mb, "corpus": shape, "variants": {}}
    for name in names:
        runs = samples[name]
        wall = statistics.median(r["wall_s"] for r in runs)
        pss = [r["peak_pss_tree"] for r in runs]
        result["variants"][name] = {
            "wall_s": round(wall, 3),
            "mb_per_s": round(megabytes / wall, 2),
            "peak_rss_tree_mib": round(max(r["peak_rss_tree"] for r in runs) / 2**20, 1),
            "peak_pss_tree_mib": None if None in pss else round(max(pss) / 2**20, 1),
            "max_single_rss_mib": round(max(r["max_single_rss"] for r in runs) / 2**20, 1),
            # what held the highest peak PSS: {role: [PSS MiB of each process]}
            "peak_pss_by_role_mib": {
                role: [round(value / 2**20, 1) for value in values]
                for role, values in max(runs, key=lambda r: r["peak_pss_tree"] or 0)["peak_pss_by_role"].items()
            },
            "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 2),
            "user_s": round(statistics.median(r["user_s"] for r in runs), 2),
            "system_s": round(statistics.median(r["system_s"] for r in runs), 2),
            "minor_faults": round(statistics.median(r["minor_faults"] for r in runs)),
            "walls_s": [round(r["wall_s"], 3) for r in runs],
            # this checkout's runs: the steps' CPU and the parallelism bound of the repeat with
            # the median bound, and every repeat's bound
            **({} if runs[0]["steps"] is None else median_parallelism(runs)),
            # the largest peak PSS of any one step's process, over every repeat (None: a step's unknown)
            **({} if runs[0]["steps"] is None else {"largest_step_pss_mib": largest_step_pss(runs)}),
            "memory_samples": [r["samples"] for r in runs],
        }
    for name in (n for n in names if n.startswith("run")):
        wall = result["variants"][name]["wall_s"]
        result["variants"][name]["over_recipe"] = round(wall / result["variants"]["recipe"]["wall_s"], 2)
        result["variants"][name]["over_floor"] = round(wall / result["variants"]["floor"]["wall_s"], 2)
    result["report"] = bench_report(work / "run", repeats, result["variants"]["run"]["wall_s"])
    return result


def largest_step_pss(runs: list[dict]) -> float | None:
    """The highest peak PSS (MiB) of a step's process in any of ``runs`` (a `trajectory-assets
    run`'s measures with their steps), None when a step's process was not sampled.

    >>> largest_step_pss([{"steps": [{"peak_pss_mib": 300.0}, {"peak_pss_mib": 410.5}]},
    ...                   {"steps": [{"peak_pss_mib": 402.0}]}])
    410.5
    """
    values = [step["peak_pss_mib"] for run in runs for step in run["steps"]]
    return None if not values or None in values else max(values)


def median_parallelism(runs: list[dict]) -> dict:
    """The parallelism of the repeat with the median bound (the lower of the middle two), and
    each repeat's bound."""
    each = [parallelism(r["steps"], r["sampled_cpu_s"]) for r in runs]
    ordered = sorted(each, key=lambda one: one["bound"] or 0)
    return {"parallelism": ordered[(len(ordered) - 1) // 2], "bounds": [one["bound"] for one in each]}


def bench_report(storage: Path, repeats: int, run_wall_s: float) -> dict:
    """The stats_report's two steps again on the last ``run``'s storage (bench/report.py), each time
    in a fresh process: its time, the page's part of it, the page's size."""
    runs = []
    for repeat in range(repeats):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            measure([sys.executable, "-m", "bench.report", str(storage), out.name])
            runs.append(json.loads(Path(out.name).read_text()))
        print(f"  report steps {runs[-1]['step_s']:6.2f} s (page {runs[-1]['page_s']:.2f} s), "
              f"page {runs[-1]['page_bytes'] / 1e3:.0f} kB", flush=True)
    step = statistics.median(r["step_s"] for r in runs)
    return {
        "step_s": step,
        "page_s": statistics.median(r["page_s"] for r in runs),
        "over_run": round(step / run_wall_s, 3),  # the report steps' share of a whole run's wall time
        "parts_s": runs[0]["parts_s"],
        "page_bytes": runs[-1]["page_bytes"],
        "plots_png_bytes": runs[-1]["plots_png_bytes"],
        "markdown_metadata_bytes": runs[-1]["markdown_metadata_bytes"],
        "steps_s": [r["step_s"] for r in runs],
    }


def report_markdown(results: list[dict]) -> str:
    lines = [
        "| corpus | report's two steps (median) | of which the page | / run | index.html | Markdown in the UI (with plots) |",
        "|---|---|---|---|---|---|",
    ]
    for result in results:
        report = result["report"]
        lines.append(
            f"| {result['corpus']['bytes'] / 1e6:.0f} MB | {report['step_s']:.2f} s | {report['page_s']:.2f} s | "
            f"{report['over_run']:.1%} | {report['page_bytes'] / 1e3:.0f} kB | "
            f"{report['markdown_metadata_bytes'] / 1e3:.0f} kB |"
        )
    return "\n".join(lines) + "\n"


def markdown(results: list[dict]) -> str:
    lines = [
        "| corpus | variant | wall (median) | CPU (tree) | MB/s | peak RSS (tree) | peak PSS (tree) | / recipe | / floor |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for name, v in result["variants"].items():
            ratios = (f"{v['over_recipe']}x", f"{v['over_floor']}x") if "over_recipe" in v else ("", "")
            lines.append(
                f"| {result['corpus']['bytes'] / 1e6:.0f} MB, {result['corpus']['rows']} rows, "
                f"{result['corpus']['files']} files | {name} | {v['wall_s']:.2f} s | {v['cpu_s']:.1f} s | {v['mb_per_s']} | "
                f"{v['peak_rss_tree_mib']} MiB | "
                f"{'n/a' if v['peak_pss_tree_mib'] is None else str(v['peak_pss_tree_mib']) + ' MiB'} | "
                f"{ratios[0]} | {ratios[1]} |"
            )
    return "\n".join(lines) + "\n"


def composition_markdown(results: list[dict]) -> str:
    """What held the peak PSS of each run variant at the largest size, by process role."""
    largest = results[-1]
    runs = [name for name in largest["variants"] if name.startswith("run")]
    lines = [f"| at {largest['corpus']['bytes'] / 1e6:.0f} MB, process | "
             + " | ".join(f"{name}: processes, PSS at the peak" for name in runs) + " |",
             "|---|" + "---|" * len(runs)]
    roles = list(dict.fromkeys(role for name in runs for role in largest["variants"][name]["peak_pss_by_role_mib"]))
    order = ["command", ROLES[0][0], "forked run or step", *(role for role, _ in ROLES[1:])]
    for role in sorted(roles, key=order.index):
        cells = []
        for name in runs:
            values = largest["variants"][name]["peak_pss_by_role_mib"].get(role, [])
            cells.append(f"{len(values)}, {sum(values):.0f} MiB" + (f" ({' + '.join(f'{v:.0f}' for v in values)})"
                                                                 if len(values) > 1 else ""))
        lines.append(f"| {'the CLI' if role == 'command' else role} | " + " | ".join(cells) + " |")
    totals = [sum(sum(values) for values in largest["variants"][name]["peak_pss_by_role_mib"].values()) for name in runs]
    lines.append("| total | " + " | ".join(f"{total:.0f} MiB" for total in totals) + " |")
    return "\n".join(lines) + "\n"


def cores_markdown(results: list[dict], cpus: int) -> str:
    """What the machine's cores allow at the largest size: two recipes at once against one
    (how much two busy processes get), and for each run variant of this checkout the wall it
    would take if its CPU seconds (user + system, the whole tree) kept every core busy from
    start to end, as a ratio to the recipe: no packing of the steps can beat that ratio
    without cutting CPU."""
    largest = results[-1]
    variants = largest["variants"]
    recipe = variants["recipe"]
    lines = [f"| at {largest['corpus']['bytes'] / 1e6:.0f} MB | wall (median) | CPU (tree) | "
             f"CPU / {cpus} cores | / recipe | / recipe, every core busy throughout |",
             "|---|---|---|---|---|---|",
             f"| recipe | {recipe['wall_s']:.2f} s | {recipe['cpu_s']:.1f} s | | | |"]
    if "recipe_pair" in variants:
        pair = variants["recipe_pair"]
        lines.append(f"| two recipes at once ({2 * recipe['wall_s'] / pair['wall_s']:.2f}x one's work per second) | "
                     f"{pair['wall_s']:.2f} s | {pair['cpu_s']:.1f} s | | | |")
    for name in ("run_seed", "run"):
        if name in variants:
            v = variants[name]
            busy = v["cpu_s"] / cpus
            lines.append(f"| {name} | {v['wall_s']:.2f} s | {v['cpu_s']:.1f} s | {busy:.2f} s | "
                         f"{v['over_recipe']:.2f} | {busy / recipe['wall_s']:.2f} |")
    return "\n".join(lines) + "\n"


CPU_PARTS_ORDER = ("recipe", "run_in_process", "run", "run@base", "run_seed", "run_seed@base")


def cpu_parts_markdown(results: list[dict]) -> str:
    """Where the CPU goes at the largest size: each variant's user and system time and the
    pages its tree touched anew (minor faults), and its CPU against the --against checkout's
    run when there is one. run_in_process is run's graph with no process forked, so run's CPU
    above it is what its processes cost, and run@base's CPU times 0.7 (issue 42's target)
    below it is what no process layout can reach without cheaper work.

    >>> print(cpu_parts_markdown([{"corpus": {"bytes": 1049e6}, "variants": {
    ...     "run": {"user_s": 45.5, "system_s": 19.5, "cpu_s": 65.0, "minor_faults": 4_250_000},
    ...     "run@base": {"user_s": 48.0, "system_s": 12.0, "cpu_s": 60.0, "minor_faults": 2_350_000}}}]))
    | at 1049 MB | user | system | CPU (tree) | minor faults | CPU / run@base's |
    |---|---|---|---|---|---|
    | run | 45.5 s | 19.5 s | 65.0 s | 4.25 M | 1.08 |
    | run@base | 48.0 s | 12.0 s | 60.0 s | 2.35 M | 1.00 |
    <BLANKLINE>
    """
    largest = results[-1]
    variants = largest["variants"]
    base = variants.get("run@base")
    lines = [f"| at {largest['corpus']['bytes'] / 1e6:.0f} MB | user | system | CPU (tree) | minor faults | "
             "CPU / run@base's |", "|---|---|---|---|---|---|"]
    for name in (name for name in CPU_PARTS_ORDER if name in variants):
        v = variants[name]
        against = "" if base is None else f"{v['cpu_s'] / base['cpu_s']:.2f}"
        lines.append(f"| {name} | {v['user_s']:.1f} s | {v['system_s']:.1f} s | {v['cpu_s']:.1f} s | "
                     f"{v['minor_faults'] / 1e6:.2f} M | {against} |")
    return "\n".join(lines) + "\n"


def parallelism_markdown(results: list[dict], cpus: int) -> str:
    """At the largest size, each step's CPU by stage for this checkout's run variants, the
    longest chain of dependent steps, the total and the bound (``parallelism``), against how
    many cores the run kept busy on average on this machine (CPU ÷ wall)."""
    largest = results[-1]
    runs = [name for name in ("run_seed", "run") if "parallelism" in largest["variants"].get(name, {})]
    if not runs:
        return ""
    cells: dict[str, dict[str, str]] = {}
    for name in runs:
        measured = largest["variants"][name]["parallelism"]
        for stage, steps in measured["stages"].items():
            if stage in MANY_STEPS and steps:
                cpu = [step["cpu_s"] for step in steps]
                cells.setdefault(f"{stage}s: how many, the longest, all", {})[name] = (
                    f"{len(steps)}, ?" if None in cpu else f"{len(steps)}, {max(cpu):.1f} s, {sum(cpu):.1f} s") + (
                    " (shared)" if any(step["shared"] for step in steps) else "")
                continue
            for number, step in enumerate(steps, 1):
                label = f"{stage} {number}" if stage == "ingest run" else stage
                shown = "?" if step["cpu_s"] is None else f"{step['cpu_s']:.1f} s"
                cells.setdefault(label, {})[name] = shown + (" (shared)" if step["shared"] else "")
        chain, bound = measured["chain_cpu_s"], measured["bound"]
        cells.setdefault("longest chain of dependent steps (the longest step of each stage on it)", {})[name] = (
            "n/a" if chain is None else f"{chain:.1f} s: {' + '.join(measured['chain'])}")
        steps_cpu = sum(step["cpu_s"] or 0 for steps in measured["stages"].values() for step in steps)
        cells.setdefault("the rest, on no chain: the CLI, the fork server, log capture", {})[name] = (
            f"{measured['total_cpu_s'] - steps_cpu:.1f} s")
        cells.setdefault("total CPU (every process, last samples)", {})[name] = f"{measured['total_cpu_s']:.1f} s"
        cells.setdefault("**bound: total ÷ chain**", {})[name] = (
            "n/a" if bound is None else f"**{bound:.2f}**" + (" or more" if measured["shared"] else ""))
        v = largest["variants"][name]
        cells.setdefault(f"on these {cpus} vCPUs: CPU (tree) ÷ wall", {})[name] = f"{v['cpu_s'] / v['wall_s']:.2f}"
        largest_step = v.get("largest_step_pss_mib")
        cells.setdefault("peak PSS of the largest step", {})[name] = (
            "n/a" if largest_step is None else f"{largest_step:.0f} MiB")
    lines = [f"| at {largest['corpus']['bytes'] / 1e6:.0f} MB, CPU of each step's process | " + " | ".join(runs) + " |",
             "|---|" + "---|" * len(runs)]
    lines += [f"| {label} | " + " | ".join(row.get(name, "") for name in runs) + " |" for label, row in cells.items()]
    return "\n".join(lines) + "\n"


# the performance targets of issues 24 and 42, at the largest size measured
FLAT_LIMIT = 1.1  # "flat in corpus size" (issue 24): the tree's peak may grow by this factor from the smallest size
STEP_FLAT_LIMIT = 1.05  # issue 42: the largest step's peak, at the largest size against the smallest


@dataclass(frozen=True)
class Target:
    label: str
    measured: float | None  # None: not measured in these results
    limit: float
    at_least: bool = False  # the measure must reach the limit (a bound), not stay under it

    def met(self) -> bool | None:
        if self.measured is None:
            return None
        return self.measured >= self.limit if self.at_least else self.measured <= self.limit


def targets(results: list[dict]) -> list[Target]:
    """Each target judged on this checkout's runs (not an --against checkout's) at the largest
    size; a ratio between sizes needs two sizes, and the CPU against today's main needs
    ``--against``."""
    largest, smallest = results[-1]["variants"], results[0]["variants"]
    runs = ["run", "run_seed"]

    def peak(variants: dict, field: str) -> float | None:
        values = [variants[name].get(field) for name in runs]
        return None if None in values else max(values)

    def grown(field: str) -> float | None:
        if len(results) < 2 or peak(largest, field) is None or peak(smallest, field) is None:
            return None
        return peak(largest, field) / peak(smallest, field)

    base = largest.get("run@base")
    tree = peak(largest, "peak_pss_tree_mib")
    return [
        Target("run CPU (tree) / the --against checkout's", base and largest["run"]["cpu_s"] / base["cpu_s"], 0.7),
        Target("run / recipe (wall)", largest["run"]["over_recipe"], 1.4),
        Target("run_seed / recipe (wall)", largest["run_seed"]["over_recipe"], 1.0),
        Target("parallelism bound of run (total CPU / longest chain)",
               largest["run"].get("parallelism", {}).get("bound"), 8.0, at_least=True),
        Target("peak PSS of the largest step, largest / smallest size", grown("largest_step_pss_mib"),
               STEP_FLAT_LIMIT),
        Target("peak PSS of the process tree, GiB", None if tree is None else tree / 1024, 1.0),
        Target("peak PSS of the process tree, largest / smallest size", grown("peak_pss_tree_mib"), FLAT_LIMIT),
    ]


def targets_markdown(results: list[dict]) -> str:
    size = results[-1]["corpus"]["bytes"] / 1e6
    lines = [f"| target at {size:.0f} MB | measured | limit | met |", "|---|---|---|---|"]
    for target in targets(results):
        shown = "n/a" if target.measured is None else f"{target.measured:.2f}"
        met = {None: "n/a", True: "yes", False: "no"}[target.met()]
        lines.append(f"| {target.label} | {shown} | {'≥' if target.at_least else '≤'} {target.limit} | {met} |")
    return "\n".join(lines) + "\n"


SAMPLE = ROOT / "samples" / "rollouts"  # the bundled sample: 14 records in 3 files


IMPORT = [sys.executable, "-c", "import trajectory_assets.definitions"]
FIXED_COST_LIMIT = 3.0  # a run of the bundled sample, at most this many times importing the code location


def bench_fixed_cost(repeats: int, work: Path) -> dict:
    """A run of the bundled sample (14 records: what every run pays however few its records)
    against importing the code location, interleaved, each in a fresh process (the run with
    a new instance)."""
    command = variants(SAMPLE, work)["run"]
    command[command.index("--storage") + 1] = str(work / "run_sample")
    walls: dict[str, list[float]] = {"run": [], "import": []}
    for repeat in range(repeats):
        for name in (("run", "import") if repeat % 2 == 0 else ("import", "run")):
            shutil.rmtree(work / "run_sample", ignore_errors=True)
            walls[name].append(measure(command if name == "run" else IMPORT)["wall_s"])
        print(f"  bundled sample  repeat {repeat + 1}  run {walls['run'][-1]:6.2f} s  "
              f"import {walls['import'][-1]:6.2f} s", flush=True)
    run, imported = statistics.median(walls["run"]), statistics.median(walls["import"])
    return {"wall_s": round(run, 3), "import_s": round(imported, 3), "over_import": round(run / imported, 2),
            "walls_s": {name: [round(wall, 3) for wall in values] for name, values in walls.items()}}


def fixed_cost_markdown(fixed: dict) -> str:
    met = "yes" if fixed["over_import"] <= FIXED_COST_LIMIT else "no"
    return "\n".join([
        "| bundled sample (14 records) | `import trajectory_assets.definitions` | run / import | limit | met |",
        "|---|---|---|---|---|",
        f"| {fixed['wall_s']:.2f} s | {fixed['import_s']:.2f} s | {fixed['over_import']:.2f} | ≤ {FIXED_COST_LIMIT} "
        f"| {met} |",
    ]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="250,500,1000", help="corpus sizes in MB, comma-separated")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work", default="/tmp/trajectory-assets-bench", help="scratch folder for corpora and outputs")
    parser.add_argument("--against", type=Path, help="another checkout with its own .venv (e.g. a git worktree of an "
                                                     "earlier commit, set up with `make setup`): its run and run_seed "
                                                     "join the rotation as run@base and run_seed@base")
    args = parser.parse_args(argv)
    if not CORPUS.is_dir():
        raise SystemExit(f"the benchmark replicates real rollouts from {CORPUS}, which is absent")
    work = Path(args.work)
    results = [bench_size(int(size), args.repeats, work, args.against) for size in args.sizes.split(",")]
    fixed = bench_fixed_cost(args.repeats, work)
    OUT.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": len(os.sched_getaffinity(0)), "python": sys.version.split()[0]}
    (OUT / "results.json").write_text(json.dumps({"machine": machine, "results": results, "bundled_sample": fixed},
                                                 indent=2) + "\n")
    table = (markdown(results) + "\n" + report_markdown(results) + "\n" + composition_markdown(results) + "\n"
             + targets_markdown(results) + "\n" + cores_markdown(results, machine["cpus"]) + "\n"
             + cpu_parts_markdown(results) + "\n"
             + parallelism_markdown(results, machine["cpus"]) + "\n"
             + fixed_cost_markdown(fixed))
    (OUT / "results.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
