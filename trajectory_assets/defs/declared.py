"""Which sources and datasets the code location builds: the declared ones, and the environment's."""

from __future__ import annotations

import os
from pathlib import Path

from trajectory_assets import PROJECT_ROOT
from trajectory_assets.project import Project

CATALOG = PROJECT_ROOT / "catalog"  # the declared sources and datasets, unless TRAJECTORY_CATALOG names another


def declared_project() -> tuple[Project | None, bool]:
    """The declared sources and datasets (``TRAJECTORY_CATALOG``, else ``catalog/`` when it
    exists), and whether the environment's dataset is built too: when nothing is declared,
    or when ``TRAJECTORY_SOURCE`` names its sources."""
    folder = Path(os.environ.get("TRAJECTORY_CATALOG") or CATALOG)
    if not folder.exists():
        return None, True
    from trajectory_assets.defs.components import load_catalog  # Dagster's component loading: only when used

    declared = load_catalog(folder)
    return declared, not declared.datasets or bool(os.environ.get("TRAJECTORY_SOURCE"))


