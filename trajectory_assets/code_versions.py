"""Each asset's code version: the release, a hash of the source of every module its
computation imports, and a hash of the config sections it reads.

Dagster marks an asset stale when its code version changes, and everything downstream of it
with it. So a version must change exactly when the asset's output could: a change to the
report's page leaves the trajectories fresh, a change to a conversion rule marks the ingest
assets (and so everything built from them) stale, a change to one export's renderer marks
that export and the report that shows it.

The modules are found by parsing the source (every ``import`` statement, function-level ones
included, read with ``ast`` as tests/test_layout_rules.py reads them) from the asset's own modules through ``trajectory_assets`` and ``schemas``. A
package's ``__init__.py`` is hashed with any module under it (Python runs it first), but
what it imports is followed only when a module imports the package itself: the sources'
registry lives in ``sources/__init__.py``, so a module that imports one format's module
(``sources.format``) does not depend on the others, while one that asks the registry (the
GRPO family: where a format's tasks go) depends on every format.

Config: an asset reads only some sections of ``PipelineConfig``; their values are hashed
in, so editing ``dpo.min_margin`` marks the DPO exports stale and nothing else. Dagster
reads code versions when the code location loads: after editing the config file, reload it
in the UI (the CLI loads it on every call).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import orjson

from trajectory_assets import PROJECT_ROOT, __version__

PACKAGES = ("trajectory_assets", "schemas")

# The import statements' names of each source, by its SHA-256: parsing the ~106 modules with
# ``ast`` cost 0.33 s of CPU in every process that loads the code location (each CLI call).
# In the user's cache folder, as Hugging Face's and uv's caches are (a source is keyed by its
# bytes, so checkouts share it); a process that cannot write there parses. The number in
# the name is the rule's (``import_names``): a new rule starts a new file.
IMPORT_NAMES_CACHE = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                      / "trajectory-assets" / "import_names-1.json")
# sources kept beyond those of the process that writes it (the edits of a working day)
CACHE_ENTRIES = 4096


def module_file(root: Path, module: str) -> Path | None:
    """The file of ``module`` under ``root`` (a package's ``__init__.py``), or None if it is not ours."""
    path = root.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(root: Path, module: str) -> set[str]:
    """Our modules that ``module``'s source imports, anywhere in it."""
    path = module_file(root, module)
    if path is None:
        return set()
    return {name for name in _import_names(path) if module_file(root, name)}


def import_names(source: bytes, filename: str = "<source>") -> list[str]:
    r"""The names in the import statements of ``source`` (function-level ones included) that
    are in our packages, whether or not each is a module: ``from a.b import c`` names ``a.b``
    and ``a.b.c``, as ``c`` may be a module of package ``a.b``. Relative imports are not used
    here.

    >>> import_names(b"import os, schemas.sft\ndef f():\n    from trajectory_assets import cli as c")
    ['schemas.sft', 'trajectory_assets', 'trajectory_assets.cli']
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):  # import a.b, c
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names if name.split(".")[0] in PACKAGES]
    return found


_known_names: dict[str, list[str]] | None = None  # IMPORT_NAMES_CACHE, once read
_used: set[str] = set()  # the sources this process read
_unsaved = False


def _import_names(path: Path) -> list[str]:
    """``import_names`` of the file, from the cache when its source is one seen before."""
    global _known_names, _unsaved
    if _known_names is None:
        try:
            _known_names = orjson.loads(IMPORT_NAMES_CACHE.read_bytes())
        except (OSError, ValueError):  # none yet, or not JSON
            _known_names = {}
        if not isinstance(_known_names, dict):  # a file that is not ours
            _known_names = {}
    source = path.read_bytes()
    key = hashlib.sha256(source).hexdigest()
    _used.add(key)
    if key not in _known_names:
        _known_names[key] = import_names(source, str(path))
        _unsaved = True
    return _known_names[key]


def _save_import_names() -> None:
    """Writes the cache when it learnt a source, whole or not at all (a process writing it
    meanwhile leaves one complete file or the other)."""
    global _known_names, _unsaved
    if not _unsaved or _known_names is None:
        return
    _unsaved = False
    if len(_known_names) > CACHE_ENTRIES:
        _known_names = {key: names for key, names in _known_names.items() if key in _used}
    with contextlib.suppress(OSError):
        IMPORT_NAMES_CACHE.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=IMPORT_NAMES_CACHE.parent, prefix=".import_names-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(orjson.dumps(_known_names))
            os.replace(temporary, IMPORT_NAMES_CACHE)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def closure(root: Path, modules: Iterable[str], imports: dict[str, set[str]] | None = None) -> list[str]:
    """``modules``, what they import and the packages they are in, sorted. ``imports``: each
    module's imports, read once for every closure that shares the dict (one tree, one moment)."""
    imports = {} if imports is None else imports
    followed: set[str] = set()
    pending = list(modules)
    while pending:
        module = pending.pop()
        if module not in followed:
            followed.add(module)
            if module not in imports:
                imports[module] = imported_modules(root, module)
            pending += imports[module]
    _save_import_names()
    packages = {".".join(m.split(".")[:i]) for m in followed for i in range(1, m.count(".") + 1)}
    return sorted(followed | {p for p in packages if module_file(root, p)})


def source_hash(root: Path, modules: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for module in sorted(modules):
        digest.update(f"{module}\n".encode())
        digest.update(module_file(root, module).read_bytes())
    return digest.hexdigest()[:12]


def config_hash(config: dict, sections: Iterable[str]) -> str:
    return hashlib.sha256(orjson.dumps({name: config.get(name) for name in sections},
                                       option=orjson.OPT_SORT_KEYS)).hexdigest()[:8]


def source_version(version: str) -> str:
    """A code version without its config hash (``<release>+<source hash>``): what a refresh
    compares, with the config fields the render reads (``exports/shard_phase.py``), so that
    editing a decision such as a cap re-renders only the shards it changes. A version of
    another form (a release alone) is returned whole.

    >>> source_version("0.4.0+abc123def456.0badf00d"), source_version("0.4.0")
    ('0.4.0+abc123def456', '0.4.0')
    """
    release, plus, hashes = version.partition("+")
    return f"{release}+{hashes.split('.', 1)[0]}" if plus else version


def code_version(modules: Iterable[str], sections: Iterable[str], config: dict, root: Path = PROJECT_ROOT,
                 imports: dict[str, set[str]] | None = None) -> str:
    """``<release>+<source hash>.<config hash>``; ``imports`` as ``closure``'s."""
    return (f"{__version__}+{source_hash(root, closure(root, modules, imports))}."
            f"{config_hash(config, sections)}")
