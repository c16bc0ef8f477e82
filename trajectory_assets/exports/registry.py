"""Every export, defined once.

An :class:`ExportSpec` is all there is to know about one export: its family (the config
section that curates it and the step that builds it), its renderer, its Pandera contract,
the Arrow schema of its rows, where its fields come from, what its manifest measures and
what it is for. Everything else derives from :data:`EXPORTS`: the Dagster assets and their
checks (``defs/exports.py``), the CLI's ``--exports`` choices, the frame dtypes the
renderers fill (from the contract), the README's export table (checked by a test) and the
definitions snapshot.

Adding an export: write its renderer beside its family's in ``families.py``, its contract
in ``schemas/``, its Arrow schema in ``formats/``, then one ``ExportSpec`` here.

>>> [spec.name for spec in EXPORTS if spec.family == "dpo"]
['dpo', 'trl_dpo', 'nemo_rl_dpo']
>>> EXPORTS_BY_NAME["trl_sft"].asset_name
'trl_sft_dataset'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson
import pandas as pd
import pandera.pandas as pandera
import pyarrow as pa

from schemas.dpo import DpoSchema
from schemas.grpo import GrpoSchema
from schemas.llama_factory import LlamaFactorySchema
from schemas.nemo_rl import NemoRlDpoSchema, NemoRlSftSchema
from schemas.sft import SftSchema
from schemas.sft_hermes import SftHermesSchema
from schemas.token_data import TokensSchema
from schemas.trl import TrlDpoSchema, TrlGrpoSchema, TrlSftSchema
from schemas.validation import declared_dtypes
from schemas.verl import VerlSchema
from trajectory_assets.config import SplitConfig
from trajectory_assets.exports import families
from trajectory_assets.exports.families import ExportFrame, FrameTable, TrajectoryTable, collect
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.exports.llama_factory import LLAMA_FACTORY_SCHEMA, dataset_info
from trajectory_assets.exports.nemo_rl import NEMO_RL_DPO_SCHEMA, NEMO_RL_SFT_SCHEMA
from trajectory_assets.exports.seed import DPO_SCHEMA, GRPO_SCHEMA, SFT_HERMES_SCHEMA, SFT_SCHEMA
from trajectory_assets.chat.token_data import TOKENS_ARROW_SCHEMA
from trajectory_assets.exports.trl import TRL_DPO_SCHEMA, TRL_GRPO_SCHEMA, TRL_SFT_SCHEMA
from trajectory_assets.exports.verl import VERL_ARROW_SCHEMA

SEED_GROUP = "exports"  # the formats of the seed specs
FLAVORS_GROUP = "trainer_flavors"  # the same units in the form a trainer reads


@dataclass(frozen=True)
class ExportSpec:
    name: str  # also the folder under exports/ and the CLI's name for it
    family: str  # sft / dpo / grpo
    # the family's unit (SftItem, PairItem, TaskItem) -> the contract's flat columns + ``record``;
    # raises Unrepresentable for a unit this format cannot express
    render: Callable[[Any], dict[str, Any]]
    contract: type[pandera.DataFrameModel]
    # the Arrow types of its rows: Parquet is written with them, and the dataset card declares
    # them to HF datasets for JSON lines too
    arrow_schema: pa.Schema
    # export field -> the validated_trajectories columns it is made from (shown in the UI)
    lineage: dict[str, list[str]]
    description: str
    group: str = SEED_GROUP
    file_format: str = "jsonl"  # or "parquet"
    # numeric frame columns whose distribution the manifest and the card report
    measures: tuple[str, ...] = ()
    # trajectory columns it needs beyond what its family reads (read only when it is built)
    columns: tuple[str, ...] = ()
    # name -> content of a trainer's index file written beside the splits
    index_files: Callable[[str], dict[str, bytes]] | None = None

    @property
    def asset_name(self) -> str:
        return f"{self.name}_dataset"

    @cached_property  # asked for every chunk; the contract does not change
    def checks_margin(self) -> bool:
        return "quality_difference" in self.contract.to_schema().columns

    @property
    def column_descriptions(self) -> dict[str, str]:
        """What each field of the written rows holds. The contract checks flat columns derived
        from the rows (``role_shape``, ``fields``, counts), not the rows' fields, so these come
        from ``FIELD_DESCRIPTIONS``, not from the contract."""
        return {name: FIELD_DESCRIPTIONS[name] for name in self.arrow_schema.names}

    @cached_property
    def frame(self) -> dict[str, Any]:
        """The dtypes of the renderer's flat columns: the contract's columns but ``split``
        (added from ``prompt_key``) and ``fields`` (from the record), as the contract declares
        them (strings Arrow-backed)."""
        return {name: dtype for name, dtype in declared_dtypes(self.contract).items() if name not in DERIVED_COLUMNS}


# the contract columns every export's frame derives itself rather than its renderer
DERIVED_COLUMNS = ("split", "fields")

# What each field of the export rows holds (shown as the assets' column descriptions in the UI);
# a field means the same in every export that has it.
FIELD_DESCRIPTIONS = {
    "messages": "the whole conversation: system, user, assistant (with reasoning_content and tool_calls) and tool "
                "messages",
    "tools": "the tools offered to the model, as Chat Completions tool objects (null: none)",
    "reward": "the rollout's reward (null: none recorded)",
    "task_type": "the task's type or environment, if recorded",
    "trajectory_id": "the rollout's id in validated_trajectories (SHA-256 of its raw line)",
    "task_key": "the task the rows were grouped by (validated_trajectories.task_key)",
    "prompt": "the prompt messages: system and user turns up to the model's first turn",
    "chosen": "the preferred completion: the messages after the shared prompt",
    "rejected": "the other completion, with a lower reward",
    "quality_difference": "reward_chosen - reward_rejected (> 0)",
    "reward_chosen": "the chosen rollout's reward",
    "reward_rejected": "the rejected rollout's reward",
    "chosen_id": "the chosen rollout's trajectory_id",
    "rejected_id": "the rejected rollout's trajectory_id",
    "pairing": "the pairing rule that made the pair (dpo.pairing)",
    "conversations": "the conversation as ShareGPT turns {from, value}",
    "responses_create_params": "the request to replay (NeMo Gym's responses_create_params)",
    "agent_ref": "the NeMo Gym agent that runs the task {type, name}",
    "trajectory_ids": "the task's rollouts in validated_trajectories",
    "num_rollouts": "how many rollouts of the task were collected",
    "mean_reward": "the mean reward of the task's rollouts",
    "reward_std": "the standard deviation of the task's rewards",
    "pass_rate": "the share of the task's rollouts at or above grpo.pass_threshold",
    "zero_variance": "whether every rollout of the task got the same reward",
    "ground_truth": "what the reward function checks against (the verifier's expected answer), as JSON text",
    "agent_name": "the agent that ran the task",
    "data_source": "verl's reward-function key: the agent",
    "ability": "verl's task category: the task_type, else the agent",
    "reward_model": "verl's {style: rule, ground_truth}",
    "extra_info": "verl's extra fields: split, index, task_key, agent, tools and their kwargs, rollout statistics",
    "system": "the system prompt",
    "context": "the shared prompt messages (NeMo RL's context)",
    "completions": "the two ranked completions {rank, completion}; rank 0 is preferred",
    "model": "the model that generated the tokens",
    "calls": "per model call: its message's index, the prompt's and the generation's token ids, and the log "
             "probability of each generated token",
    "contiguous": "whether every call's prompt extends all the tokens before it",
}

SFT_LINEAGE = {"messages": ["messages"], "tools": ["tools"], "reward": ["reward"], "task_type": ["task_type"],
               "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]}
DPO_LINEAGE = {"prompt": ["messages"], "chosen": ["messages"], "rejected": ["messages"], "tools": ["tools"],
               "reward_chosen": ["reward"], "reward_rejected": ["reward"], "quality_difference": ["reward"],
               "chosen_id": ["trajectory_id"], "rejected_id": ["trajectory_id"], "task_key": ["task_key"]}
TASK_LINEAGE = {"task_key": ["task_key"], "trajectory_ids": ["trajectory_id"], "mean_reward": ["reward"],
                "pass_rate": ["reward"], "agent_ref": ["agent_ref", "agent_name"]}
DPO_MEASURES = ("quality_difference", "reward_chosen", "reward_rejected")


def _llama_factory_index(export: str) -> dict[str, bytes]:
    files = {split: f"{split}.jsonl" for split in families.SPLITS}
    return {"dataset_info.json": orjson.dumps(dataset_info(f"trajectory_assets_{export}", files),
                                              option=orjson.OPT_INDENT_2)}


EXPORTS: tuple[ExportSpec, ...] = (
    ExportSpec(
        "sft", "sft", families.sft_record, SftSchema, SFT_SCHEMA, SFT_LINEAGE,
        "Supervised fine-tuning conversations in OpenAI Chat Completions form (the NeMo Gym seed SFT format).",
        measures=("reward",)),
    ExportSpec(
        "dpo", "dpo", families.dpo_record, DpoSchema, DPO_SCHEMA, DPO_LINEAGE,
        "Preference pairs `{prompt, chosen, rejected}` from rollouts of the same task (the seed DPO format).",
        measures=DPO_MEASURES),
    ExportSpec(
        "sft_hermes", "sft", families.sft_hermes_record, SftHermesSchema, SFT_HERMES_SCHEMA,
        {"conversations": ["messages", "tools"], "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
        "The SFT conversations rendered as Hermes Agent ShareGPT (`<think>`, `<tool_call>`, `<tool_response>` markup "
        "and the function-calling system prompt)."),
    ExportSpec(
        "grpo", "grpo", families.grpo_record, GrpoSchema, GRPO_SCHEMA,
        {"responses_create_params": ["request"], **TASK_LINEAGE},
        "One NeMo Gym RL input per task `{responses_create_params, agent_ref}` (the seed GRPO format).",
        measures=("mean_reward",)),
    ExportSpec(
        "trl_sft", "sft", families.trl_sft_record, TrlSftSchema, TRL_SFT_SCHEMA, SFT_LINEAGE,
        "TRL conversational SFT: `messages` (tool-call arguments as JSON objects) plus `tools` (`trl.SFTTrainer`).",
        group=FLAVORS_GROUP, file_format="parquet", measures=("reward",)),
    ExportSpec(
        "trl_dpo", "dpo", families.trl_dpo_record, TrlDpoSchema, TRL_DPO_SCHEMA, DPO_LINEAGE,
        "TRL explicit-prompt conversational preferences `{prompt, chosen, rejected}` plus `tools` (`trl.DPOTrainer`).",
        group=FLAVORS_GROUP, file_format="parquet", measures=DPO_MEASURES),
    ExportSpec(
        "trl_grpo", "grpo", families.trl_grpo_record, TrlGrpoSchema, TRL_GRPO_SCHEMA,
        {"prompt": ["messages", "prompt_length"], "tools": ["tools"], "ground_truth": ["metadata"], **TASK_LINEAGE},
        "TRL prompt-only rows `{prompt}`; every other column reaches the reward functions (`trl.GRPOTrainer`).",
        group=FLAVORS_GROUP, file_format="parquet", measures=("mean_reward",)),
    ExportSpec(
        "verl", "grpo", families.verl_record, VerlSchema, VERL_ARROW_SCHEMA,
        {"prompt": ["messages", "prompt_length"], "data_source": ["agent_ref", "agent_name"],
         "agent_name": ["tools"], "ability": ["task_type"], "reward_model": ["metadata"],
         "extra_info": ["task_key", "trajectory_id", "reward", "tools", "metadata"]},
        "verl RL Parquet: `data_source`, `prompt`, `ability`, `reward_model`, `extra_info`.",
        group=FLAVORS_GROUP, file_format="parquet", measures=("mean_reward",)),
    ExportSpec(
        "llama_factory", "sft", families.llama_factory_record, LlamaFactorySchema, LLAMA_FACTORY_SCHEMA,
        {"conversations": ["messages"], "system": ["messages"], "tools": ["tools"],
         "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
        "LLaMA-Factory ShareGPT with `system` and `tools` columns, registered in `dataset_info.json`.",
        group=FLAVORS_GROUP, index_files=_llama_factory_index),
    ExportSpec(
        "nemo_rl_sft", "sft", families.nemo_rl_sft_record, NemoRlSftSchema, NEMO_RL_SFT_SCHEMA, SFT_LINEAGE,
        "NeMo RL SFT `openai_format`: `messages` (arguments as JSON objects, ending with the assistant's turn) plus "
        "`tools`; load with `use_preserving_dataset: true`.",
        group=FLAVORS_GROUP, measures=("reward",)),
    ExportSpec(
        "nemo_rl_dpo", "dpo", families.nemo_rl_dpo_record, NemoRlDpoSchema, NEMO_RL_DPO_SCHEMA,
        {"context": ["messages"], "completions": ["messages", "reward"],
         **{k: v for k, v in DPO_LINEAGE.items() if k not in ("prompt", "chosen", "rejected")}},
        "NeMo RL DPO preferences: `context` plus two `completions` `{rank, completion}` (rank 0 preferred, no ties) "
        "and `tools`.",
        group=FLAVORS_GROUP, file_format="parquet", measures=DPO_MEASURES),
    ExportSpec(
        "on_policy_tokens", "sft", families.tokens_record, TokensSchema, TOKENS_ARROW_SCHEMA,
        {"calls": ["token_data"], "contiguous": ["token_data"], "reward": ["reward"], "model": ["model"],
         "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
        "The SFT trajectories at the token level, for on-policy distillation: per model call the prompt's and the "
        "generation's token ids and the policy's log probabilities, as NeMo Gym recorded them (`contiguous`: every "
        "call extends the tokens before it, as NeMo RL needs).",
        group=FLAVORS_GROUP, file_format="parquet", measures=("generated_tokens", "calls"),
        columns=("token_data", "model")),
)
EXPORTS_BY_NAME: dict[str, ExportSpec] = {spec.name: spec for spec in EXPORTS}
EXPORT_FAMILIES: tuple[str, ...] = tuple(families.FAMILY_BUILDERS)


def family_specs(family: str) -> list[ExportSpec]:
    return [spec for spec in EXPORTS if spec.family == family]


def iter_family(family: str, table: TrajectoryTable, config: Any, split: SplitConfig, specs: list[ExportSpec],
                budget: TokenBudget | None = None) -> Iterator[dict[str, ExportFrame]]:
    """Per chunk, one frame per export of the family in ``specs`` (planned and read once for all)."""
    builder = families.FAMILY_BUILDERS[family]
    yield from builder(table, config, split, {spec.name: spec for spec in specs}, budget)


def iter_export(name: str, table: TrajectoryTable, config: Any, split: SplitConfig,
                budget: TokenBudget | None = None) -> Iterator[ExportFrame]:
    """One export alone, chunk by chunk."""
    spec = EXPORTS_BY_NAME[name]
    for frames in iter_family(spec.family, table, config, split, [spec], budget):
        yield frames[name]


def build(name: str, trajectories: pd.DataFrame, config: Any, split: SplitConfig,
          budget: TokenBudget | None = None) -> ExportFrame:
    """One export over an in-memory trajectory frame, collected into one frame (tests, small data).

    ``config`` is the export's family section (``SftConfig``, ``DpoConfig``, ``GrpoConfig``).
    """
    return collect(iter_export(name, FrameTable(trajectories), config, split, budget))


def markdown_table() -> str:
    """The README's table of exports (a test keeps the README equal to it)."""
    lines = ["| asset | family | files in `exports/<export>/` | fields | what it is |", "|---|---|---|---|---|"]
    for spec in EXPORTS:
        extra = "".join(f", `{name}`" for name in (spec.index_files(spec.name) if spec.index_files else {}))
        fields = ", ".join(f"`{name}`" for name in spec.arrow_schema.names)
        lines.append(f"| `{spec.asset_name}` | {spec.family} | `{{train,validation}}.{spec.file_format}`{extra} "
                     f"| {fields} | {spec.description} |")
    return "\n".join(lines)
