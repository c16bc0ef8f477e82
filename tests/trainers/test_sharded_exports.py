"""A split written as several shard files reads as one split, its rows in order, in `datasets`
and in each trainer's own loader (their loading code, followed call for call, at the commit
named): LLaMA-Factory, verl, NeMo RL. TRL loads with `load_dataset("<export folder>")`
(test_trl_training.py trains on a sharded export).

`sharded_exports` is the bundled sample's run with every split cut in three files; the same
run unsharded (`sample_exports`) is what every loader must give back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.split_files import split_paths
from tests.trainers.conftest import SHARDS, trainer_libs_missing
from trajectory_assets.exports.registry import EXPORTS

pytestmark = pytest.mark.trainers

MISSING = trainer_libs_missing()  # skips the module outside CI when the libraries are absent

if not MISSING:
    import datasets

    datasets.disable_progress_bars()


def own_cache(hf_cache: str, folder: Path) -> str:
    """A cache of each run's own: `datasets` caches a folder with a card by the card's hash, and
    the sharded folder's header is the unsharded one's, so a shared cache would answer from the other."""
    return os.path.join(hf_cache, folder.parent.parent.name)


def loaded_split(folder: Path, split: str, hf_cache: str) -> list[dict]:
    return list(datasets.load_dataset(str(folder), cache_dir=own_cache(hf_cache, folder))[split])


def test_every_sharded_folder_loads_as_the_same_rows_in_the_same_order(sharded_exports, sample_exports, hf_cache):
    several = []
    for export in EXPORTS:
        manifest = json.loads((sharded_exports / export.name / "manifest.json").read_text())
        for split, rows in manifest["rows"].items():
            files = split_paths(sharded_exports / export.name, split)
            assert len(files) == min(SHARDS, rows) or (rows == 0 and len(files) == 1), (export.name, split)
            if export.file_format == "jsonl":  # the files one after the other are the unsharded file
                assert b"".join(path.read_bytes() for path in files) == b"".join(
                    path.read_bytes() for path in split_paths(sample_exports / export.name, split))
            if len(files) > 1:
                several.append(export.name)
                assert loaded_split(sharded_exports / export.name, split, hf_cache) == loaded_split(
                    sample_exports / export.name, split, hf_cache), (export.name, split)
    # both formats, and every family, are read from several files
    assert {"sft", "trl_sft", "dpo", "trl_dpo", "grpo", "verl", "llama_factory", "nemo_rl_sft"} <= set(several)


def test_without_a_card_datasets_default_split_patterns_find_the_shards_in_order(sharded_exports, tmp_path,
                                                                                  hf_cache):
    """The Hub's own shard pattern (`SPLIT_PATTERN_SHARDED`) wants them in `data/`: at the
    folder's top, `datasets` takes its split-in-the-file-name patterns (`train[-._ 0-9]*`)."""
    from datasets.data_files import SPLIT_PATTERN_SHARDED, get_data_patterns

    bare = tmp_path / "trl_sft"
    bare.mkdir()
    for path in split_paths(sharded_exports / "trl_sft", "train"):  # (the validation split may be one empty file)
        (bare / path.name).write_bytes(path.read_bytes())
    assert SPLIT_PATTERN_SHARDED.startswith("data/")
    assert get_data_patterns(str(bare))["train"][0] == "**/train[-._ 0-9]*"
    assert list(datasets.load_dataset(str(bare), cache_dir=str(tmp_path / "cache"))["train"]["trajectory_id"]) == [
        row["trajectory_id"] for row in loaded_split(sharded_exports / "trl_sft", "train", hf_cache)]


def llama_factory_dataset(dataset_dir: Path, name: str, cache_dir: str) -> datasets.Dataset:
    """LLaMA-Factory's load of a registered dataset (ff6d4d1): `parser.get_dataset_list` reads
    `dataset_info.json` (`hf_hub_url` / `ms_hub_url` / `om_hub_url`, `script_url`,
    `cloud_file_name`, then `file_name`), `loader._load_single_dataset` loads a `script_url` as
    `load_dataset(path=<dataset_dir>/<script_url>, name=subset, data_dir=folder, split=split)`."""
    attributes = json.loads((dataset_dir / "dataset_info.json").read_text())[name]
    assert not {"hf_hub_url", "ms_hub_url", "om_hub_url"} & attributes.keys()
    return datasets.load_dataset(path=os.path.join(dataset_dir, attributes["script_url"]),
                                 name=attributes.get("subset"), data_dir=attributes.get("folder"), data_files=None,
                                 split=attributes.get("split", "train"), cache_dir=cache_dir)


