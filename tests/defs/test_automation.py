"""The batch sensor: registers new files as partitions, re-runs changed ones, never twice."""

import json
import os
import time

import dagster as dg

from tests.conftest import make_rollout, write_jsonl
from trajectory_assets import layout
from trajectory_assets.definitions import RunSettings, build_definitions
from trajectory_assets.defs.automation import plan_batches
from trajectory_assets.runs.run_plan import BATCHES_TAG, INGEST_JOB, batch_run_tags
from trajectory_assets.io.source_files import batch_key, discover


def test_plan_batches_splits_new_changed_and_gone():
    previous = {"a": "1", "b": "1", "c": "1"}
    current = {"a": "1", "b": "2", "d": "1"}
    assert plan_batches(current, previous) == (["d"], ["b"], ["c"])


def evaluate(defs, instance, cursor=None):
    sensor = defs.resolve_sensor_def("rollout_batch_sensor")
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs, resources=defs.resources) as context:
        result = sensor.evaluate_tick(context)  # what the daemon makes of a tick
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return result


def ingest(defs, instance, result) -> None:
    """Executes the ingest runs a tick requested, as the daemon would launch them."""
    for request in result.run_requests:
        assert request.job_name == INGEST_JOB
        done = defs.resolve_job_def(INGEST_JOB).execute_in_process(
            instance=instance, tags=batch_run_tags(request.tags[BATCHES_TAG].split(",")))
        assert done.success


def as_the_ui(monkeypatch, source, storage) -> None:
    """The UI's dataset on these sources and storage: a CLI call on them is that dataset
    (unprefixed), as a user's `make run` then `make ui` are (docs/datasets.md)."""
    monkeypatch.setenv("TRAJECTORY_SOURCE", str(source))
    monkeypatch.setenv("TRAJECTORY_STORAGE", str(storage))


