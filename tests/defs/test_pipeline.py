"""End to end through Dagster: materialize the whole graph on fixtures, checks included."""

import dataclasses
import json

import dagster as dg
import pytest

from tests.conftest import SAMPLE, make_rollout, message_item, write_jsonl
from trajectory_assets.definitions import INGEST_JOB, MAIN_JOB, RunSettings, build_definitions
from trajectory_assets.exports.registry import EXPORTS, EXPORTS_BY_NAME
from trajectory_assets.runs.run_plan import batch_run_tags
from trajectory_assets.runs.runner import sync_batches
from trajectory_assets.io.source_files import batch_key, discover
from trajectory_assets.sources import INPUTS_SUFFIXES
from trajectory_assets.io.storage import Storage


@dataclasses.dataclass
class PipelineResult:
    results: list  # the ingest run (every batch, one partition range), then the datasets run if it succeeded

    @property
    def success(self) -> bool:
        return len(self.results) == 2 and all(result.success for result in self.results)


def run_job(sources, storage, config_file=None):
    """The two jobs in-process, as the CLI and the sensor run them: one ingest run over every
    batch, then the datasets job."""
    defs = build_definitions(RunSettings(sources=[str(s) for s in sources], storage=str(storage), config_file=config_file))
    batches = sorted({batch_key(s.source_id) for s in discover([str(s) for s in sources], INPUTS_SUFFIXES)})
    with dg.instance_for_test() as instance:
        sync_batches(instance, batches)
        run = PipelineResult([defs.resolve_job_def(INGEST_JOB).execute_in_process(
            instance=instance, tags=batch_run_tags(batches), raise_on_error=False)])
        if run.results[0].success:
            run.results.append(defs.resolve_job_def(MAIN_JOB).execute_in_process(instance=instance,
                                                                                raise_on_error=False))
        events = [e for result in run.results for e in result.all_events]
        checks = {}
        for e in events:
            if e.event_type_value == "ASSET_CHECK_EVALUATION":
                data = e.asset_check_evaluation_data
                key = (data.asset_key.to_user_string(), data.check_name)
                checks[key] = checks.get(key, True) and data.passed
        materialized = {
            e.asset_key.to_user_string() for result in run.results for e in result.get_asset_materialization_events()
        }
    return run, checks, materialized, events


def test_sample_materializes_every_asset_with_every_check_passing(tmp_path):
    run, checks, materialized, events = run_job([SAMPLE], tmp_path)
    assert run.success
    batch_partitions = {e.event_specific_data.materialization.partition for e in events
                        if e.event_type_value == "ASSET_MATERIALIZATION" and e.asset_key.to_user_string() == "raw_rollouts"}
    assert len(batch_partitions) == 3  # one partition per sample file, all three in one run
    exports = [export.asset_name for export in EXPORTS]
    assert set(exports) == {f"{name}_dataset" for name in (
        "sft", "dpo", "grpo", "sft_hermes", "trl_sft", "trl_dpo", "trl_grpo", "verl", "llama_factory", "nemo_rl_sft",
        "nemo_rl_dpo", "on_policy_tokens", "axolotl")}
    assert materialized == {"raw_rollouts", "validated_trajectories", "quarantined_records", *exports, "stats_report"}
    expected_checks = {
        ("raw_rollouts", "raw_rollouts_contract"),
        ("validated_trajectories", "nothing_lost"),
        ("validated_trajectories", "trajectory_contract"),
        ("validated_trajectories", "source_recognised"),
        ("quarantined_records", "quarantine_contract"),
        *((asset, check) for asset in exports for check in ("contract", "no_split_leak", "token_budget")),
        *((export.asset_name, "arrow_schema") for export in EXPORTS if export.file_format == "jsonl"),
        ("dpo_dataset", "dpo_margin"),
        ("trl_dpo_dataset", "dpo_margin"),
        ("nemo_rl_dpo_dataset", "dpo_margin"),
    }
    assert checks == {check: True for check in expected_checks}
    stats = json.loads((tmp_path / "reports" / "stats.json").read_text())
    assert stats["records_read"] == stats["records_valid"] + stats["records_rejected"] == 14
    for export in EXPORTS:
        assert sum(stats["exports"][export.name].values()) > 0, f"the bundled sample must yield {export.name} rows"
        # the report read every export's summary: no row index is written beside the files
        assert (tmp_path / "summaries" / f"{export.name}.json").exists(), export.name
    assert not (tmp_path / "indexes").exists()


