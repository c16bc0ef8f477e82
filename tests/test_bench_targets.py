"""The benchmark's verdict on the performance targets (bench/run.py), on made-up results."""

import sys

import pytest

from bench.run import targets_markdown


def variants(recipe, run, run_seed, floor, pss):
    made = {"recipe": {"wall_s": recipe, "peak_pss_tree_mib": 2000.0}, "floor": {"wall_s": floor, "peak_pss_tree_mib": 10.0}}
    for name, wall in (("run", run), ("run_seed", run_seed)):
        made[name] = {"wall_s": wall, "over_recipe": round(wall / recipe, 2), "over_floor": round(wall / floor, 2),
                      "peak_pss_tree_mib": pss}
    return made


def result(megabytes, **kwargs):
    return {"corpus": {"bytes": megabytes * 10**6}, "variants": variants(**kwargs)}


def test_each_target_is_judged_against_its_limit():
    smallest = result(250, recipe=5.0, run=20.0, run_seed=10.0, floor=0.5, pss=900.0)
    largest = result(1000, recipe=20.0, run=29.0, run_seed=21.0, floor=2.0, pss=1100.0)
    smallest["variants"]["run"]["largest_step_pss_mib"] = smallest["variants"]["run_seed"]["largest_step_pss_mib"] = 400.0
    largest["variants"]["run"].update(largest_step_pss_mib=430.0, cpu_s=40.0, parallelism={"bound": 8.5})
    largest["variants"]["run_seed"]["largest_step_pss_mib"] = 410.0
    largest["variants"]["run@base"] = {"wall_s": 40.0, "cpu_s": 50.0, "peak_pss_tree_mib": 5000.0}
    table = targets_markdown([smallest, largest])
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in table.splitlines()[2:]}
    assert rows["run CPU (tree) / the --against checkout's"] == ["0.80", "≤ 0.7", "no |"]
    assert rows["run / recipe (wall)"] == ["1.45", "≤ 1.4", "no |"]
    assert rows["run_seed / recipe (wall)"] == ["1.05", "≤ 1.0", "no |"]
    assert rows["parallelism bound of run (total CPU / longest chain)"] == ["8.50", "≥ 8.0", "yes |"]
    assert rows["peak PSS of the largest step, largest / smallest size"] == ["1.07", "≤ 1.05", "no |"]
    assert rows["peak PSS of the process tree, GiB"] == ["1.07", "≤ 1.0", "no |"]
    assert rows["peak PSS of the process tree, largest / smallest size"] == ["1.22", "≤ 1.1", "no |"]
    assert table.startswith("| target at 1000 MB |")
    largest["variants"]["run"]["parallelism"] = {"bound": 2.1}  # a bound must reach its limit, not stay under it
    assert "| parallelism bound of run (total CPU / longest chain) | 2.10 | ≥ 8.0 | no |" in targets_markdown([largest])


def test_an_earlier_checkout_joins_the_rotation_but_not_the_verdict(tmp_path):
    from pathlib import Path

    from bench.run import variants as commands

    made = commands(Path("/corpus"), tmp_path, against=Path("/base"))
    assert made["run@base"][:2] == ["/base/.venv/bin/trajectory-assets", "run"]
    assert made["run_seed@base"][-2:] == ["--exports", "sft,dpo,grpo"]
    assert made["run@base"][made["run@base"].index("--storage") + 1] == str(tmp_path / "run@base")
    assert set(commands(Path("/corpus"), tmp_path)) == {"floor", "recipe", "recipe_pair", "run", "run_seed",
                                                            "run_in_process"}
    # run's graph with nothing forked: the CLI's own mode for it, beside run with the same exports
    assert made["run_in_process"][-2:] == ["--execution", "in-process"] and "--exports" not in made["run_in_process"]
    # started in the other checkout: its runs load the code location from where the CLI starts
    from bench.run import measure

    (tmp_path / "base").mkdir()
    where = f"import os; assert os.getcwd() == {str(tmp_path / 'base')!r}"
    assert measure([sys.executable, "-c", where], tmp_path / "base")["wall_s"] > 0
    with pytest.raises(SystemExit, match="AssertionError"):
        measure([sys.executable, "-c", where])
    measured = result(1000, recipe=20.0, run=30.0, run_seed=15.0, floor=3.0, pss=700.0)
    measured["variants"]["run"]["cpu_s"] = 30.0
    measured["variants"]["run@base"] = {"wall_s": 90.0, "cpu_s": 60.0, "over_recipe": 4.5, "peak_pss_tree_mib": 5000.0}
    assert "| run CPU (tree) / the --against checkout's | 0.50 | ≤ 0.7 | yes |" in targets_markdown([measured])
    assert "| peak PSS of the process tree, GiB | 0.68 | ≤ 1.0 | yes |" in targets_markdown([measured])


