"""The dataset card's YAML header: the license and tags come from the config."""

import yaml

from trajectory_assets.exports.card import front_matter


def manifest(card: dict) -> dict:
    return {
        "export": "trl_sft", "config_section": "sft", "features": [{"name": "messages", "dtype": "string"}],
        "config": {"card": card},
        "files": {"train.parquet": {"rows": 3, "bytes": 100}, "validation.parquet": {"rows": 0, "bytes": 10}},
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


def test_only_splits_with_rows_are_declared():
    header = header_of({"license": "unknown", "tags": []})
    assert header["configs"][0]["data_files"] == [{"split": "train", "path": "train.parquet"}]
    assert header["dataset_info"]["splits"] == [{"name": "train", "num_bytes": 100, "num_examples": 3}]