def test_a_datasets_run_over_unchanged_batches_reuses_every_shard_and_writes_the_same_exports(tmp_path):
    """The code versions the plan step hands the fingerprints are stable between runs: a
    second datasets run over the same batches renders no shard, and every file is the same."""
    defs = build_definitions(RunSettings(sources=[str(SAMPLE)], storage=str(tmp_path)))
    batches = sorted({batch_key(s.source_id) for s in discover([str(SAMPLE)], INPUTS_SUFFIXES)})
    with dg.instance_for_test() as instance:
        sync_batches(instance, batches)
        assert defs.resolve_job_def(INGEST_JOB).execute_in_process(instance=instance, tags=batch_run_tags(batches)).success
        datasets = defs.resolve_job_def(MAIN_JOB)
        assert datasets.execute_in_process(instance=instance).success
        first = {path: path.read_bytes() for path in sorted((tmp_path / "exports").rglob("*")) if path.is_file()}
        again = datasets.execute_in_process(instance=instance)
    assert again.success
    shards = again.output_for_node("exports.render_shard")  # each shard step's result, by mapping key
    assert shards and all(sorted(shard["reused"]) == sorted(export.name for export in EXPORTS)
                          for shard in shards.values())
    assert {path: path.read_bytes() for path in sorted((tmp_path / "exports").rglob("*")) if path.is_file()} == first


def test_materialization_metadata_carries_counts_uris_and_data_versions(tmp_path):
    _, _, _, events = run_job([SAMPLE], tmp_path)
    materializations = [e.event_specific_data.materialization for e in events if e.event_type_value == "ASSET_MATERIALIZATION"]
    by_key = {}
    for m in materializations:
        by_key.setdefault(m.asset_key.to_user_string(), []).append(m)
    trajectories = by_key["validated_trajectories"]
    assert sorted(m.partition for m in trajectories) == sorted(
        batch_key(s.source_id) for s in discover([str(SAMPLE)], INPUTS_SUFFIXES)
    )
    assert sum(m.metadata["dagster/row_count"].value for m in trajectories) == 12
    weather = next(m for m in trajectories if m.partition.startswith("rollouts_weather"))
    assert weather.metadata["dagster/uri"].value == str(tmp_path / "trajectories" / "batches" / f"{weather.partition}.parquet")
    # a batch's data version is the SHA-256 of its file, combined with its materialized inputs'
    from trajectory_assets.io.source_files import data_version

    raw = next(m for m in by_key["raw_rollouts"] if m.partition == weather.partition)
    assert raw.tags["dagster/data_version"] == data_version(raw.metadata["sha256"].value,
                                                            raw.metadata["inputs_sha256"].value)
    legacy = next(m for m in by_key["raw_rollouts"] if m.partition.startswith("rollouts_legacy"))
    assert legacy.tags["dagster/data_version"] == legacy.metadata["sha256"].value  # no side file
    lineage = by_key["dpo_dataset"][0].metadata["dagster/column_lineage"].value
    assert [dep.column_name for dep in lineage.deps_by_column["chosen_id"]] == ["trajectory_id"]
    report = by_key["stats_report"][0]
    assert "Trajectory statistics" in report.metadata["report"].value
    assert "data:image/png;base64," in report.metadata["report"].value


