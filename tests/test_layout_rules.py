"""The layout's promises (README, ARCHITECTURE.md): the pure rooms never import Dagster."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trajectory_assets"
# The rooms that use Dagster; every other module of the package is pure (no Dagster import)
DAGSTER_ROOMS = ("defs/", "runs/", "definitions.py", "dagster_internals.py", "cli.py", "progress.py")
PURE = sorted(path for path in PACKAGE.rglob("*.py")
              if not path.relative_to(PACKAGE).as_posix().startswith(DAGSTER_ROOMS))


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


REPOSITORY = PACKAGE.parent
INTERNALS = PACKAGE / "dagster_internals.py"
# Dagster's own instance methods that it does not mark public, called only from INTERNALS
PRIVATE_INSTANCE_CALLS = ("create_run_for_job", "report_run_canceling", "report_run_canceled", "report_run_failed",
                          "all_logs", "get_records_for_run", "get_ref", "from_ref", "event_log_storage",
                          "get_concurrency_config", "run_launcher")
PROJECT_FILES = sorted(path for room in ("trajectory_assets", "schemas", "bench", "tests", "samples")
                       for path in (REPOSITORY / room).rglob("*.py")
                       if path not in (INTERNALS, Path(__file__).parent / "test_dagster_internals.py"))


def private_uses(path: Path) -> list[str]:
    """The private Dagster modules a file imports, and the private instance methods it calls."""
    tree = ast.parse(path.read_text())
    found = [name for name in imported_modules(path)
             if name.split(".")[0].startswith("dagster") and any(part.startswith("_") for part in name.split("."))]
    found += [node.attr for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and node.attr in PRIVATE_INSTANCE_CALLS]
    return found


@pytest.mark.parametrize("path", PROJECT_FILES, ids=lambda path: str(path.relative_to(REPOSITORY)))
def test_only_the_internals_module_uses_dagster_private_api(path):
    assert private_uses(path) == [], (
        f"{path.relative_to(REPOSITORY)} uses Dagster's private API: wrap it in trajectory_assets/defs/"
        "dagster_internals.py, where an upgrade that changes it is caught by its test")


def test_the_private_api_check_sees_a_use():
    uses = private_uses(INTERNALS)
    assert "create_run_for_job" in uses and any(name.startswith("dagster._core") for name in uses)


# Data flows downhill (ARCHITECTURE.md): a room imports only the rooms on the levels below its
# own, never one above it or beside it. The Dagster rooms at the top import each other.
DOWNHILL = (("defs", "runs"), ("report",), ("exports",), ("ingest",), ("sources", "redaction"), ("io",), ("chat",))
NOT_IMPORTED_BY = {room: tuple(other for above in DOWNHILL[:level + 1] for other in above if other != room)
                   for level, rooms in enumerate(DOWNHILL) if level for room in rooms}
# the package's shared modules beside the rooms (config, layout, jsonutil...), which every room
# may import, import none of the rooms
SHARED = sorted(path for path in PACKAGE.glob("*.py") if not path.name.startswith(DAGSTER_ROOMS)
                and path.name not in ("__init__.py", "code_versions.py"))


def uphill_imports(path: Path, rooms: tuple[str, ...]) -> set[str]:
    above = tuple(f"trajectory_assets.{name}" for name in rooms)
    return {f"{path.relative_to(PACKAGE)}: {name}" for name in imported_modules(path)
            if name.startswith(above) and name.split(".")[1] in rooms}


@pytest.mark.parametrize("room", sorted(NOT_IMPORTED_BY))
def test_data_flows_downhill(room):
    uphill = set().union(*(uphill_imports(path, NOT_IMPORTED_BY[room]) for path in (PACKAGE / room).rglob("*.py")))
    assert not uphill, sorted(uphill)


def test_every_room_has_its_level():
    rooms = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert rooms == {room for level in DOWNHILL for room in level}


def test_the_check_sees_an_uphill_import():
    assert uphill_imports(PACKAGE / "defs" / "ingest.py", NOT_IMPORTED_BY["ingest"])


@pytest.mark.parametrize("path", SHARED, ids=lambda path: path.name)
def test_the_shared_modules_import_no_room(path):
    rooms = tuple(room for level in DOWNHILL for room in level)
    assert not uphill_imports(path, rooms)


def test_the_contracts_import_nothing_from_the_package():
    """The shapes and patterns both sides apply live in schemas/ (shapes.py), on one side only."""
    found = {f"{path.name}: {name}" for path in (REPOSITORY / "schemas").rglob("*.py")
             for name in imported_modules(path) if name.startswith("trajectory_assets")}
    assert not found, sorted(found)


# The Dagster runtime's modules import one another without a circle, and dagster_internals.py,
# the bottom of them, imports nothing of the package (ARCHITECTURE.md).
RUNTIME = sorted(path for path in PACKAGE.rglob("*.py")
                 if path.relative_to(PACKAGE).as_posix().startswith(DAGSTER_ROOMS))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """What a file imports, with ``from a import b`` also read as ``a.b`` (b may be a module);
    imports inside functions included: a lazy import closes a circle as well."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Each module of ``paths``: the modules of ``paths`` it imports."""
    modules = {module_name(path): path for path in paths}
    return {name: (imported_names(path) & modules.keys()) - {name} for name, path in modules.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected group of modules (Tarjan's algorithm), as
    the modules in import order, the first repeated at the end."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = set()
            while not group or group_end != module:
                group_end = stack.pop()
                group.add(group_end)
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [circle_in(graph, group) for group in groups]


def circle_in(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A path of imports within ``group`` from its first module back to it."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        module = frontier.pop(0)
        for imported in sorted(graph[module] & group):
            if imported == start:
                return paths[module] + [start]
            if imported not in paths:
                paths[imported] = paths[module] + [imported]
                frontier.append(imported)
    raise AssertionError(f"no circle in {sorted(group)}")


def test_the_dagster_runtime_imports_without_a_circle():
    cycles = import_cycles(import_graph(RUNTIME))
    assert not cycles, "import circles: " + "; ".join(" -> ".join(cycle) for cycle in cycles)


def test_the_circle_check_names_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    graph = import_graph(RUNTIME)
    assert "trajectory_assets.dagster_internals" in graph["trajectory_assets.runs.launcher"]
    assert "trajectory_assets.runs.run_workers" in graph["trajectory_assets.runs.launcher"]


def test_the_internals_module_imports_nothing_of_the_package():
    """It is below every Dagster room (runs/ and defs/ import it), so it never imports one back."""
    assert not {name for name in imported_names(INTERNALS) if name.startswith("trajectory_assets")}
