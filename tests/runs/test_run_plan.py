"""How batches are grouped into runs: contiguous partition ranges, as many as the work needs
and at least one per run slot."""

import shutil

import dagster as dg
import pytest

from tests.conftest import PROJECT_ROOT
from trajectory_assets.runs.run_plan import BATCHES_PER_RUN, BATCHES_TAG, batch_run_tags, group_batches, run_slots


def test_a_burst_of_batches_is_split_into_one_range_per_run_slot():
    order = [f"b{i:02d}" for i in range(47)]
    groups = group_batches(order, order, runs=2)
    assert [len(group) for group in groups] == [24, 23]
    assert [key for group in groups for key in group] == order  # every batch once, in the instance's order


def test_ranges_never_span_a_batch_that_is_not_wanted():
    order = ["a", "b", "c", "d", "e", "f"]
    # c is not to be run (unchanged): a range a..d would re-run it
    assert group_batches(order, {"a", "b", "d", "e", "f"}, runs=1) == [["a", "b"], ["d", "e", "f"]]
    assert group_batches(order, {"f", "a"}, runs=4) == [["a"], ["f"]]
    assert group_batches(order, set(), runs=2) == []


def test_no_run_takes_more_than_the_cap():
    order = [f"b{i:04d}" for i in range(3 * BATCHES_PER_RUN + 1)]
    groups = group_batches(order, order, runs=1)
    assert max(len(group) for group in groups) == BATCHES_PER_RUN and sum(map(len, groups)) == len(order)


def test_run_tags_name_the_partition_or_range_and_every_batch():
    assert batch_run_tags(["a"]) == {"dagster/partition": "a", BATCHES_TAG: "a"}
    assert batch_run_tags(["a", "b", "c"]) == {"dagster/asset_partition_range_start": "a",
                                               "dagster/asset_partition_range_end": "c", BATCHES_TAG: "a,b,c"}


@pytest.mark.parametrize("limit, slots", [(3, 3), (-1, None)])
def test_run_slots_follow_the_instance_run_queue(tmp_path, limit, slots):
    import os

    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", tmp_path / "dagster.yaml")
    text = (tmp_path / "dagster.yaml").read_text().replace("max_concurrent_runs: 2", f"max_concurrent_runs: {limit}")
    (tmp_path / "dagster.yaml").write_text(text)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert run_slots(instance) == (slots or os.cpu_count())


def test_the_project_instance_runs_one_run_per_core_of_this_machine(temporary_instance):
    from trajectory_assets.dagster_internals import pool_default_limit

    with dg.DagsterInstance.from_config(str(temporary_instance)) as instance:  # the project's dagster.yaml
        assert run_slots(instance) == 2
        assert pool_default_limit(instance) == 4


def test_a_storage_step_waits_for_a_slot_of_the_storage_pool(tmp_path, temporary_instance):
    """The steps that read or write the storage (here the ingest step) take a slot of the
    trajectory_storage pool, which dagster.yaml sizes (4): with every slot held by other runs
    the step waits, and it runs once one is freed."""
    import threading
    import time

    from tests.conftest import SAMPLE
    from trajectory_assets.definitions import INGEST_JOB, RunSettings, build_definitions
    from trajectory_assets.dagster_internals import hold_pool_slot, pool_slots
    from trajectory_assets.defs.retries import STORAGE_POOL, initialize_storage_pool
    from trajectory_assets.runs.runner import sync_batches
    from trajectory_assets.io.source_files import batch_key, discover
    from trajectory_assets.sources import INPUTS_SUFFIXES

    defs = build_definitions(RunSettings(sources=[str(SAMPLE)], storage=str(tmp_path)))
    batches = sorted({batch_key(s.source_id) for s in discover([str(SAMPLE)], INPUTS_SUFFIXES)})
    with dg.DagsterInstance.from_config(str(temporary_instance)) as instance:
        initialize_storage_pool(instance)
        holders = [(f"another-run-{n}", "a_step") for n in range(pool_slots(instance, STORAGE_POOL)[0])]
        assert len(holders) == 4
        for run_id, step in holders:
            hold_pool_slot(instance, STORAGE_POOL, run_id, step)
        sync_batches(instance, batches)
        results = []
        run = threading.Thread(target=lambda: results.append(defs.resolve_job_def(INGEST_JOB).execute_in_process(
            instance=instance, tags=batch_run_tags(batches))))
        run.start()
        deadline = time.monotonic() + 120
        while pool_slots(instance, STORAGE_POOL)[2] == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pool_slots(instance, STORAGE_POOL)[2] == 1 and not results  # waiting
        assert not (tmp_path / "raw").exists()  # nothing written while it waits
        hold_pool_slot(instance, STORAGE_POOL, *holders[0], held=False)
        run.join(timeout=300)
        assert results and results[0].success
        assert (tmp_path / "trajectories" / "batches").is_dir()
        assert pool_slots(instance, STORAGE_POOL)[1] == 3  # its slot is free again