def touch(path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_sensor_registers_new_files_reruns_changed_ones_and_drops_deleted(tmp_path):
    source = tmp_path / "in"
    first = write_jsonl(source / "a.jsonl", [make_rollout()])
    defs = build_definitions(RunSettings(sources=[str(source)], storage=str(tmp_path / "out")))
    key_a = batch_key("in/a.jsonl")
    with dg.instance_for_test() as instance:
        tick = evaluate(defs, instance)
        assert [r.partition_key for r in tick.run_requests] == [key_a]
        assert instance.get_dynamic_partitions(layout.BATCH_PARTITIONS) == [key_a]
        ingest(defs, instance, tick)

        # nothing changed: nothing to do (the cursor remembers every file's fingerprint)
        again = evaluate(defs, instance, tick.cursor)
        assert not again.run_requests and "no new or changed" in again.skip_message

        # a new file is registered and run on its own
        write_jsonl(source / "sub" / "b.jsonl", [make_rollout(request_input="other")])
        tick2 = evaluate(defs, instance, tick.cursor)
        key_b = batch_key("in/sub/b.jsonl")
        assert [r.partition_key for r in tick2.run_requests] == [key_b]
        ingest(defs, instance, tick2)

        # a touched file whose bytes did not change is not run again (its recorded data version matches)
        touch(first)
        touched = evaluate(defs, instance, tick2.cursor)
        assert not touched.run_requests and touched.cursor != tick2.cursor  # fingerprint noted, nothing run
        tick2 = touched

        # a changed file is re-run under a new run key
        write_jsonl(first, [make_rollout(), make_rollout(request_input="more")])
        touch(first)
        tick3 = evaluate(defs, instance, tick2.cursor)
        (rerun,) = tick3.run_requests
        assert rerun.partition_key == key_a and rerun.run_key != tick.run_requests[0].run_key

        # a deleted file's batch is removed, and the datasets are rebuilt without it
        first.unlink()
        (refresh,) = evaluate(defs, instance, tick3.cursor).run_requests
        assert refresh.job_name == "build_training_datasets" and refresh.partition_key is None
        assert instance.get_dynamic_partitions(layout.BATCH_PARTITIONS) == [key_b]
        assert json.loads(tick3.cursor).keys() == {key_a, key_b}


def test_a_tick_that_requests_runs_gives_the_storage_pool_its_default_limit_first(tmp_path):
    """The runs of a tick may start together: the pool gets its limit before they claim it
    (see ``initialize_storage_pool``)."""
    from trajectory_assets.dagster_internals import pool_limits
    from trajectory_assets.defs.retries import STORAGE_POOL

    write_jsonl(tmp_path / "in" / "a.jsonl", [make_rollout()])
    defs = build_definitions(RunSettings(sources=[str(tmp_path / "in")], storage=str(tmp_path / "out")))
    with dg.instance_for_test(overrides={"concurrency": {"pools": {"default_limit": 4}}}) as instance:
        assert STORAGE_POOL not in pool_limits(instance)
        assert evaluate(defs, instance).run_requests
        assert pool_limits(instance)[STORAGE_POOL] == (4, True)  # (the limit, from the default)


def test_a_file_that_becomes_unreadable_is_rerun_not_a_sensor_error(tmp_path):
    target = write_jsonl(tmp_path / "data" / "a.jsonl", [make_rollout()])
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.jsonl").symlink_to(target)
    defs = build_definitions(RunSettings(sources=[str(source)], storage=str(tmp_path / "out")))
    with dg.instance_for_test() as instance:
        tick = evaluate(defs, instance)
        (first,) = tick.run_requests
        ingest(defs, instance, tick)
        target.unlink()  # the link now points nowhere
        (rerun,) = evaluate(defs, instance, tick.cursor).run_requests
        assert rerun.partition_key == first.partition_key and rerun.run_key != first.run_key


def test_sensor_skips_with_a_reason_when_the_source_is_missing(tmp_path):
    defs = build_definitions(RunSettings(sources=[str(tmp_path / "missing")], storage=str(tmp_path / "out")))
    with dg.instance_for_test() as instance:
        result = evaluate(defs, instance)
    assert not result.run_requests and "does not exist" in result.skip_message


def test_adding_a_batch_changes_only_what_depends_on_it(tmp_path):
    """Re-running with one more file: earlier batches' files are untouched, exports grow."""
    from trajectory_assets.cli import main

    source = tmp_path / "in"
    write_jsonl(source / "a.jsonl", [make_rollout()])
    assert main(["run", "--source", str(source), "--storage", str(tmp_path / "out")]) == 0
    batch_a = tmp_path / "out" / "trajectories" / "batches" / f"{batch_key('in/a.jsonl')}.parquet"
    before = batch_a.read_bytes()
    time.sleep(0.01)
    write_jsonl(source / "b.jsonl", [make_rollout(request_input="other")])
    assert main(["run", "--source", str(source), "--storage", str(tmp_path / "out")]) == 0
    assert batch_a.read_bytes() == before
    manifest = json.loads((tmp_path / "out" / "exports" / "sft" / "manifest.json").read_text())
    assert len(manifest["batches"]) == 2 and sum(manifest["rows"].values()) == 2


def test_a_batch_reruns_when_its_materialized_inputs_change(tmp_path):
    source = tmp_path / "in"
    write_jsonl(source / "a.jsonl", [make_rollout(_ng_task_index=0, _ng_rollout_index=0)])
    inputs = write_jsonl(source / "a_materialized_inputs.jsonl",
                         [{"_ng_task_index": 0, "_ng_rollout_index": 0, "expected_answer": "1"}])
    defs = build_definitions(RunSettings(sources=[str(source)], storage=str(tmp_path / "out")))
    with dg.instance_for_test() as instance:
        tick = evaluate(defs, instance)
        (first,) = tick.run_requests  # one batch: the inputs are its side file
        ingest(defs, instance, tick)
        write_jsonl(inputs, [{"_ng_task_index": 0, "_ng_rollout_index": 0, "expected_answer": "2"}])
        touch(inputs)
        (rerun,) = evaluate(defs, instance, tick.cursor).run_requests
        assert rerun.partition_key == first.partition_key and rerun.run_key != first.run_key


def test_a_burst_of_new_files_is_ingested_in_partition_ranges_that_follow_the_work(tmp_path):
    """47 files landing at once become runs of about ``SECONDS_PER_RUN`` of estimated work,
    never fewer than may run at once (here two), each a range of partitions that Dagster
    resolves to exactly its batches."""
    from trajectory_assets.dagster_internals import partition_keys_in_range
    from trajectory_assets.defs.ingest import ingest_batches
    from trajectory_assets.runs.run_plan import ingest_runs

    rollout_batches = ingest_batches.partitions_def

    source = tmp_path / "in"
    for i in range(47):
        write_jsonl(source / f"f{i:02d}.jsonl", [make_rollout(request_input=f"task {i}")])
    defs = build_definitions(RunSettings(sources=[str(source)], storage=str(tmp_path / "out")))
    with dg.instance_for_test(overrides={"concurrency": {"runs": {"max_concurrent_runs": 2}},
                                         "run_coordinator": {"module": "dagster.core.run_coordinator",
                                                             "class": "QueuedRunCoordinator"}}) as instance:
        tick = evaluate(defs, instance)
        # 47 batches of one record: about 47 x 0.05 s = 2.35 s of estimated work, three runs
        assert len(tick.run_requests) == 3 == ingest_runs(47, 0, slots=2)
        covered = []
        for request in tick.run_requests:
            assert request.job_name == "ingest_rollout_batch" and request.partition_key is None
            keys = partition_keys_in_range(rollout_batches, instance, request.partition_key_range)
            assert keys == request.tags[BATCHES_TAG].split(",")
            covered += keys
        assert sorted(covered) == sorted(instance.get_dynamic_partitions(layout.BATCH_PARTITIONS))
        assert len(covered) == 47 and len({r.run_key for r in tick.run_requests}) == 3

        # one changed file among unchanged ones: a run of that batch alone
        changed = source / "f20.jsonl"
        write_jsonl(changed, [make_rollout(request_input="task 20, again")])
        touch(changed)
        (rerun,) = evaluate(defs, instance, tick.cursor).run_requests
        assert rerun.partition_key == batch_key("in/f20.jsonl") and rerun.tags[BATCHES_TAG] == rerun.partition_key


def test_a_cli_run_leaves_the_sensor_and_the_automation_nothing_to_do(tmp_path, monkeypatch):
    """Opening the UI on what the CLI built does no work twice: a sensor tick (with no cursor
    yet) and an automation tick on the same files request no run. A changed file then
    requests exactly its batch, and once that is ingested, the datasets."""
    from trajectory_assets.cli import main

    source, storage = tmp_path / "in", tmp_path / "out"
    for name in ("a", "b", "c"):
        write_jsonl(source / f"{name}.jsonl", [make_rollout(request_input=f"task {name}")])
    as_the_ui(monkeypatch, source, storage)
    assert main(["run", "--source", str(source), "--storage", str(storage)]) == 0
    defs = build_definitions(RunSettings(sources=[str(source)], storage=str(storage)))
    with dg.DagsterInstance.get() as instance:  # the CLI's: this test's own (conftest)
        runs_before = len(instance.get_run_records())
        for path in source.iterdir():
            touch(path)  # as a copy to another machine would: new times, the same bytes
        tick = evaluate(defs, instance)
        assert tick.run_requests == [] and not tick.dynamic_partitions_requests
        automation = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert automation.total_requested == 0
        automation = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=automation.cursor)
        assert automation.total_requested == 0
        # a batch ingested again from the same bytes (a manual re-run): its data version is the same
        assert defs.resolve_job_def(INGEST_JOB).execute_in_process(
            instance=instance, tags=batch_run_tags([batch_key("in/a.jsonl")])).success
        automation = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=automation.cursor)
        assert automation.total_requested == 0

        write_jsonl(source / "b.jsonl", [make_rollout(request_input="task b"), make_rollout(request_input="more")])
        touch(source / "b.jsonl")
        changed = evaluate(defs, instance, tick.cursor)
        assert [request.tags[BATCHES_TAG] for request in changed.run_requests] == [batch_key("in/b.jsonl")]
        ingest(defs, instance, changed)
        automation = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=automation.cursor)
        from trajectory_assets.exports.registry import EXPORTS

        datasets = [export.asset_name for export in EXPORTS] + ["stats_report"]
        assert [name for name in datasets if automation.get_num_requested(dg.AssetKey(name)) != 1] == []
        assert automation.total_requested == len(datasets)
        assert len(instance.get_run_records()) == runs_before + 2  # the re-run and the changed batch's run


