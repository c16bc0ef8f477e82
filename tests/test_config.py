import re

import pytest

from trajectory_assets.config import ConfigError, PipelineConfig, load_config
from tests.conftest import PROJECT_ROOT


def test_no_file_and_empty_file_give_the_defaults(tmp_path):
    empty = tmp_path / "c.yaml"
    empty.write_text("")
    assert load_config(None) == load_config(empty) == PipelineConfig()


def test_example_config_is_valid_and_equals_the_defaults():
    assert load_config(PROJECT_ROOT / "config.example.yaml") == PipelineConfig()


@pytest.mark.parametrize(
    "text, message",
    [
        ("sft:\n  min_reward: lots\n", "sft.min_reward"),
        ("split:\n  validation_fraction: 1.5\n", "split.validation_fraction"),
        ("dpo:\n  pairing: random\n", "dpo.pairing"),
        ("sfy:\n  min_reward: 1\n", "sfy"),
        ("sft: [unclosed\n", "not valid YAML"),
        ("redaction:\n  allowlist: ['ghp_[']\n", "redaction.allowlist: Value error, allowlist[0] 'ghp_[' is not a valid regex"),
        ("redaction:\n  extra_rules: [acme_]\n", "redaction.extra_rules"),
    ],
)
def test_invalid_config_names_the_problem(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_values_are_read():
    config = PipelineConfig.model_validate({"sft": {"min_reward": None}, "dpo": {"pairing": "exactly_two"}})
    assert config.sft.min_reward is None and config.dpo.pairing == "exactly_two"


def test_redaction_rules_are_read():
    config = PipelineConfig.model_validate({"redaction": {"allowlist": ["AKIA[A-Z0-9]{16}"],
                                                          "extra_rules": {"acme_token": "acme_[a-z0-9]{32}"}}})
    assert config.redaction.allowlist == ["AKIA[A-Z0-9]{16}"]
    assert config.redaction.extra_rules == {"acme_token": "acme_[a-z0-9]{32}"}
