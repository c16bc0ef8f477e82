"""The layout's promises (README, ARCHITECTURE.md): the pure rooms never import Dagster."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trajectory_assets"
PURE = [*sorted(path for room in ("formats", "datasets", "io") for path in (PACKAGE / room).rglob("*.py")),
        PACKAGE / "memory.py", PACKAGE / "layout.py", PACKAGE / "config.py"]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", PURE, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_pure_modules_do_not_import_dagster(path):
    dagster = {name for name in imported_modules(path) if name.split(".")[0].startswith("dagster")
               or name.startswith("trajectory_assets.defs") or name == "trajectory_assets.definitions"}
    assert not dagster, f"{path.name} imports {sorted(dagster)}"


def test_the_check_sees_an_import():
    assert "dagster" in imported_modules(PACKAGE / "definitions.py")
