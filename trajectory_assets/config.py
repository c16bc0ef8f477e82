"""Pipeline configuration: one YAML file, validated by pydantic with readable errors.

Every field has a default, so an empty (or absent) config file is a valid config.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# which assistant messages of an SFT row are training targets (the rules: chat/training.py)
TrainingRule = Literal["all_assistant", "final_assistant", "after_last_user", "not_after_failed_tool_call"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SplitConfig(_Section):
    validation_fraction: float = Field(0.1, ge=0.0, le=1.0, description="share of tasks held out")
    seed: str = Field("trajectory-assets", description="salt of the task_key hash that assigns splits")


class Curation(_Section):
    """Curation knobs shared by every export; each export section sets its own defaults.

    Trajectory filters run first (vectorized over flat columns), then de-duplication of
    the surviving trajectories, then balancing of the export's rows (SFT rows, DPO pairs,
    GRPO tasks): a cap per ``task_type`` and a sample. Balancing ranks rows by a hash of
    ``seed`` and the row's id, so it is deterministic and independent of file order.
    """

    min_reward: float | None = Field(None, description="keep trajectories with reward >= this "
                                                       "(rows without a reward pass); null = no filter")
    require_completed: bool = Field(
        True, description="only runs that completed: response.status completed; Hermes: completed: true, not "
                          "partial, and no failure saved as completed (an error or \"(empty)\" as the final turn)")
    exclude_mask_sample: bool = Field(True, description="the verifier flagged the reward as unreliable")
    exclude_unanswered_tool_calls: bool = Field(False, description="drop runs that end on a call no tool answered")
    exclude_summary_as_assistant: bool = Field(
        True, description="drop runs where a harness's context summary stands as an assistant turn (Hermes' "
                          "context compressor): training on it teaches the model to answer with summaries")
    exclude_quality_flags: list[str] = Field(
        default_factory=list,
        description="drop trajectories carrying any of these quality flags (the Hermes flags, sources/hermes.py)",
    )
    min_turns: int | None = Field(None, ge=1, description="minimum assistant turns")
    max_turns: int | None = Field(None, ge=1, description="maximum assistant turns")
    max_tokens: int | None = Field(
        None, ge=1,
        description="token budget of a row: with `tokenizer` set, its length under that tokenizer's chat template "
                    "(what the trainer sees); without, the total_tokens the rollout's usage recorded (rows without "
                    "usage pass)",
    )
    over_token_budget: Literal["drop", "truncate"] = Field(
        "drop",
        description="a row over max_tokens (measured with `tokenizer`) is left out and counted (drop), or cut after "
                    "its last assistant turn that still fits (truncate; needs `tokenizer`)",
    )
    max_chars: int | None = Field(None, ge=1, description="maximum length of the messages as JSON, in characters")
    max_tool_error_rate: float | None = Field(
        None, ge=0.0, le=1.0,
        description="maximum share of tool results that failed (chat/messages.py tool_result_failed); "
                    "rows without tool results pass",
    )
    dedup: Literal["none", "exact", "near"] = Field(
        "exact",
        description="exact: one trajectory per identical conversation (SHA-256 of messages + tools); "
                    "near: also drop conversations whose MinHash Jaccard similarity to a kept one is >= "
                    "near_duplicate_threshold",
    )
    near_duplicate_threshold: float = Field(0.9, gt=0.0, le=1.0, description="Jaccard similarity for dedup: near")
    max_per_task_type: int | None = Field(None, ge=1, description="cap of rows per task_type (balancing); "
                                                                  "rows without a task_type form one group")
    sample_fraction: float = Field(1.0, gt=0.0, le=1.0, description="deterministic share of rows kept")
    seed: str = Field("trajectory-assets", description="salt of the hash that ranks rows for caps and sampling")
    reverified_reward: Literal["reverified", "original"] = Field(
        "reverified",
        description="a NeMo Gym rollout read both from its rollouts file and from a re-verification of it (gym eval "
                    "reverify): which copy is kept; the other is counted as superseded",
    )

    @model_validator(mode="after")
    def _turn_range(self) -> "Curation":
        if self.min_turns is not None and self.max_turns is not None and self.min_turns > self.max_turns:
            raise ValueError(f"min_turns ({self.min_turns}) is greater than max_turns ({self.max_turns})")
        return self


class SftConfig(Curation):
    train_on: TrainingRule = Field(
        "all_assistant",
        description="which assistant messages are training targets (chat/training.py): every one, the final one, "
                    "those after the last user turn, or all but those right after a failed tool call; a turn the "
                    "harness wrote (a context summary) never is. Axolotl carries it per message; the other trainer "
                    "forms leave out the rows their switch cannot reproduce (needs_per_message_mask)",
    )
    # NeMo Gym's SFT tutorial filters at reward >= 0.5..0.8; 0.5 keeps the lenient end.
    min_reward: float | None = Field(0.5, description="keep trajectories with reward >= this "
                                                      "(rows without a reward pass); null = no filter")
    exclude_unanswered_tool_calls: bool = Field(True, description="drop runs that end on a call no tool answered")
    # training on calls whose arguments are not JSON teaches the model to emit broken calls
    exclude_quality_flags: list[str] = Field(
        default_factory=lambda: ["unparseable_tool_call"],
        description="drop trajectories carrying any of these quality flags (sources/hermes.py, sources/nemo_gym.py)",
    )


class DpoConfig(Curation):
    pairing: Literal["best_vs_worst", "exactly_two", "all_pairs_with_margin", "dominance"] = Field(
        "best_vs_worst",
        description="best_vs_worst: highest vs lowest reward of each task; exactly_two: the seed's rule, "
        "only tasks with exactly two rollouts; all_pairs_with_margin: every pair of a task whose margin "
        "is >= min_margin, widest first, at most max_pairs_per_task; dominance: as all_pairs_with_margin, "
        "but only pairs whose chosen rollout is at least as good on every reward component and better on "
        "one (multi-objective verifiers' reward_components)",
    )
    min_margin: float = Field(0.1, ge=0.0, description="minimum reward_chosen - reward_rejected (seed: 0.1)")
    max_pairs_per_task: int = Field(4, ge=1, description="cap of pairs per task for all_pairs_with_margin")


class GrpoConfig(Curation):
    # a source format routes its tasks to one of these settings (SourceFormat.agent_ref_setting);
    # a format that names none, to this one
    default_agent_ref: str | None = Field(
        None, description="agent name for NeMo Gym tasks whose rollouts carry no agent_ref, and for tasks of a "
                          "source format with no agent setting of its own; null = skip them"
    )
    hermes_agent_ref: str | None = Field(
        "hermes_agent", description="agent name for tasks from Hermes trajectories (which name none); null = skip"
    )
    # Harbor's agents (terminus-2, claude-code, ...) are harnesses, not NeMo Gym agent servers:
    # a task is routed to one only when the user names it
    atif_agent_ref: str | None = Field(
        None, description="agent name for tasks from ATIF trajectories (whose agent names no NeMo Gym agent); "
                          "null = skip them"
    )
    # A task is a prompt to roll out again, so rollouts that did not complete still tell
    # how hard it is, and a masked reward says nothing about the prompt itself.
    require_completed: bool = Field(False, description="only rollouts that completed count for a task")
    exclude_mask_sample: bool = Field(False, description="ignore rollouts whose reward is flagged unreliable")
    # a task row holds the prompt only, and the rollout's reward still tells how hard it is
    exclude_summary_as_assistant: bool = Field(False, description="ignore rollouts where a harness's context "
                                                                  "summary stands as an assistant turn")
    dedup: Literal["none", "exact", "near"] = Field("none", description="de-duplicate rollouts before grouping")
    zero_variance_groups: Literal["drop", "flag", "keep"] = Field(
        "drop",
        description="tasks whose rollouts (two or more, with rewards) all got the same reward give GRPO no "
                    "learning signal: drop them, flag them (zero_variance: true), or keep them as they are",
    )
    pass_threshold: float = Field(1.0, description="a rollout passes when reward >= this (pass rate, pass@k)")

    @model_validator(mode="after")
    def _prompts_are_never_cut(self) -> "GrpoConfig":
        if self.over_token_budget == "truncate":
            raise ValueError("over_token_budget: truncate would cut a task's prompt; GRPO can only drop (drop)")
        return self


class ConversionConfig(_Section):
    """How rollouts are read where real producers write something genuinely ambiguous.
    The defaults read them as their own ecosystem does (sources/nemo_gym.py)."""

    inline_reasoning: bool = Field(
        True,
        description="a <think>...</think> block at the start of assistant text (a reasoning model served "
                    "without a reasoning parser; also text that opens inside the block, as R1-style templates "
                    "leave it) becomes reasoning_content, as vLLM's deepseek_r1 reasoning parser splits it",
    )
    request_boundary: Literal["merge", "split"] = Field(
        "merge",
        description="model items at the end of the request input followed by model items at the start of the "
                    "output (a turn cut where the harness recorded the request): merge = one assistant message, "
                    "as NeMo Gym's converter reads input followed by output; split = two assistant messages, "
                    "the input's in the prompt",
    )
    per_step_output: Literal["final", "reject"] = Field(
        "final",
        description="a NeMo Gym output recorded as a list of per-step transcripts (Aviary's return_transitions): "
                    "final = the last transcript is the conversation; reject = quarantine as per_step_transcripts",
    )
    read_unsafe_reverified: bool = Field(
        False,
        description="read a forced re-verification (gym eval reverify --force writes unsafe_<output>.jsonl: the "
                    "verifier did not declare itself safe to re-run); off: its rows are quarantined as "
                    "ng_reverify_unsafe",
    )


class RedactionConfig(_Section):
    enabled: bool = Field(True, description="replace secrets (API keys, tokens, private keys, passwords) "
                                            "with typed placeholders before anything is stored")
    emails: bool = Field(False, description="also replace e-mail addresses")
    allowlist: list[str] = Field(
        default_factory=list,
        description="regexes: a secret that one of them matches in full is left as it is (a published test key)",
    )
    extra_rules: dict[str, str] = Field(
        default_factory=dict,
        description="name -> regex of an in-house token format: each match (or its group named `secret`) "
                    "becomes [REDACTED:name]; the regex must contain a fixed text of 3+ characters (such as a "
                    "prefix `acme_`) that every match holds, which the prefilter looks for",
    )  # checked where they are used, by redaction (``redactor.check_rules``): the CLI before a run, ingest
    # before it redacts. Checking them here would tie every asset's code version to the redactor

    @field_validator("allowlist")
    @classmethod
    def _allowlist_compiles(cls, patterns: list[str]) -> list[str]:
        for index, pattern in enumerate(patterns):
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"allowlist[{index}] {pattern!r} is not a valid regex: {error}") from None
        return patterns


class ShardsConfig(_Section):
    """How the export phase divides a dataset: shards of contiguous prompt buckets
    (``trajectory_assets/buckets.py``), each read once and rendered in every export."""

    # 5,000 trajectories hold about 90 MB of payloads at the 1 GB benchmark corpus's mean
    # (about 17 KB each) and cut that corpus into 12 shards. Measured there against 2,500 (24
    # shards): 11% less CPU for the whole run, for a longest shard step of 3.3 s of CPU
    # instead of 2.2 s (docs/performance.md, "the third round")
    target_trajectories: int = Field(
        5000, ge=1,
        description="trajectories per shard of the exports (a bucket is never cut, so a shard may hold more); "
                    "changing it re-reads no batch and changes no row, only how the files are cut")


class ReportConfig(_Section):
    samples_per_export: int = Field(3, ge=0, le=50, description="rows of each export shown in the report page's "
                                                                "trajectory viewer")
    quarantine_examples: int = Field(3, ge=0, le=50, description="raw records shown per quarantine reason")
    seed: str = Field("trajectory-assets", description="salt of the hash that picks the viewer's samples")


class CardConfig(_Section):
    """What each export's dataset card declares in its Hugging Face YAML front matter."""

    license: str = Field("unknown", description="license identifier of the exported data (Hub license ids such as "
                                                "apache-2.0, cc-by-4.0; unknown when not known)")
    tags: list[str] = Field(default_factory=list, description="extra Hub tags for every export (each card also "
                                                              "gets its family, format and trainer tags)")


