"""End to end through Dagster: materialize the whole graph on fixtures, checks included."""

import json

import dagster as dg
import pytest

from tests.conftest import SAMPLE, make_rollout, message_item, write_jsonl
from trajectory_assets.definitions import MAIN_JOB, RunSettings, build_definitions


def run_job(sources, storage, config_file=None):
    defs = build_definitions(RunSettings(sources=[str(s) for s in sources], storage=str(storage), config_file=config_file))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(MAIN_JOB).execute_in_process(instance=instance, raise_on_error=False)
        checks = {
            (e.asset_check_evaluation_data.asset_key.to_user_string(), e.asset_check_evaluation_data.check_name):
                e.asset_check_evaluation_data.passed
            for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"
        }
        materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    return result, checks, materialized


def test_sample_materializes_every_asset_with_every_check_passing(tmp_path):
    result, checks, materialized = run_job([SAMPLE], tmp_path)
    assert result.success
    assert materialized == {
        "raw_rollouts", "validated_trajectories", "quarantined_records", "sft_dataset", "dpo_dataset",
        "grpo_dataset", "stats_report",
    }
    assert checks == {
        ("validated_trajectories", "nothing_lost"): True,
        ("validated_trajectories", "trajectory_contract"): True,
        ("quarantined_records", "quarantine_contract"): True,
        ("sft_dataset", "contract"): True,
        ("sft_dataset", "no_split_leak"): True,
        ("dpo_dataset", "contract"): True,
        ("dpo_dataset", "no_split_leak"): True,
        ("dpo_dataset", "dpo_margin"): True,
        ("grpo_dataset", "contract"): True,
        ("grpo_dataset", "no_split_leak"): True,
    }
    stats = json.loads((tmp_path / "reports" / "stats.json").read_text())
    assert stats["records_read"] == stats["records_valid"] + stats["records_rejected"] == 14
    for export in ("sft", "dpo", "grpo"):
        assert sum(stats["exports"][export].values()) > 0, f"the bundled sample must yield {export} rows"


def test_materialization_metadata_carries_counts_and_uris(tmp_path):
    defs = build_definitions(RunSettings(sources=[str(SAMPLE)], storage=str(tmp_path)))
    with dg.instance_for_test() as instance:
        defs.resolve_job_def(MAIN_JOB).execute_in_process(instance=instance)
        event = instance.get_latest_materialization_event(dg.AssetKey("validated_trajectories"))
        metadata = event.asset_materialization.metadata
        assert metadata["dagster/row_count"].value == 12
        assert metadata["dagster/uri"].value == str(tmp_path / "trajectories" / "trajectories.parquet")
        report = instance.get_latest_materialization_event(dg.AssetKey("stats_report")).asset_materialization
        assert "Trajectory statistics" in report.metadata["report"].value
        assert "data:image/png;base64," in report.metadata["report"].value


def test_contract_failure_blocks_the_export_and_writes_nothing(tmp_path):
    from trajectory_assets.defs import exports as export_defs
    from trajectory_assets.defs.ingest import raw_rollouts, validated_trajectories
    from trajectory_assets.defs.resources import PipelineSettings, RolloutSources, TrajectoryStorage

    sft = export_defs.EXPORT_KINDS[0]

    def buggy_builder(*args, **kwargs):
        frame = sft.build(*args, **kwargs)
        frame.rows["role_shape"] = "x"  # what a bug in the builder would produce
        return frame

    buggy_sft = export_defs.build_export_asset(
        export_defs.ExportKind(sft.name, sft.description, sft.contract, sft.columns, buggy_builder)
    )
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [raw_rollouts, validated_trajectories, buggy_sft],
            instance=instance,
            resources={
                "sources": RolloutSources(paths=[str(SAMPLE)]),
                "storage": TrajectoryStorage(root=str(tmp_path)),
                "settings": PipelineSettings(),
            },
            raise_on_error=False,
        )
    assert not result.success
    failed = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
              and not e.asset_check_evaluation_data.passed]
    assert [e.asset_check_evaluation_data.check_name for e in failed] == ["contract"]
    assert not (tmp_path / "exports" / "sft").exists()


def test_bad_records_never_abort_the_run(tmp_path):
    source = write_jsonl(tmp_path / "in" / "x.jsonl", ["garbage", make_rollout([message_item("ok")]), "{}", "[]"])
    result, checks, _ = run_job([source], tmp_path / "out")
    assert result.success and all(checks.values())
    quarantine = (tmp_path / "out" / "quarantine" / "rejected.jsonl").read_text().splitlines()
    assert [json.loads(line)["reason"] for line in quarantine] == ["invalid_json", "not_a_rollout", "not_an_object"]


def test_invalid_config_fails_with_a_clear_message(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("sft:\n  min_reward: high\n")
    result, _, _ = run_job([SAMPLE], tmp_path / "out", config_file=str(config))
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "sft.min_reward" in str(failure.step_failure_data.user_failure_data or failure.step_failure_data.error)


@pytest.mark.parametrize("fraction, expected", [(0.0, {"validation": 0}), (1.0, {"train": 0})])
def test_split_fraction_from_config(tmp_path, fraction, expected):
    config = tmp_path / "c.yaml"
    config.write_text(f"split:\n  validation_fraction: {fraction}\n")
    result, _, _ = run_job([SAMPLE], tmp_path / "out", config_file=str(config))
    assert result.success
    manifest = json.loads((tmp_path / "out" / "exports" / "sft" / "manifest.json").read_text())
    assert {k: manifest["rows"][k] for k in expected} == expected