def test_a_single_size_cannot_say_whether_memory_is_flat():
    table = targets_markdown([result(1000, recipe=20.0, run=28.0, run_seed=15.0, floor=3.0, pss=700.0)])
    assert "| peak PSS of the process tree, largest / smallest size | n/a | ≤ 1.1 | n/a |" in table
    assert "| peak PSS of the largest step, largest / smallest size | n/a | ≤ 1.05 | n/a |" in table
    # without --against there is nothing to compare the CPU with; without steps, no bound
    assert "| run CPU (tree) / the --against checkout's | n/a | ≤ 0.7 | n/a |" in table
    assert "| parallelism bound of run (total CPU / longest chain) | n/a | ≥ 8.0 | n/a |" in table
    assert "| run / recipe (wall) | 1.40 | ≤ 1.4 | yes |" in table
    assert "| run_seed / recipe (wall) | 0.75 | ≤ 1.0 | yes |" in table


def test_each_process_of_a_run_is_named_by_its_role():
    from bench.run import _role

    parents = {1: 0, 2: 1, 3: 2, 4: 3, 5: 1, 6: 1}  # pid -> parent pid, as /proc gives them
    forkserver = (b"python\0-c\0from multiprocessing.forkserver import main; main(5, 6, "
                  b"['trajectory_assets.runs.fork_server_session', 'trajectory_assets.runs.step_preload'])")
    cmdlines = {
        1: b"python\0trajectory-assets\0run",
        2: forkserver,
        3: forkserver,  # forked from the fork server: the same command line
        4: b"python\0.../dagster/_core/execution/scripts/watch_orphans.py\0003",
        5: b"python\0-B\0-c\0from multiprocessing.resource_tracker import main;main(11)",
        6: b"tail\0-F\0-c\0+0\0/home/storage/compute_logs/x.out",
    }
    roles = {pid: _role(pid, 1, parents, cmdlines) for pid in parents}
    assert roles == {1: "command", 2: "fork server", 3: "forked run or step", 4: "log capture", 5: "other",
                     6: "other"}
    # a fork server forked from the CLI: the CLI's command line, in the server and in its forks
    cmdlines.update({2: cmdlines[1], 3: cmdlines[1]})
    roles = {pid: _role(pid, 1, parents, cmdlines) for pid in parents}
    assert roles == {1: "command", 2: "fork server", 3: "forked run or step", 4: "log capture", 5: "other",
                     6: "other"}


def test_the_peak_is_broken_down_by_role_for_each_run_variant():
    from bench.run import composition_markdown

    def held(cli, steps):
        return {"peak_pss_by_role_mib": {"command": [cli], "fork server": [170.0], "forked run or step": steps}}

    results = [{"corpus": {"bytes": 1000 * 10**6},
                "variants": {"recipe": {}, "run": held(160.0, [380.0, 310.4]), "run_seed": held(150.0, [300.0])}}]
    table = composition_markdown(results).splitlines()
    assert table[0] == "| at 1000 MB, process | run: processes, PSS at the peak | run_seed: processes, PSS at the peak |"
    assert table[2:] == [
        "| the CLI | 1, 160 MiB | 1, 150 MiB |",
        "| fork server | 1, 170 MiB | 1, 170 MiB |",
        "| forked run or step | 2, 690 MiB (380 + 310) | 1, 300 MiB |",
        "| total | 1020 MiB | 620 MiB |",
    ]


