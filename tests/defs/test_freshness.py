"""The exports' and the report's freshness policy, as Dagster's freshness daemon evaluates it."""

import time

import dagster as dg

from tests.conftest import SAMPLE
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