BENCHMARK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class BenchmarkConfig(_Section):
    """One evaluation set no export may train on (``ingest/decontamination.py``)."""

    name: str = Field(description="named in the manifests and the report: contaminated:<name>")
    path: str = Field(description="a local JSON-lines (.jsonl/.json) or Parquet (.parquet) file, or a folder "
                                  "written by datasets' save_to_disk (needs the datasets package)")
    text_fields: list[str] = Field(
        default_factory=list,
        description="fields whose text is compared by n-grams (a dotted path into nested objects; a list of "
                    "strings counts each), e.g. [question] or [problem_statement]",
    )
    id_field: str | None = Field(None, description="field holding the item's id (e.g. instance_id): a rollout "
                                                   "carrying the same id is contaminated whatever its text")
    task_id_field: str | None = Field(
        None,
        description="where a rollout carries that id (a dotted path), looked up in its verifier inputs, its "
                    "extra keys and its request's metadata; null = the id_field's name",
    )

    @field_validator("name")
    @classmethod
    def _name_is_plain(cls, name: str) -> str:
        if not BENCHMARK_NAME.fullmatch(name):
            raise ValueError(f"benchmark name {name!r} must be letters, digits, '_', '.' or '-' (at most 64), "
                             "since it becomes the exclusion reason contaminated:<name>")
        return name

    @model_validator(mode="after")
    def _compares_something(self) -> "BenchmarkConfig":
        if not self.text_fields and self.id_field is None:
            raise ValueError(f"benchmark {self.name!r} names neither text_fields nor id_field: nothing to compare")
        if self.task_id_field is not None and self.id_field is None:
            raise ValueError(f"benchmark {self.name!r}: task_id_field needs id_field")
        return self