def test_a_measured_command_and_its_child_are_both_in_the_peak_and_in_the_cpu_time():
    from bench.run import measure

    # the child holds 64 MB once it has exec'd, so the peak is a sample taken after its exec: at
    # the instant between fork and exec it still has its parent's command line, and would be
    # taken for a fork server forked from the command (seen under heavy load)
    child = ("import time; held = bytes(range(256)) * 250_000; end = time.process_time() + 0.4\n"
             "while time.process_time() < end: pass\ntime.sleep(1.0)")
    measured = measure([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"])
    roles = measured["peak_pss_by_role"]
    assert sorted(roles) == ["command", "other"], roles
    assert len(roles["command"]) == len(roles["other"]) == 1
    assert sum(roles["command"] + roles["other"]) == measured["peak_pss_tree"] > 0
    assert measured["cpu_s"] >= 0.4  # the child's spinning, waited for, not only the parent's start-up
    # and sampled: the child sleeps after it spins, so a sample sees all of its CPU
    assert measured["cpu_s"] >= measured["sampled_cpu_s"] >= 0.4 and measured["steps"] is None


def test_the_cores_table_gives_what_two_busy_processes_get_and_the_ratio_a_run_s_cpu_allows():
    from bench.run import cores_markdown

    made = result(1000, recipe=16.0, run=34.0, run_seed=24.0, floor=2.0, pss=800.0)
    made["variants"]["recipe"]["cpu_s"] = 15.5
    made["variants"]["recipe_pair"] = {"wall_s": 20.0, "cpu_s": 39.0}
    made["variants"]["run"]["cpu_s"] = 57.6
    made["variants"]["run_seed"]["cpu_s"] = 38.4
    table = cores_markdown([made], cpus=2).splitlines()
    assert table[0] == ("| at 1000 MB | wall (median) | CPU (tree) | CPU / 2 cores | / recipe | "
                        "/ recipe, every core busy throughout |")
    assert table[2:] == [
        "| recipe | 16.00 s | 15.5 s | | | |",
        "| two recipes at once (1.60x one's work per second) | 20.00 s | 39.0 s | | | |",
        "| run_seed | 24.00 s | 38.4 s | 19.20 s | 1.50 | 1.20 |",
        "| run | 34.00 s | 57.6 s | 28.80 s | 2.12 | 1.80 |",
    ]


def test_the_recipe_pair_makes_the_recipe_s_output_twice(tmp_path):
    from bench.recipe_pair import main
    from tests.conftest import SAMPLE

    source = tmp_path / "source"
    source.mkdir()
    (source / "rollouts.jsonl").write_bytes((SAMPLE / "weather" / "rollouts.jsonl").read_bytes())
    assert main(str(source), str(tmp_path / "out")) == 0
    first, second = ((tmp_path / "out" / copy / "sft.jsonl").read_bytes() for copy in ("a", "b"))
    assert first == second and first.count(b"\n") > 0
    (source / "broken.jsonl").write_text("{}\n")  # no output: the recipe raises, and the pair says so
    assert main(str(source), str(tmp_path / "again")) != 0


def test_a_run_of_the_bundled_sample_is_judged_against_importing_the_code_location():
    from bench.run import fixed_cost_markdown

    table = fixed_cost_markdown({"wall_s": 4.5, "import_s": 1.4, "over_import": 3.21})
    assert table.splitlines()[2] == "| 4.50 s | 1.40 s | 3.21 | ≤ 3.0 | no |"


def test_the_ui_timeline_gives_each_run_in_creation_order_from_the_start_of_dagster_dev():
    from bench.ui import _timeline

    runs = [  # as the webserver's GraphQL API gives them: epoch seconds, none for a run not yet started
        {"jobName": "__ASSET_JOB", "creationTime": 1014.9, "startTime": 1017.3, "endTime": 1022.8},
        {"jobName": "ingest_rollout_batch", "creationTime": 1005.3, "startTime": None, "endTime": None},
    ]
    assert _timeline(runs, 1000.0) == [
        {"job": "ingest_rollout_batch", "created": 5.3, "started": None, "ended": None},
        {"job": "__ASSET_JOB", "created": 14.9, "started": 17.3, "ended": 22.8},
    ]


def test_the_ui_path_is_judged_only_once_no_run_waits_or_runs():
    from bench.ui import settled

    assert not settled([])  # nothing launched yet
    assert not settled(["SUCCESS", "STARTED"]) and not settled(["QUEUED"]) and not settled(["CANCELING"])
    assert settled(["SUCCESS", "SUCCESS", "FAILURE"])


def test_the_bound_is_the_total_cpu_over_the_longest_chain_of_dependent_steps():
    import doctest

    from bench import run
    from bench.run import parallelism, parallelism_bound, parallelism_markdown

    assert doctest.testmod(run).failed == 0  # the examples of parallelism_bound, largest_step_pss, cpu_parts_markdown
    assert parallelism_bound(20.0, {"a": [5.0], "b": [2.0, 3.0], "c": [2.0]}, {"b": ["a"], "c": ["b"]}) == (2.0, 10.0)
    # stages that depend on nothing run side by side: the chain is the longest of them
    assert parallelism_bound(20.0, {"a": [5.0], "b": [2.0, 3.0], "c": [2.0]}, {}) == (4.0, 5.0)

    def step(job, key, cpu, pid, shared=False):
        return {"job": job, "step": key, "cpu_s": cpu, "pid": pid, "shared": shared}

    ingest, build = "ingest_adhoc_1f", "build_adhoc_1f"  # an ad hoc call's jobs, and its step keys' prefix
    phase = "adhoc_1f_exports.adhoc_1f_"
    steps = [step(ingest, "adhoc_1f_ingest_batches", 6.0, 11), step(ingest, "adhoc_1f_ingest_batches", 8.0, 12),
             step(build, phase + "plan_exports", 2.0, 13),
             step(build, phase + "render_shard[shard_00000]", 4.0, 14),
             step(build, phase + "render_shard[shard_00001]", 5.0, 15),
             step(build, phase + "merge_sft", 1.0, 16), step(build, phase + "merge_trl_dpo", 0.5, 17),
             step(build, "adhoc_1f__stats_report.adhoc_1f_report_trajectories", 2.5, 18),
             step(build, "adhoc_1f__stats_report.adhoc_1f_report_exports", 1.5, 19)]
    measured = parallelism(steps, 35.0)
    # the report's step over the trajectories (after the ingest runs only) is off the chain
    assert (measured["chain_cpu_s"], measured["bound"], measured["shared"]) == (17.5, 2.0, False)
    assert measured["chain"] == ["ingest run", "plan step", "shard step", "merge step", "report step over the exports"]
    assert [one["cpu_s"] for one in measured["stages"]["ingest run"]] == [8.0, 6.0]  # the longest first
    assert [len(members) for members in measured["stages"].values()] == [2, 1, 2, 2, 1, 1]
    # ... until it is longer than the export phase: then the chain goes through it
    slow = [dict(one, cpu_s=9.0) if one["step"].endswith("report_trajectories") else one for one in steps]
    assert parallelism(slow, 35.0)["chain"] == ["ingest run", "report step over the trajectories",
                                                "report step over the exports"]
    assert parallelism(slow, 35.0)["chain_cpu_s"] == 18.5
    made = result(1000, recipe=16.0, run=32.0, run_seed=24.0, floor=2.0, pss=800.0)
    made["variants"]["run"].update(cpu_s=48.0, parallelism=measured)
    table = parallelism_markdown([made], cpus=2).splitlines()
    assert table[0] == "| at 1000 MB, CPU of each step's process | run |"
    assert table[2:] == ["| ingest run 1 | 8.0 s |", "| ingest run 2 | 6.0 s |", "| plan step | 2.0 s |",
                         "| shard steps: how many, the longest, all | 2, 5.0 s, 9.0 s |",
                         "| merge steps: how many, the longest, all | 2, 1.0 s, 1.5 s |",
                         "| report step over the trajectories | 2.5 s |", "| report step over the exports | 1.5 s |",
                         "| longest chain of dependent steps (the longest step of each stage on it) | 17.5 s: ingest run "
                         "+ plan step + shard step + merge step + report step over the exports |",
                         "| the rest, on no chain: the CLI, the fork server, log capture | 4.5 s |",
                         "| total CPU (every process, last samples) | 35.0 s |",
                         "| **bound: total ÷ chain** | **2.00** |",
                         "| on these 2 vCPUs: CPU (tree) ÷ wall | 1.50 |",
                         "| peak PSS of the largest step | n/a |"]
    made["variants"]["run"]["largest_step_pss_mib"] = 412.4
    assert parallelism_markdown([made], cpus=2).splitlines()[-1] == "| peak PSS of the largest step | 412 MiB |"
    # one ingest run in the CLI's process: its CPU is the CLI's too, so the bound is a lower one
    steps[:2] = [step(ingest, "adhoc_1f_ingest_batches", 10.0, 1, shared=True)]
    assert parallelism(steps, 39.0)["bound"] == 2.0 and parallelism(steps, 39.0)["shared"]
    made["variants"]["run"]["parallelism"] = parallelism(steps, 39.0)
    assert "| **bound: total ÷ chain** | **2.00** or more |" in parallelism_markdown([made], cpus=2)
    # a step whose process was never sampled (it ended within one period): no bound, rather than a wrong one
    steps[-1]["cpu_s"] = None
    assert parallelism(steps, 40.0)["bound"] is None


def test_the_cpu_is_split_into_user_and_system_time_against_the_earlier_checkout():
    from bench.run import cpu_parts_markdown, measure
    split = {"run_seed": (10.0, 4.0, 1_000_000), "run": (45.0, 19.0, 4_250_000), "run@base": (48.0, 12.0, 2_350_000),
             "run_in_process": (40.0, 15.0, 2_800_000)}
    made = {"corpus": {"bytes": 1049e6}, "variants": {
        name: {"user_s": user, "system_s": system, "cpu_s": user + system, "minor_faults": faults}
        for name, (user, system, faults) in split.items()}}
    table = cpu_parts_markdown([made]).splitlines()
    assert table[0] == "| at 1049 MB | user | system | CPU (tree) | minor faults | CPU / run@base's |"
    assert table[2:] == [  # in the table's order, not the results'
        "| run_in_process | 40.0 s | 15.0 s | 55.0 s | 2.80 M | 0.92 |",
        "| run | 45.0 s | 19.0 s | 64.0 s | 4.25 M | 1.07 |",
        "| run@base | 48.0 s | 12.0 s | 60.0 s | 2.35 M | 1.00 |",
        "| run_seed | 10.0 s | 4.0 s | 14.0 s | 1.00 M | 0.23 |"]
    del made["variants"]["run@base"]
    assert cpu_parts_markdown([made]).splitlines()[2] == "| run_in_process | 40.0 s | 15.0 s | 55.0 s | 2.80 M |  |"
    # the figures are the measured tree's: a child that fills fresh memory and spins shows in both
    child = "import os; b = b'x' * (64 << 20); t = os.times().user\nwhile os.times().user - t < 0.3: pass"
    measured = measure([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"])
    assert measured["user_s"] >= 0.3 and measured["minor_faults"] > (64 << 20) // 4096
    assert measured["cpu_s"] == measured["user_s"] + measured["system_s"]