def test_the_report_sums_up_the_trajectories_beside_the_export_phase_and_writes_after_the_merges(tmp_path,
                                                                                                   monkeypatch):
    """The report's step over the trajectories needs only the batches: with the export phase
    failing at its first step, it still runs (in a run of forked steps it starts beside the
    plan) and keeps its part in the run's staging folder. Its step over the exports waits for
    every merge, so it does not run, and no report is written."""
    from trajectory_assets.defs import exports as export_defs

    def failing_plan(*args, **kwargs):
        raise dg.Failure(description="no plan this time", allow_retries=False)

    monkeypatch.setattr(export_defs, "plan_exports", failing_plan)
    run, _, materialized, _ = run_job([SAMPLE], tmp_path)
    datasets = run.results[1]
    assert not datasets.success
    ended = {event.step_key: event.event_type_value for event in datasets.all_events
             if event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE")}
    assert ended == {"exports.plan_exports": "STEP_FAILURE", "stats_report.report_trajectories": "STEP_SUCCESS"}
    assert "stats_report" not in materialized and not (tmp_path / "reports").exists()
    assert (tmp_path / "staging" / datasets.run_id / "report" / "part.json").exists()


def test_the_report_materialized_alone_runs_its_two_steps_and_writes_the_same_report(tmp_path):
    """What the UI's Materialize of the report alone runs (the implicit asset job, one asset
    selected): both its steps, the second reading the first's part, over the exports in the storage."""
    defs = build_definitions(RunSettings(sources=[str(SAMPLE)], storage=str(tmp_path)))
    batches = sorted({batch_key(s.source_id) for s in discover([str(SAMPLE)], INPUTS_SUFFIXES)})
    with dg.instance_for_test() as instance:
        sync_batches(instance, batches)
        assert defs.resolve_job_def(INGEST_JOB).execute_in_process(instance=instance, tags=batch_run_tags(batches)).success
        assert defs.resolve_job_def(MAIN_JOB).execute_in_process(instance=instance).success
        built = {path: path.read_bytes() for path in sorted((tmp_path / "reports").rglob("*")) if path.is_file()}
        alone = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, asset_selection=[dg.AssetKey("stats_report")])
    assert alone.success
    assert {event.step_key for event in alone.all_events if event.event_type_value == "STEP_SUCCESS"} == {
        "stats_report.report_trajectories", "stats_report.report_exports"}
    assert [event.asset_key for event in alone.get_asset_materialization_events()] == [dg.AssetKey("stats_report")]
    assert {path: path.read_bytes() for path in sorted((tmp_path / "reports").rglob("*")) if path.is_file()} == built


def test_a_plan_step_keeps_the_staging_folders_of_the_runs_its_run_re_executes(tmp_path):
    """A re-execution from failure loads what its ancestors' steps kept in their staging
    folders (the report's part over the trajectories, made beside a plan step that failed):
    the plan step removes the folders of finished runs, never those of its own run's
    ancestors, nor of a run still going."""
    import uuid

    from trajectory_assets import layout
    from trajectory_assets.defs.staging import STAGING, remove_finished_runs

    store = Storage(str(tmp_path))
    lineage = [("first", None, dg.DagsterRunStatus.FAILURE), ("retry", "first", dg.DagsterRunStatus.FAILURE),
               ("again", "retry", dg.DagsterRunStatus.STARTED), ("other", None, dg.DagsterRunStatus.FAILURE),
               ("going", None, dg.DagsterRunStatus.STARTED)]
    ids: dict[str, str] = {}
    with dg.instance_for_test() as instance:
        for name, parent, status in lineage:
            ids[name] = str(uuid.uuid4())
            instance.add_run(dg.DagsterRun(job_name="datasets", run_id=ids[name], status=status,
                                           parent_run_id=ids.get(parent), root_run_id=ids["first"] if parent else None))
            store.write_bytes(layout.staging_value(ids[name], "step", "result"), b"{}")
        removed = remove_finished_runs(store, instance, ids["again"])
    assert removed == [ids["other"]]
    assert sorted(store.folder_names(STAGING)) == sorted(ids[name] for name in ("first", "retry", "again", "going"))


