"""The Dagster code location (``dagster dev -w workspace.yaml`` loads ``defs`` from here)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from trajectory_assets.defs.automation import INGEST_JOB, MAIN_JOB, build_automation, datasets_job, ingest_job
from trajectory_assets.defs.exports import export_assets
from trajectory_assets.defs.ingest import (
    quarantine_contract,
    raw_rollouts,
    raw_rollouts_contract,
    trajectory_contract,
    validated_trajectories,
)
from trajectory_assets.defs.reports import stats_report
from trajectory_assets.defs.resources import PipelineSettings, RolloutSources, TrajectoryStorage

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUNDLED_SAMPLE = PROJECT_ROOT / "samples" / "rollouts"
__all__ = ["INGEST_JOB", "MAIN_JOB", "RunSettings", "build_definitions", "defs"]


@dataclass(frozen=True)
class RunSettings:
    sources: list[str]
    storage: str
    config_file: str | None = None
    sensor_interval_seconds: int = 30
    refresh_cron: str = "0 3 * * *"

    @classmethod
    def from_env(cls) -> "RunSettings":
        """TRAJECTORY_SOURCE (comma-separated), TRAJECTORY_STORAGE, TRAJECTORY_CONFIG,
        TRAJECTORY_SENSOR_INTERVAL (seconds), TRAJECTORY_REFRESH_CRON."""
        sources = [s.strip() for s in os.environ.get("TRAJECTORY_SOURCE", "").split(",") if s.strip()]
        return cls(
            sources=sources or [str(BUNDLED_SAMPLE)],
            storage=os.environ.get("TRAJECTORY_STORAGE") or str(Path.cwd() / "data"),
            config_file=os.environ.get("TRAJECTORY_CONFIG") or None,
            sensor_interval_seconds=int(os.environ.get("TRAJECTORY_SENSOR_INTERVAL") or 30),
            refresh_cron=os.environ.get("TRAJECTORY_REFRESH_CRON") or "0 3 * * *",
        )


def build_definitions(settings: RunSettings) -> dg.Definitions:
    automation = build_automation(settings.sensor_interval_seconds, settings.refresh_cron)
    return dg.Definitions(
        assets=[raw_rollouts, validated_trajectories, *export_assets, stats_report],
        asset_checks=[raw_rollouts_contract, trajectory_contract, quarantine_contract],
        jobs=[ingest_job, datasets_job],
        sensors=[d for d in automation if isinstance(d, dg.SensorDefinition)],
        schedules=[d for d in automation if isinstance(d, dg.ScheduleDefinition)],
        resources={
            "sources": RolloutSources(paths=settings.sources),
            "storage": TrajectoryStorage(root=settings.storage),
            "settings": PipelineSettings(config_file=settings.config_file),
        },
    )


defs = build_definitions(RunSettings.from_env())
