"""The `trainers` group: our exports loaded by `datasets` and trained by TRL as written.

Installed by `make trainers` (part of `make test`). Skipped locally when the libraries are
missing; with CI set, missing libraries fail instead, so CI can never skip the group silently.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import in_ci

TRAINER_LIBS = ("torch", "trl", "transformers", "datasets", "tokenizers")


def pytest_configure(config):
    config.addinivalue_line("markers", "trainers: exports trained by TRL (needs `make trainers`)")


def trainer_libs_missing() -> str:
    """Why the group cannot run ("" when it can). Outside CI, skips the calling test module."""
    missing = [name for name in TRAINER_LIBS if importlib.util.find_spec(name) is None]
    if not missing:
        return ""
    reason = f"{', '.join(missing)} not installed (`make trainers` installs them)"
    if not in_ci():
        pytest.skip(reason, allow_module_level=True)
    return reason  # with CI set the module's tests fail with it, instead of being skipped


@pytest.fixture(autouse=True, scope="module")
def trainer_libs():
    """With CI set and the libraries missing, every test of the group fails rather than skips."""
    missing = [name for name in TRAINER_LIBS if importlib.util.find_spec(name) is None]
    if missing:  # only reached with CI set: outside CI the modules skip themselves on import
        pytest.fail(f"CI is set but the trainers test group cannot run: {', '.join(missing)} not installed")


def _cli_run(tmp_path_factory, source, *options: str) -> Path:
    """`trajectory-assets run` on ``source`` (with CLI ``options``); the exports folder it writes."""
    from trajectory_assets.cli import main

    from tests.conftest import temporary_dagster_home

    storage = tmp_path_factory.mktemp("out")
    with pytest.MonkeyPatch.context() as patch:  # an instance of its own, never the project's
        patch.setenv("DAGSTER_HOME", str(temporary_dagster_home(tmp_path_factory.mktemp("home"))))
        assert main(["run", "--source", str(source), "--storage", str(storage), *options]) == 0
    return storage / "exports"


@pytest.fixture(scope="session")
def sample_exports(tmp_path_factory) -> Path:
    """The exports of a real run over the bundled sample."""
    from tests.conftest import SAMPLE

    return _cli_run(tmp_path_factory, SAMPLE)


@pytest.fixture(scope="session")
def corpus_exports(tmp_path_factory) -> Path:
    """The exports of a real run over ../shared/corpus (NeMo Gym and Hermes files)."""
    from tests.conftest import shared_data

    return _cli_run(tmp_path_factory, shared_data("corpus"))


@pytest.fixture(params=["sample", "corpus"])
def run_exports(request) -> Path:
    """Each real run's exports in turn."""
    return request.getfixturevalue(f"{request.param}_exports")


@pytest.fixture(scope="session")
def hf_cache(tmp_path_factory) -> str:
    """datasets' cache (the loaded Arrow files and TRL's tokenized maps) kept out of ~/.cache."""
    return str(tmp_path_factory.mktemp("hf_cache"))


def decode_json_fields(value: Any, schema_or_type: Any) -> Any:
    """A Parquet row's JSON fields (stored as their text) decoded, as datasets' Json feature does."""
    import pyarrow as pa

    from trajectory_assets.io.arrow_rows import JSON

    if value is None:
        return None
    if isinstance(schema_or_type, pa.Schema):
        return {f.name: decode_json_fields(value[f.name], f.type) for f in schema_or_type}
    if schema_or_type == JSON:
        return json.loads(value)
    if pa.types.is_struct(schema_or_type):
        return {f.name: decode_json_fields(value[f.name], f.type) for f in schema_or_type}
    if pa.types.is_list(schema_or_type):
        return [decode_json_fields(v, schema_or_type.value_type) for v in value]
    return value


SHARDS = 3


@pytest.fixture(scope="session")
def sharded_exports(sample_exports, tmp_path_factory) -> Path:
    """The sample run's exports with every split written as shard files: its rows in order, cut
    in ``SHARDS`` (a split of fewer rows has fewer files), committed as the sharded export phase
    commits them, with their card, index files and manifest."""
    import numpy as np
    import pyarrow.parquet as pq

    from tests.io.staged_export import commit_export
    from tests.split_files import split_paths
    from trajectory_assets.exports.families.frames import SPLITS
    from trajectory_assets.exports.registry import EXPORTS
    from trajectory_assets.exports.writer import write_beside_files
    from trajectory_assets.io.storage import Storage

    storage = tmp_path_factory.mktemp("sharded")
    store = Storage(str(storage))
    for export in EXPORTS:
        manifest = json.loads((sample_exports / export.name / "manifest.json").read_text())
        rows_by_shard: dict[int, dict[str, list]] = {}
        for split in SPLITS:
            paths = split_paths(sample_exports / export.name, split)
            if export.file_format == "parquet":
                rows = [decode_json_fields(row, export.arrow_schema) for path in paths
                        for row in pq.read_table(path).to_pylist()]
            else:
                rows = [json.loads(line) for path in paths for line in path.read_text().splitlines()]
            for shard, part in enumerate(np.array_split(np.arange(len(rows)), SHARDS)):
                if len(part):
                    rows_by_shard.setdefault(shard, {})[split] = [rows[i] for i in part]
        manifest["files"] = commit_export(store, export.name, SPLITS, export.file_format, export.arrow_schema,
                                          rows_by_shard, SHARDS)
        write_beside_files(store, export, manifest)
    return storage / "exports"
