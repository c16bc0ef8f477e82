"""Every export folder is a Hub dataset: `datasets.load_dataset("<folder>")` alone gives its
splits with the declared types, and the rows come back as written."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.split_files import split_paths
from tests.trainers.conftest import decode_json_fields, trainer_libs_missing
from trajectory_assets.exports.registry import EXPORTS

pytestmark = pytest.mark.trainers

MISSING = trainer_libs_missing()  # skips the module outside CI when the libraries are absent

if not MISSING:
    import datasets
    import pyarrow.parquet as pq
    import yaml

    from trajectory_assets.io.arrow_rows import hf_features

    datasets.disable_progress_bars()


def front_matter(folder: Path) -> dict[str, Any]:
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n"), "the card opens with YAML front matter"
    return yaml.safe_load(text.split("---\n", 2)[1])


def without_nulls(value: Any) -> Any:
    """A row as written: `datasets` gives every struct field, a JSON line only the keys it has."""
    if isinstance(value, dict):
        return {key: without_nulls(v) for key, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def same(loaded: Any, written: Any, rel: float) -> bool:
    """Equal values, floats within ``rel`` of each other (exactly equal when ``rel`` is 0)."""
    if isinstance(loaded, float) and isinstance(written, (float, int)) and not isinstance(written, bool):
        return math.isclose(loaded, written, rel_tol=rel) if rel else loaded == written
    if isinstance(loaded, dict) and isinstance(written, dict):
        return loaded.keys() == written.keys() and all(same(loaded[k], written[k], rel) for k in loaded)
    if isinstance(loaded, list) and isinstance(written, list):
        return len(loaded) == len(written) and all(same(a, b, rel) for a, b in zip(loaded, written))
    return loaded == written and type(loaded) is type(written)


def written_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        # JSON fields are stored as their text: decode them the way datasets' Json feature does
        return [decode_json_fields(row, table.schema) for row in table.to_pylist()]
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("name", [export.name for export in EXPORTS])
def test_the_card_declares_the_features_datasets_itself_would_write(name):
    export = next(export for export in EXPORTS if export.name == name)
    assert hf_features(export.arrow_schema) == datasets.Features.from_arrow_schema(export.arrow_schema)._to_yaml_list()


def test_every_export_folder_loads_with_load_dataset_alone(run_exports, hf_cache):
    problems = []
    for export in EXPORTS:
        folder = run_exports / export.name
        manifest = json.loads((folder / "manifest.json").read_text())
        header = front_matter(folder)
        assert header["license"] == "unknown" and "trajectory-assets" in header["tags"]
        assert header["dataset_info"]["features"] == manifest["features"]
        if not sum(manifest["rows"].values()):
            # datasets builds no dataset without rows (on_policy_tokens of a run without token data)
            assert export.name == "on_policy_tokens", f"{export.name} has no rows"
            continue
        try:
            loaded = datasets.load_dataset(str(folder), cache_dir=hf_cache)
        except Exception as error:  # noqa: BLE001 - every folder is reported at once
            problems.append(f"{export.name}: {type(error).__name__}: {error}".splitlines()[0])
            continue
        # every split with rows, each with its rows (datasets cannot build an empty split)
        assert {split: len(rows) for split, rows in loaded.items()} == {
            split: rows for split, rows in manifest["rows"].items() if rows}, export.name
        declared = datasets.Features._from_yaml_list(manifest["features"])
        for split, rows in loaded.items():
            assert rows.features == declared, (export.name, split)
            # the schema's fields, and for GRPO the verifier inputs its rows hold beside the request
            schema_features = datasets.Features.from_arrow_schema(export.arrow_schema)
            assert {name: rows.features[name] for name in schema_features} == schema_features, (export.name, split)
            assert all(rows.features[name] == datasets.Json() for name in set(rows.features) - set(schema_features))
            written = [row for path in split_paths(folder, split) for row in written_rows(path)]
            # datasets' JSON loader re-encodes each line through pandas' ujson when the features hold a
            # Json field, which keeps 10 decimals of a float (docs/exports.md, Trainer flavors): those folders
            # are compared to 1e-9, every other folder exactly
            rel = 1e-9 if export.file_format == "jsonl" and "json" in json.dumps(manifest["features"]) else 0.0
            assert same([without_nulls(row) for row in rows], [without_nulls(row) for row in written], rel), (
                export.name, split)
    assert not problems, "\n".join(problems)


def calls(rows: Any) -> list[dict[str, Any]]:
    """Every tool call anywhere in loaded rows."""
    found = []
    if isinstance(rows, dict):
        if "function" in rows and isinstance(rows.get("function"), dict) and "arguments" in rows["function"]:
            found.append(rows)
        for value in rows.values():
            found += calls(value)
    elif isinstance(rows, list):
        for value in rows:
            found += calls(value)
    return found


@pytest.mark.parametrize("name, objects", [
    ("trl_sft", True), ("trl_dpo", True), ("trl_grpo", True), ("verl", True), ("nemo_rl_sft", True),
    ("nemo_rl_dpo", True), ("sft", False), ("dpo", False),
])
def test_tool_call_arguments_load_as_objects_in_the_template_flavors_and_as_strings_in_the_seed(
        corpus_exports, hf_cache, name, objects):
    loaded = datasets.load_dataset(str(corpus_exports / name), cache_dir=hf_cache)
    found = [call for split in loaded.values() for call in calls(list(split))]
    assert found or name in ("trl_grpo", "verl"), "the corpus has tool calls in every conversation export"
    expected = dict if objects else str
    assert all(isinstance(call["function"]["arguments"], expected) for call in found), name


def test_a_reload_after_a_rerun_sees_the_new_rows(tmp_path):
    """datasets caches a folder whose card has `configs` by a hash of the card: the card's
    split sizes are what tell it the files changed (the cache is shared, as ~/.cache is)."""
    from tests.conftest import SAMPLE
    from trajectory_assets.cli import main

    storage, cache = tmp_path / "out", str(tmp_path / "cache")
    counts = []
    for source in (SAMPLE / "weather", SAMPLE):  # a first run on one file, then on all of them
        assert main(["run", "--source", str(source), "--storage", str(storage)]) == 0
        manifest = json.loads((storage / "exports" / "trl_sft" / "manifest.json").read_text())
        loaded = datasets.load_dataset(str(storage / "exports" / "trl_sft"), cache_dir=cache)
        counts.append((sum(len(split) for split in loaded.values()), sum(manifest["rows"].values())))
    assert counts[0][0] == counts[0][1] and counts[1][0] == counts[1][1] and counts[0][0] < counts[1][0]