def test_contract_failure_blocks_the_export_and_writes_nothing(tmp_path):
    from trajectory_assets.defs import exports as export_defs
    from trajectory_assets.defs.ingest import ingest_batches
    from trajectory_assets.defs.resources import PipelineSettings, RolloutSources, TrajectoryStorage
    from trajectory_assets.defs.staging import StagingValues

    sft = EXPORTS_BY_NAME["sft"]

    def buggy_render(item):  # what a bug in the renderer could write: the model's turns lost
        row = sft.render(item)
        return {**row, "messages": [message for message in row["messages"] if message["role"] != "assistant"]}

    buggy = dataclasses.replace(sft, render=buggy_render)
    healthy = EXPORTS_BY_NAME["trl_sft"]
    buggy_sft = export_defs.build_export_assets([buggy, healthy])
    resources = {
        "sources": RolloutSources(paths=[str(SAMPLE)]),
        "storage": TrajectoryStorage(root=str(tmp_path)),
        "settings": PipelineSettings(),
        "staging": StagingValues(root=str(tmp_path)),
    }
    with dg.instance_for_test() as instance:
        (source, *_) = discover([str(SAMPLE)], INPUTS_SUFFIXES)
        sync_batches(instance, [batch_key(source.source_id)])
        dg.materialize([ingest_batches], instance=instance, resources=resources,
                       partition_key=batch_key(source.source_id))
        result = dg.materialize([buggy_sft], instance=instance, resources=resources, raise_on_error=False,
                                selection=[buggy_sft])
    assert not result.success
    failed = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
              and not e.asset_check_evaluation_data.passed]
    assert [(e.asset_check_evaluation_data.asset_key.to_user_string(), e.asset_check_evaluation_data.check_name)
            for e in failed] == [
        ("sft_dataset", "contract")]
    assert not list((tmp_path / "exports" / "sft").glob("*"))  # not even a temporary file is left
    # the family's other export passed its checks and is written, manifest last
    assert (tmp_path / "exports" / "trl_sft" / "manifest.json").exists()
    assert {e.asset_key.to_user_string() for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"
            } == {"trl_sft_dataset"}


def test_a_prompt_in_both_splits_blocks_the_export_and_writes_nothing(tmp_path, monkeypatch):
    """The split follows the prompt, so a leak is a bug: made here by a split rule that
    alternates, read one row per chunk so that rollouts of one prompt meet it twice."""
    import itertools

    from trajectory_assets.defs import exports as export_defs
    from trajectory_assets.exports.families import frames
    from trajectory_assets.defs.ingest import ingest_batches
    from trajectory_assets.defs.resources import PipelineSettings, RolloutSources, TrajectoryStorage
    from trajectory_assets.defs.staging import StagingValues
    from trajectory_assets.io import trajectory_table

    splits = itertools.cycle(frames.SPLITS)
    monkeypatch.setattr(frames, "split_of", lambda prompt_key, config: next(splits))
    monkeypatch.setattr(trajectory_table, "CHUNK_ROWS", 1)
    resources = {"sources": RolloutSources(paths=[str(SAMPLE)]), "storage": TrajectoryStorage(root=str(tmp_path)),
                 "settings": PipelineSettings(), "staging": StagingValues(root=str(tmp_path))}
    sft = export_defs.build_export_assets([EXPORTS_BY_NAME["sft"]])
    with dg.instance_for_test() as instance:
        keys = sorted({batch_key(s.source_id) for s in discover([str(SAMPLE)], INPUTS_SUFFIXES)})
        sync_batches(instance, keys)
        for key in keys:
            dg.materialize([ingest_batches], instance=instance, resources=resources, partition_key=key)
        result = dg.materialize([sft], instance=instance, resources=resources, raise_on_error=False)
    assert not result.success
    (leak,) = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
               and e.asset_check_evaluation_data.check_name == "no_split_leak"]
    assert not leak.passed and leak.metadata["leaked_prompts"].value > 0
    assert not list((tmp_path / "exports" / "sft").glob("*"))


def test_bad_records_never_abort_the_run(tmp_path):
    source = write_jsonl(tmp_path / "in" / "x.jsonl", ["garbage", make_rollout([message_item("ok")]), "{}", "[]"])
    run, checks, _, _ = run_job([source], tmp_path / "out")
    assert run.success and all(checks.values())
    quarantine = (tmp_path / "out" / "quarantine" / "rejected.jsonl").read_text().splitlines()
    assert [json.loads(line)["reason"] for line in quarantine] == ["invalid_json", "not_a_rollout", "not_an_object"]