def test_llama_factory_loads_each_registered_split_from_every_shard(sharded_exports, sample_exports, hf_cache):
    folder = sharded_exports / "llama_factory"
    manifest = json.loads((folder / "manifest.json").read_text())
    for split, rows in manifest["rows"].items():
        if not rows:  # datasets builds no empty split
            continue
        loaded = llama_factory_dataset(folder, f"trajectory_assets_llama_factory_{split}", own_cache(hf_cache, folder))
        # the columns its ShareGPT converter reads (SHAREGPT_COLUMNS)
        assert {"conversations", "system", "tools"} <= set(loaded.column_names)
        assert list(loaded) == loaded_split(sample_exports / "llama_factory", split, hf_cache)
    assert len(split_paths(folder, "train")) == SHARDS


def verl_dataset(train_files: str | list[str], cache_dir: str) -> datasets.Dataset:
    """verl's `RLHFDataset` (b178a3cd5, `verl/utils/dataset/rl_dataset.py`): `data.train_files`
    is one path or a list; each (local paths are used as they are) is loaded by `datasets`'
    Parquet builder, then concatenated in list order."""
    files = train_files if isinstance(train_files, list) else [train_files]
    return datasets.concatenate_datasets([datasets.load_dataset("parquet", data_files=path, cache_dir=cache_dir)["train"]
                                          for path in files])


def test_verl_reads_the_train_files_as_a_glob_or_as_the_manifests_list(sharded_exports, sample_exports, hf_cache):
    folder = sharded_exports / "verl"
    manifest = json.loads((folder / "manifest.json").read_text())
    listed = [str(folder / name) for name, described in manifest["files"].items() if described["split"] == "train"]
    assert len(listed) == SHARDS
    expected = loaded_split(sample_exports / "verl", "train", hf_cache)
    assert list(verl_dataset(listed, own_cache(hf_cache, folder))) == expected
    assert list(verl_dataset(str(folder / "train-*.parquet"), own_cache(hf_cache, folder))) == expected


def nemo_rl_openai_format_preserving(data_paths: list[str]) -> list[dict]:
    """NeMo RL SFT (7ea279a): `data.train` is one dataset or a list (`examples/run_sft.py`
    `setup_data`), each `openai_format` with `use_preserving_dataset: true` read as
    `[json.loads(line) for line in open(data_path)]` (one file: `oai_format_dataset.py`), and
    `merge_datasets` concatenates them in list order."""
    rows = []
    for data_path in data_paths:
        with open(data_path) as handle:
            rows += [json.loads(line) for line in handle]
    return rows


def nemo_rl_load_dataset_from_path(data_path: str, cache_dir: str) -> datasets.Dataset:
    """NeMo RL's `load_dataset_from_path` (7ea279a, `nemo_rl/data/datasets/utils.py`), as
    `PreferenceDataset` calls it (no subset, no split): a path ending in a file extension is
    loaded as files of that type, any other by `load_dataset(path)`, then its `train` split."""
    types = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
    suffix = os.path.splitext(data_path)[-1]
    loaded = (datasets.load_dataset(types[suffix], data_files=data_path, cache_dir=cache_dir) if suffix in types
              else datasets.load_dataset(data_path, cache_dir=cache_dir))
    return loaded["train"]


def test_nemo_rl_reads_sft_shards_as_a_list_and_dpo_shards_as_a_glob_or_the_folder(sharded_exports, sample_exports,
                                                                                    hf_cache):
    sft = sharded_exports / "nemo_rl_sft"
    manifest = json.loads((sft / "manifest.json").read_text())
    entries = [str(sft / name) for name, described in manifest["files"].items() if described["split"] == "train"]
    assert len(entries) == SHARDS
    assert nemo_rl_openai_format_preserving(entries) == [
        json.loads(line) for path in split_paths(sample_exports / "nemo_rl_sft", "train")
        for line in path.read_text().splitlines()]
    dpo = sharded_exports / "nemo_rl_dpo"
    expected = loaded_split(sample_exports / "nemo_rl_dpo", "train", hf_cache)
    assert len(split_paths(dpo, "train")) == min(SHARDS, len(expected))
    assert list(nemo_rl_load_dataset_from_path(str(dpo / "train-*.parquet"), own_cache(hf_cache, dpo))) == expected
    assert list(nemo_rl_load_dataset_from_path(str(dpo), own_cache(hf_cache, dpo))) == expected
