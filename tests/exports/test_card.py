"""The dataset card's YAML header: the license and tags come from the config."""

import yaml

from trajectory_assets.exports.card import front_matter


def manifest(card: dict) -> dict:
    return {
        "export": "trl_sft", "config_section": "sft", "features": [{"name": "messages", "dtype": "string"}],
        "config": {"card": card},
        "files": {"train-00000-of-00002.parquet": {"split": "train", "rows": 3, "bytes": 100},
                  "train-00001-of-00002.parquet": {"split": "train", "rows": 2, "bytes": 80},
                  "validation-00000-of-00001.parquet": {"split": "validation", "rows": 0, "bytes": 10}},
    }


def header_of(card: dict) -> dict:
    text = front_matter(manifest(card))
    assert text.startswith("---\n") and text.endswith("---\n")
    return yaml.safe_load(text.strip("-\n"))


def test_the_configured_license_and_tags_reach_the_header():
    header = header_of({"license": "apache-2.0", "tags": ["tool-use", "sft"]})
    assert header["license"] == "apache-2.0"
    # the config's tags follow the card's own, each once
    assert header["tags"] == ["trajectory-assets", "agent-trajectories", "sft", "trl-sft", "tool-use"]


def test_only_splits_with_rows_are_declared_each_by_a_glob_of_its_files():
    header = header_of({"license": "unknown", "tags": []})
    assert header["configs"][0]["data_files"] == [{"split": "train", "path": "train-*.parquet"}]
    assert header["dataset_info"]["splits"] == [{"name": "train", "num_bytes": 180, "num_examples": 5}]
    assert header["dataset_info"]["download_size"] == 180


def test_a_manifest_written_before_shards_still_gets_a_header():
    before = manifest({"license": "unknown", "tags": []})
    before["files"] = {"train.jsonl": {"rows": 3, "bytes": 100}, "validation.jsonl": {"rows": 0, "bytes": 0}}
    header = yaml.safe_load(front_matter(before).strip("-\n"))
    assert header["configs"][0]["data_files"] == [{"split": "train", "path": "train-*.jsonl"}]
