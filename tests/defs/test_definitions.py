"""Snapshot of the whole code location: assets, their deps, checks, jobs.

A change to the graph shows up here as a reviewable diff. To accept one, rerun with
UPDATE_SNAPSHOTS=1 and commit tests/defs/snapshots/definitions.json.
"""

import json
import os
from pathlib import Path

import dagster as dg

from trajectory_assets.definitions import RunSettings, build_definitions, defs

SNAPSHOT = Path(__file__).parent / "snapshots" / "definitions.json"
CATALOG_SNAPSHOT = Path(__file__).parent / "snapshots" / "two_datasets.json"
EXAMPLE_CATALOG = Path(__file__).parents[2] / "examples" / "two_datasets" / "catalog"


def describe(definitions: dg.Definitions) -> dict:
    graph = definitions.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "deps": sorted(parent.to_user_string() for parent in node.parent_keys),
            "checks": sorted(check.name for check in node.check_keys),
            "blocking_checks": sorted(
                check.name for check in node.check_keys if graph.get(check).blocking
            ),
            "has_column_schema": "dagster/column_schema" in node.metadata,
            "partitions": getattr(node.partitions_def, "name", None),
            "automation": node.automation_condition.get_label() if node.automation_condition else None,
            "freshness_fail_window_s": node.freshness_policy.fail_window.to_timedelta().total_seconds()
            if node.freshness_policy else None,
            "pools": sorted(node.pools),
        }
    jobs = sorted((job.name, job.executor_def.name) for job in definitions.resolve_all_job_defs())
    sensors = sorted((s.name, s.default_status.value) for s in definitions.sensors)
    schedules = sorted((s.name, s.cron_schedule, s.default_status.value) for s in definitions.schedules)
    return {"assets": assets, "jobs": jobs, "sensors": sensors, "schedules": schedules}


def test_definitions_load():
    dg.Definitions.validate_loadable(defs)


def test_definitions_match_snapshot():
    current = json.loads(json.dumps(describe(build_definitions(RunSettings(sources=["/in"], storage="/out")))))
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(current, indent=2) + "\n")
    assert current == json.loads(SNAPSHOT.read_text())


def test_the_example_catalog_matches_its_snapshot():
    """Two datasets of one source: the source's batch assets once, each dataset's own assets,
    group, job, automation and schedule, its exports depending on the source's trajectories."""
    from trajectory_assets.defs.components import load_catalog

    declared = load_catalog(EXAMPLE_CATALOG)
    current = json.loads(json.dumps(describe(build_definitions(RunSettings(sources=["/in"], storage="/out"),
                                                               declared, environment=False))))
    if os.environ.get("UPDATE_SNAPSHOTS"):
        CATALOG_SNAPSHOT.write_text(json.dumps(current, indent=2) + "\n")
    assert current == json.loads(CATALOG_SNAPSHOT.read_text())
    assert current["assets"]["sft_v1/sft_dataset"]["deps"] == ["sample/validated_trajectories"]
    assert current["assets"]["grpo_math/stats_report"]["group"] == "grpo_math"


def test_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TRAJECTORY_SOURCE", f"{tmp_path}/a, {tmp_path}/b")
    monkeypatch.setenv("TRAJECTORY_STORAGE", str(tmp_path / "out"))
    monkeypatch.setenv("TRAJECTORY_CONFIG", str(tmp_path / "c.yaml"))
    settings = RunSettings.from_env()
    assert settings.sources == [f"{tmp_path}/a", f"{tmp_path}/b"]
    assert (settings.storage, settings.config_file) == (str(tmp_path / "out"), str(tmp_path / "c.yaml"))


def test_settings_default_to_the_bundled_sample(monkeypatch):
    for name in ("TRAJECTORY_SOURCE", "TRAJECTORY_STORAGE", "TRAJECTORY_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    settings = RunSettings.from_env()
    assert settings.sources[0].endswith("samples/rollouts") and settings.storage.endswith("data")


def test_the_ui_shows_the_columns_of_the_written_files_each_described():
    """Column schemas are the Arrow schemas the files are written with (not the contracts'
    derived columns such as `role_shape` or `line`), and no column is left undescribed."""
    from trajectory_assets.exports.registry import EXPORTS
    from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA

    graph = build_definitions(RunSettings(sources=["/in"], storage="/out")).resolve_asset_graph()

    def columns(asset: str) -> list:
        return graph.get(dg.AssetKey(asset)).metadata["dagster/column_schema"].columns

    expected = {export.asset_name: export.arrow_schema.names for export in EXPORTS}
    expected["validated_trajectories"] = TRAJECTORY_ARROW_SCHEMA.names
    expected["quarantined_records"] = ["source", "line", "reason", "detail", "raw"]
    for asset, names in expected.items():
        assert [column.name for column in columns(asset)] == names, asset
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        if "dagster/column_schema" in node.metadata:
            undescribed = [c.name for c in node.metadata["dagster/column_schema"].columns if not c.description]
            assert not undescribed, f"{key.to_user_string()}: {undescribed}"
    assert "role_shape" not in [column.name for column in columns("trl_sft_dataset")]
    assert {c.name: c.type for c in columns("trl_sft_dataset")}["tools"] == "list<json>"


def _modules_after_import(statement: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after running ``statement``."""
    import subprocess
    import sys

    probe = f"import sys; {statement}; print(','.join(m for m in {modules!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [name for name in done.stdout.strip().split(",") if name]


def test_loading_the_code_location_leaves_the_plotting_libraries_to_the_report_step():
    """Altair and vl-convert (~26 MiB) would be held by every process that loads the code
    location (CLI, code server, run workers, fork server); only the report step draws."""
    assert _modules_after_import("import trajectory_assets.definitions", ("altair", "vl_convert")) == []
    assert _modules_after_import("import trajectory_assets.report.plots", ("altair", "vl_convert")) == [
        "altair", "vl_convert"]  # the probe sees them when they are imported


def test_numba_is_imported_only_where_a_benchmark_index_is_used():
    """numba costs about 0.1 s to import, and more on its first call: no process pays it unless it checks texts."""
    assert _modules_after_import("import trajectory_assets.definitions; import trajectory_assets.exports.registry",
                                 ("numba",)) == []
    assert _modules_after_import("from trajectory_assets.ingest.decontamination import words; words('x')",
                                 ("numba",)) == ["numba"]
