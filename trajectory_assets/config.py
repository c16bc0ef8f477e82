"""Pipeline configuration: one YAML file, validated by pydantic with readable errors.

Every field has a default, so an empty (or absent) config file is a valid config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SplitConfig(_Section):
    validation_fraction: float = Field(0.1, ge=0.0, le=1.0, description="share of tasks held out")
    seed: str = Field("trajectory-assets", description="salt of the task_key hash that assigns splits")


class SftConfig(_Section):
    # NeMo Gym's SFT tutorial filters at reward >= 0.5..0.8; 0.5 keeps the lenient end.
    min_reward: float | None = Field(
        0.5, description="keep trajectories with reward >= this (rows without a reward pass); null = no filter"
    )
    require_completed: bool = True
    exclude_mask_sample: bool = True
    exclude_unanswered_tool_calls: bool = Field(True, description="drop runs that end on a call no tool answered")
    exclude_quality_flags: list[str] = Field(
        default_factory=list,
        description="drop trajectories carrying any of these quality flags (the Hermes flags, formats/hermes.py)",
    )


class DpoConfig(_Section):
    pairing: Literal["best_vs_worst", "exactly_two"] = Field(
        "best_vs_worst",
        description="best_vs_worst: highest vs lowest reward of each task; exactly_two: the seed's rule, "
        "only tasks with exactly two rollouts",
    )
    min_margin: float = Field(0.1, ge=0.0, description="minimum reward_chosen - reward_rejected (seed: 0.1)")
    require_completed: bool = True
    exclude_mask_sample: bool = True


class GrpoConfig(_Section):
    default_agent_ref: str | None = Field(
        None, description="agent name for NeMo Gym tasks whose rollouts carry no agent_ref; null = skip them"
    )
    hermes_agent_ref: str | None = Field(
        "hermes_agent", description="agent name for tasks from Hermes trajectories (which name none); null = skip"
    )
    exclude_mask_sample: bool = False


class RedactionConfig(_Section):
    enabled: bool = Field(True, description="replace secrets (API keys, tokens, private keys, passwords) "
                                            "with typed placeholders before anything is stored")
    emails: bool = Field(False, description="also replace e-mail addresses")


class PipelineConfig(_Section):
    redaction: RedactionConfig = RedactionConfig()
    split: SplitConfig = SplitConfig()
    sft: SftConfig = SftConfig()
    dpo: DpoConfig = DpoConfig()
    grpo: GrpoConfig = GrpoConfig()


class ConfigError(Exception):
    pass


def load_config(path: str | Path | None) -> PipelineConfig:
    if path is None:
        return PipelineConfig()
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"config {path} is not valid YAML: {error}") from None
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in error.errors()
        )
        raise ConfigError(f"config {path} is invalid: {problems}") from None