def test_invalid_config_fails_with_a_clear_message(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("sft:\n  min_reward: high\n")
    run, _, _, events = run_job([SAMPLE], tmp_path / "out", config_file=str(config))
    assert not run.success
    failure = next(e for e in events if e.is_step_failure)
    assert "sft.min_reward" in str(failure.step_failure_data.user_failure_data or failure.step_failure_data.error)


def test_an_invalid_config_fails_each_datasets_step_once_without_retries(tmp_path):
    """Batches ingested with a good config, then the config broken: every export step fails at
    once, naming the setting (the report, downstream, does not run); no step is retried (the
    same file would fail again)."""
    batches = sorted({batch_key(s.source_id) for s in discover([str(SAMPLE)], INPUTS_SUFFIXES)})
    config = tmp_path / "c.yaml"
    config.write_text("sft:\n  min_reward: high\n")
    settings = RunSettings(sources=[str(SAMPLE)], storage=str(tmp_path / "out"))
    with dg.instance_for_test() as instance:
        sync_batches(instance, batches)
        ingest = build_definitions(settings).resolve_job_def(INGEST_JOB).execute_in_process(
            instance=instance, tags=batch_run_tags(batches), raise_on_error=False)
        assert ingest.success
        broken = dataclasses.replace(settings, config_file=str(config))
        result = build_definitions(broken).resolve_job_def(MAIN_JOB).execute_in_process(
            instance=instance, raise_on_error=False)
    assert not result.success
    assert [e.step_key for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"] == []
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures and all("sft.min_reward" in e.step_failure_data.user_failure_data.description for e in failures)


@pytest.mark.parametrize("fraction, expected", [(0.0, {"validation": 0}), (1.0, {"train": 0})])
def test_split_fraction_from_config(tmp_path, fraction, expected):
    config = tmp_path / "c.yaml"
    config.write_text(f"split:\n  validation_fraction: {fraction}\n")
    run, _, _, _ = run_job([SAMPLE], tmp_path / "out", config_file=str(config))
    assert run.success
    manifest = json.loads((tmp_path / "out" / "exports" / "sft" / "manifest.json").read_text())
    assert {k: manifest["rows"][k] for k in expected} == expected


def test_a_tokenizer_measures_every_export_and_enforces_each_family_budget(tmp_path):
    from tests.fixtures.tokenizer import save_word_tokenizer

    tokenizer = save_word_tokenizer(tmp_path / "tokenizer")
    config = tmp_path / "c.yaml"
    config.write_text(f"tokenizer: {tokenizer}\nsft:\n  max_tokens: 40\n  over_token_budget: truncate\n"
                      "dpo:\n  max_tokens: 60\ngrpo:\n  max_tokens: 30\n")
    run, checks, _, _ = run_job([SAMPLE], tmp_path / "out", config_file=str(config))
    assert run.success and all(checks.values())
    assert {check for (_, check) in checks} >= {"token_budget"}
    for export in EXPORTS:
        manifest = json.loads((tmp_path / "out" / "exports" / export.name / "manifest.json").read_text())
        budget, tokens = manifest["token_budget"], manifest["distributions"]["tokens"]
        assert budget["tokenizer"] == tokenizer and budget["max_tokens"] == {"sft": 40, "dpo": 60, "grpo": 30}[
            export.family]
        assert tokens["count"] == sum(manifest["rows"].values()) and tokens["max"] <= budget["max_tokens"]
        assert manifest["excluded"].get("over_token_budget", 0) == budget["left_out"]
        card = (tmp_path / "out" / "exports" / export.name / "README.md").read_text()
        assert f"chat template of `{tokenizer}`" in card
    sft = json.loads((tmp_path / "out" / "exports" / "trl_sft" / "manifest.json").read_text())["token_budget"]
    assert sft["truncated"] > 0  # the sample's tool runs are longer than 40 words
    stats = (tmp_path / "out" / "reports" / "stats.md").read_text()
    assert "## Token lengths per export" in stats and "| trl_sft |" in stats.split("## Token lengths per export")[1]


def test_the_token_budget_check_blocks_an_export_with_a_row_over_budget(tmp_path):
    import numpy as np
    import pandas as pd

    from tests.fixtures.tokenizer import save_word_tokenizer
    from trajectory_assets.config import PipelineConfig
    from trajectory_assets.exports.families.frames import ExportFrame
    from collections import Counter

    from trajectory_assets.exports.writer import Broken, PartWriter, finish_export
    from trajectory_assets.io.storage import Storage

    export = EXPORTS_BY_NAME["trl_grpo"]
    config = PipelineConfig.model_validate({"tokenizer": save_word_tokenizer(tmp_path / "t"),
                                            "grpo": {"max_tokens": 10}})
    store = Storage(str(tmp_path / "out"))
    writer = PartWriter(store, export, config, "run", 0)
    row = {"task_key": "a" * 24, "prompt_key": "a" * 24, "split": "train", "prompt_shape": "u", "mean_reward": 1.0,
           "value_types": "content:str", "tools_type": "NoneType", "fields": "prompt,tools"}
    record = {"prompt": [{"role": "user", "content": "q"}], "tools": None}
    writer.add(ExportFrame(pd.DataFrame([row]), [record], tokens=np.array([11.0])))  # what a renderer bug could pass
    broken = finish_export(store, export, config, [writer.close()], Counter(), [], [], "test")
    assert isinstance(broken, Broken) and broken.failed == ["token_budget"]
    (failed,) = [check for check in broken.checks if not check.passed]
    assert failed.metadata["over_budget"] == 1
    assert not (tmp_path / "out" / "exports" / "trl_grpo").exists() or not any(
        (tmp_path / "out" / "exports" / "trl_grpo").iterdir())


def ranged_ingest(tmp_path, files: dict[str, list], **execute):
    """Writes the source files, then ingests all of them in ONE run (a partition range)."""
    for name, rows in files.items():
        write_jsonl(tmp_path / "in" / name, rows)
    defs = build_definitions(RunSettings(sources=[str(tmp_path / "in")], storage=str(tmp_path / "out")))
    keys = {name: batch_key(f"in/{name}") for name in files}
    instance = dg.instance_for_test()
    instance_ = instance.__enter__()
    sync_batches(instance_, sorted(keys.values()))
    order = list(instance_.get_dynamic_partitions("rollout_batches"))
    result = defs.resolve_job_def(INGEST_JOB).execute_in_process(
        instance=instance_, tags=batch_run_tags(order), raise_on_error=False, **execute)
    return defs, instance, instance_, keys, result


def latest(instance, asset: str, partition: str):
    return instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset),
                                                                 asset_partitions=[partition]), limit=1).records[0]


