"""The Dagster code location (``dagster dev -w workspace.yaml`` loads ``defs`` from here)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from trajectory_assets.defs.exports import export_assets
from trajectory_assets.defs.ingest import quarantine_contract, raw_rollouts, trajectory_contract, validated_trajectories
from trajectory_assets.defs.reports import stats_report
from trajectory_assets.defs.resources import PipelineSettings, RolloutSources, TrajectoryStorage

PROJECT_ROOT = Path(__file__).resolve().parent.parent
BUNDLED_SAMPLE = PROJECT_ROOT / "samples" / "rollouts"
MAIN_JOB = "build_training_datasets"


@dataclass(frozen=True)
class RunSettings:
    sources: list[str]
    storage: str
    config_file: str | None = None

    @classmethod
    def from_env(cls) -> "RunSettings":
        """TRAJECTORY_SOURCE (comma-separated), TRAJECTORY_STORAGE, TRAJECTORY_CONFIG."""
        sources = [s.strip() for s in os.environ.get("TRAJECTORY_SOURCE", "").split(",") if s.strip()]
        return cls(
            sources=sources or [str(BUNDLED_SAMPLE)],
            storage=os.environ.get("TRAJECTORY_STORAGE") or str(Path.cwd() / "data"),
            config_file=os.environ.get("TRAJECTORY_CONFIG") or None,
        )


def build_definitions(settings: RunSettings) -> dg.Definitions:
    assets = [raw_rollouts, validated_trajectories, *export_assets, stats_report]
    return dg.Definitions(
        assets=assets,
        asset_checks=[trajectory_contract, quarantine_contract],
        jobs=[
            dg.define_asset_job(
                MAIN_JOB,
                selection=dg.AssetSelection.all(),
                description="Rollouts -> validated trajectories -> SFT / DPO / GRPO -> stats, with every check.",
            )
        ],
        resources={
            "sources": RolloutSources(paths=settings.sources),
            "storage": TrajectoryStorage(root=settings.storage),
            "settings": PipelineSettings(config_file=settings.config_file),
        },
    )


defs = build_definitions(RunSettings.from_env())