class DecontaminationConfig(_Section):
    """Evaluation sets every export leaves out (by n-gram overlap or task id); none by default."""

    benchmarks: list[BenchmarkConfig] = Field(
        default_factory=list, description="evaluation sets; a trajectory matching any is left out of every export")
    ngram: int = Field(13, ge=1, le=256, description="words per n-gram (13: NeMo Curator; datatrove uses 12)")

    @field_validator("benchmarks")
    @classmethod
    def _names_are_unique(cls, benchmarks: list[BenchmarkConfig]) -> list[BenchmarkConfig]:
        names = [benchmark.name for benchmark in benchmarks]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"benchmark names must be unique: {', '.join(repeated)} appear more than once")
        return benchmarks


class PipelineConfig(_Section):
    conversion: ConversionConfig = ConversionConfig()
    redaction: RedactionConfig = RedactionConfig()
    split: SplitConfig = SplitConfig()
    tokenizer: str | None = Field(
        None,
        description="a Hugging Face tokenizer (local path or hub name) whose chat template measures every export "
                    "row in tokens; null = rows are not measured",
    )
    card: CardConfig = CardConfig()
    sft: SftConfig = SftConfig()
    dpo: DpoConfig = DpoConfig()
    grpo: GrpoConfig = GrpoConfig()
    decontamination: DecontaminationConfig = DecontaminationConfig()
    shards: ShardsConfig = ShardsConfig()
    report: ReportConfig = ReportConfig()

    @property
    def near_dedup(self) -> bool:
        """Whether a family leaves out near copies (``dedup: near``): ingest then stores each
        trajectory's MinHash signature beside its batch (``ingest/near_signatures.py``)."""
        return any(section.dedup == "near" for section in (self.sft, self.dpo, self.grpo))

    @model_validator(mode="after")
    def _truncation_needs_a_tokenizer(self) -> "PipelineConfig":
        cutting = [name for name in ("sft", "dpo") if getattr(self, name).over_token_budget == "truncate"]
        if cutting and self.tokenizer is None:
            raise ValueError(f"{', '.join(cutting)}: over_token_budget: truncate needs `tokenizer` to measure rows")
        return self


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