def test_each_batch_of_a_ranged_run_has_its_own_data_version_lineage_and_checks(tmp_path):
    """Several batches in one run look as if each had run alone: per-partition data versions
    (the file's SHA-256), input provenance pointing at the batch's own raw materialization,
    a check evaluation per batch, and Dagster's staleness view sees every batch up to date."""
    import hashlib

    from trajectory_assets.dagster_internals import check_executions, stale_status

    files = {f"{name}.jsonl": [make_rollout([message_item(f"answer {name}")], request_input=name)]
             for name in ("a", "b", "c")}
    defs, context, instance, keys, result = ranged_ingest(tmp_path, files)
    try:
        assert result.success
        versions = set()
        for name, key in keys.items():
            raw = latest(instance, "raw_rollouts", key)
            assert raw.run_id == result.run_id  # one run for the three batches
            sha = hashlib.sha256((tmp_path / "in" / name).read_bytes()).hexdigest()
            assert raw.asset_materialization.tags["dagster/data_version"] == sha
            assert raw.asset_materialization.metadata["sha256"].value == sha
            for asset in ("validated_trajectories", "quarantined_records"):
                tags = latest(instance, asset, key).asset_materialization.tags
                # as Dagster records a partitioned input: the SHA-256 of its partitions' versions
                assert tags["dagster/input_data_version/raw_rollouts"] == hashlib.sha256(sha.encode()).hexdigest()
                assert tags["dagster/input_event_pointer/raw_rollouts"] == str(raw.storage_id)
                versions.add(tags["dagster/data_version"])
            for check in ("nothing_lost", "trajectory_contract", "quarantine_contract"):
                asset = "quarantined_records" if check == "quarantine_contract" else "validated_trajectories"
                executions = check_executions(instance, dg.AssetCheckKey(dg.AssetKey(asset), check), key)
                assert executions == [("SUCCEEDED", result.run_id)]
        assert len(versions) == 3  # one derived version per batch (its two assets share code version and input)
        for key in keys.values():
            for asset in ("raw_rollouts", "validated_trajectories", "quarantined_records"):
                assert stale_status(instance, defs, dg.AssetKey(asset), key) == "FRESH"
    finally:
        context.__exit__(None, None, None)