def test_a_batch_nothing_can_be_read_from_fails_its_check_and_the_datasets_are_not_rebuilt(tmp_path, monkeypatch):
    """Issue 41, item 7, on the sensor path: a file of JSON lines of an unknown shape added to a
    watched folder is ingested as its own batch; its ``source_recognised`` check fails and the
    automation rebuilds no dataset from it (the stored exports stay)."""
    from trajectory_assets.cli import main

    source, storage = tmp_path / "in", tmp_path / "out"
    write_jsonl(source / "a.jsonl", [make_rollout(request_input="task a")])
    as_the_ui(monkeypatch, source, storage)
    assert main(["run", "--source", str(source), "--storage", str(storage)]) == 0
    sft_before = (storage / "exports" / "sft" / "manifest.json").read_bytes()
    defs = build_definitions(RunSettings(sources=[str(source)], storage=str(storage)))
    with dg.DagsterInstance.get() as instance:
        automation = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert automation.total_requested == 0
        write_jsonl(source / "events.jsonl", [{"event": "login", "user": 1}])
        tick = evaluate(defs, instance)
        key = batch_key("in/events.jsonl")
        assert [request.tags[BATCHES_TAG] for request in tick.run_requests] == [key]
        run = defs.resolve_job_def(INGEST_JOB).execute_in_process(instance=instance, tags=batch_run_tags([key]))
        assert run.success  # a stray file fails no run: its check says it
        evaluations = [event.event_specific_data for event in run.all_events
                       if event.event_type_value == "ASSET_CHECK_EVALUATION"
                       and event.event_specific_data.check_name == "source_recognised"]
        assert [(e.partition, e.passed) for e in evaluations] == [(key, False)]
        assert "the formats tried" in evaluations[0].description
        automation = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=automation.cursor)
        assert automation.total_requested == 0
    assert (storage / "exports" / "sft" / "manifest.json").read_bytes() == sft_before
