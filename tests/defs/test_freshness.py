"""The exports' and the report's freshness policy, as Dagster's freshness daemon evaluates it."""

import time

import dagster as dg

from tests.conftest import SAMPLE, edited
from trajectory_assets.definitions import INGEST_JOB, MAIN_JOB, RunSettings, build_definitions
from trajectory_assets.dagster_internals import freshness_state
from trajectory_assets.runs.run_plan import batch_run_tags
from trajectory_assets.runs.runner import sync_batches
from trajectory_assets.io.source_files import batch_key, discover
from trajectory_assets.sources import INPUTS_SUFFIXES


def freshness(defs, instance, asset: str, now: float | None = None) -> str:
    return freshness_state(instance, defs, dg.AssetKey(asset), now)


def test_datasets_fail_freshness_when_not_rebuilt_within_the_window(tmp_path):
    defs = build_definitions(RunSettings(sources=[str(SAMPLE)], storage=str(tmp_path), freshness_minutes=90))
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey("raw_rollouts")).freshness_policy is None  # batches land when they land
    batches = sorted({batch_key(s.source_id) for s in discover([str(SAMPLE)], INPUTS_SUFFIXES)})
    with dg.instance_for_test() as instance:
        assert freshness(defs, instance, "sft_dataset") == "UNKNOWN"  # never built
        sync_batches(instance, batches)
        assert defs.resolve_job_def(INGEST_JOB).execute_in_process(instance=instance, tags=batch_run_tags(batches)).success
        assert defs.resolve_job_def(MAIN_JOB).execute_in_process(instance=instance).success
        built = time.time()
        for asset in ("sft_dataset", "trl_dpo_dataset", "verl_dataset", "stats_report"):
            assert freshness(defs, instance, asset) == "PASS"
        assert freshness(defs, instance, "sft_dataset", now=built + 89 * 60) == "PASS"
        assert freshness(defs, instance, "sft_dataset", now=built + 91 * 60) == "FAIL"
        assert freshness(defs, instance, "stats_report", now=built + 91 * 60) == "FAIL"


def test_the_window_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("TRAJECTORY_FRESHNESS_MINUTES", raising=False)
    assert RunSettings.from_env().freshness_minutes == 25 * 60  # the nightly refresh and an hour
    monkeypatch.setenv("TRAJECTORY_FRESHNESS_MINUTES", "120")
    defs = build_definitions(RunSettings.from_env())
    policy = defs.resolve_asset_graph().get(dg.AssetKey("grpo_dataset")).freshness_policy
    assert policy.fail_window.to_timedelta().total_seconds() == 7200


def test_an_edited_module_marks_stale_what_it_computes_and_what_is_built_from_it(tmp_path):
    """Staleness, as the UI shows it, after editing one module of a copy of the package: the
    report's page marks the report only; a conversion rule the ingest assets and everything
    downstream (``tests/test_code_versions.py`` checks the versions themselves)."""
    import shutil

    from trajectory_assets import PROJECT_ROOT
    from trajectory_assets.dagster_internals import stale_status
    from trajectory_assets.defs.code_versions import asset_code_versions, with_code_versions

    source = tmp_path / "source"
    for package in ("trajectory_assets", "schemas"):
        shutil.copytree(PROJECT_ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    defs = build_definitions(RunSettings(sources=[str(SAMPLE)], storage=str(tmp_path / "out")))
    batches = sorted({batch_key(s.source_id) for s in discover([str(SAMPLE)], INPUTS_SUFFIXES)})
    graph = defs.resolve_asset_graph()
    assets = sorted(key.to_user_string() for key in graph.get_all_asset_keys())

    def stale(definitions, instance) -> set[str]:
        found = set()
        for asset in assets:
            key = dg.AssetKey(asset)
            partitions = batches if graph.get(key).partitions_def else [None]
            if any(stale_status(instance, definitions, key, partition) == "STALE" for partition in partitions):
                found.add(asset)
        return found

    def stale_after_editing(module: str, instance) -> set[str]:
        with edited(source / module):
            versions = asset_code_versions(None, root=source)
        return stale(with_code_versions(defs, versions), instance)

    with dg.instance_for_test() as instance:
        sync_batches(instance, batches)
        assert defs.resolve_job_def(INGEST_JOB).execute_in_process(instance=instance, tags=batch_run_tags(batches)).success
        assert defs.resolve_job_def(MAIN_JOB).execute_in_process(instance=instance).success
        assert stale(with_code_versions(defs, asset_code_versions(None, root=source)), instance) == set()
        assert stale_after_editing("trajectory_assets/report/page.py", instance) == {"stats_report"}
        assert stale_after_editing("trajectory_assets/chat/messages.py", instance) == set(assets)
        # only ingest redacts: the exports and the report stay fresh until the batches are ingested again
        assert stale_after_editing("trajectory_assets/redaction/redactor.py", instance) == {
            "raw_rollouts", "validated_trajectories", "quarantined_records"}
        assert stale_after_editing("trajectory_assets/exports/verl.py", instance) == {"verl_dataset", "stats_report"}