def test_a_failing_batch_does_not_stop_the_others_in_its_run(tmp_path, monkeypatch):
    import trajectory_assets.ingest.batch as batch

    real_ingest = batch.ingest

    def ingest_failing_on_b(sources, *args, **kwargs):
        if sources[0].uri.endswith("b.jsonl"):
            raise KeyError("no_such_column")
        return real_ingest(sources, *args, **kwargs)

    monkeypatch.setattr(batch, "ingest", ingest_failing_on_b)
    files = {f"{name}.jsonl": [make_rollout(request_input=name)] for name in ("a", "b", "c")}
    _, context, instance, keys, result = ranged_ingest(tmp_path, files)
    try:
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.user_failure_data
        assert failure.description == f"batch {keys['b.jsonl']}: KeyError: 'no_such_column'"
        materialized = {r.partition_key for r in instance.fetch_materializations(
            dg.AssetKey("validated_trajectories"), limit=10).records}
        assert materialized == {keys["a.jsonl"], keys["c.jsonl"]}
    finally:
        context.__exit__(None, None, None)


def test_a_retried_step_resumes_after_the_batches_it_already_reported(tmp_path, monkeypatch):
    from trajectory_assets.io.storage import Storage

    real_write_bytes = Storage.write_bytes
    failed = []

    def flaky(self, relative, data):
        if relative.startswith("raw/batches/") and "b.jsonl" in relative and not failed:
            failed.append(relative)
            raise ConnectionResetError("connection reset by peer")
        return real_write_bytes(self, relative, data)

    monkeypatch.setattr(Storage, "write_bytes", flaky)
    files = {f"{name}.jsonl": [make_rollout(request_input=name)] for name in ("a", "b", "c")}
    _, context, instance, keys, result = ranged_ingest(tmp_path, files)
    try:
        assert result.success and failed
        assert [e.step_key for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"] == ["ingest_batches"]
        records = instance.fetch_materializations(dg.AssetKey("validated_trajectories"), limit=10).records
        # a was reported by the first attempt and not ingested again; b and c by the retry
        assert sorted(r.partition_key for r in records) == sorted(keys.values())
    finally:
        context.__exit__(None, None, None)


def test_a_failed_check_is_not_retried_away_by_a_storage_fault_in_the_same_run(tmp_path, monkeypatch):
    """A batch whose blocking check failed and another hit by a storage fault: retrying would
    skip the first (already reported), so the step fails for good, naming both."""
    import trajectory_assets.defs.ingest as ingest_defs
    from trajectory_assets.io.storage import Storage

    real_check = ingest_defs._check_batch
    real_write_bytes = Storage.write_bytes

    def nothing_lost_fails_on_a(keys, key, store, checks, summary, counts):
        results = real_check(keys, key, store, checks, summary, counts)
        if "a.jsonl" in key:
            results[keys.nothing_lost] = (False, counts, "counts do not reconcile")
        return results

    def storage_fails_on_b(self, relative, data):
        if relative.startswith("raw/batches/") and "b.jsonl" in relative:
            raise ConnectionResetError("connection reset by peer")
        return real_write_bytes(self, relative, data)

    monkeypatch.setattr(ingest_defs, "_check_batch", nothing_lost_fails_on_a)
    monkeypatch.setattr(Storage, "write_bytes", storage_fails_on_b)
    files = {f"{name}.jsonl": [make_rollout(request_input=name)] for name in ("a", "b")}
    _, context, instance, keys, result = ranged_ingest(tmp_path, files)
    try:
        assert not result.success
        assert [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"] == []
        failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.user_failure_data
        assert f"batch {keys['a.jsonl']}: failed nothing_lost" in failure.description
        assert f"batch {keys['b.jsonl']}: connection reset by peer" in failure.description
    finally:
        context.__exit__(None, None, None)
