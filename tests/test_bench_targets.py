"""The benchmark's verdict on the performance targets (bench/run.py), on made-up results."""

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
    table = targets_markdown([result(250, recipe=5.0, run=20.0, run_seed=10.0, floor=0.5, pss=900.0),
                              result(1000, recipe=20.0, run=18.0, run_seed=17.0, floor=2.0, pss=1100.0)])
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in table.splitlines()[2:]}
    assert rows["run_seed / recipe (wall)"] == ["0.85", "≤ 0.8", "no |"]
    assert rows["run / recipe (wall)"] == ["0.90", "≤ 1.0", "yes |"]
    assert rows["run / floor (wall)"] == ["9.00", "≤ 6.0", "no |"]
    assert rows["peak PSS of the process tree, GiB"] == ["1.07", "≤ 1.0", "no |"]
    assert rows["peak PSS, largest / smallest size"] == ["1.22", "≤ 1.1", "no |"]
    assert table.startswith("| target at 1000 MB |")


def test_a_single_size_cannot_say_whether_memory_is_flat():
    table = targets_markdown([result(1000, recipe=20.0, run=18.0, run_seed=15.0, floor=3.0, pss=700.0)])
    assert "| peak PSS, largest / smallest size | n/a | ≤ 1.1 | n/a |" in table
    assert "| run / floor (wall) | 6.00 | ≤ 6.0 | yes |" in table
