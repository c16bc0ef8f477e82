"""Every export as an asset: the seed formats (SFT, Hermes SFT, DPO, GRPO) and the trainer
flavors (TRL, LLaMA-Factory, verl). Each line is checked by its contract before it is written."""


import contextlib
import hashlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import dagster as dg
import numpy as np
import orjson
import pandera.pandas as pa
import pyarrow
import pyarrow.parquet as pq

from schemas.dpo import DpoSchema
from schemas.grpo import GrpoSchema
from schemas.llama_factory import LlamaFactorySchema
from schemas.sft import SftSchema
from schemas.sft_hermes import SftHermesSchema
from schemas.trl import TrlDpoSchema, TrlGrpoSchema, TrlSftSchema
from schemas.validation import ContractResult, validate
from schemas.verl import VerlSchema
from trajectory_assets import code_version, layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.datasets import exports
from trajectory_assets.datasets.card import render_card
from trajectory_assets.datasets.manifest import build_manifest, describe
from trajectory_assets.defs.batches import (
    STORAGE_RETRY,
    read_summary,
    registered_batches,
    storage_faults_only,
    stored_trajectories,
)
from trajectory_assets.defs.contracts import column_schema, contract_check_result
from trajectory_assets.defs.resources import PipelineSettings, TrajectoryStorage
from trajectory_assets.formats.llama_factory import dataset_info
from trajectory_assets.formats.trl import TRL_DPO_SCHEMA, TRL_GRPO_SCHEMA, TRL_SFT_SCHEMA
from trajectory_assets.formats.verl import VERL_ARROW_SCHEMA
from trajectory_assets.io.storage import Storage

GROUP = "exports"
FLAVORS_GROUP = "trainer_flavors"


@dataclass(frozen=True)
class ExportKind:
    name: str  # also the folder under exports/
    description: str
    contract: type[pa.DataFrameModel]
    build: Callable[..., Iterator[exports.ExportFrame]]  # (TrajectoryTable, config section, SplitConfig)
    config_section: str  # sft / dpo / grpo: the curation it follows
    # export field -> the validated_trajectories columns it is made from (shown in the UI)
    lineage: dict[str, list[str]]
    group: str = GROUP
    file_format: str = "jsonl"  # or "parquet", written with arrow_schema
    arrow_schema: pyarrow.Schema | None = None
    # numeric frame columns whose distribution the manifest and the card report
    measures: tuple[str, ...] = ()
    # name -> content of a trainer's index file written beside the splits
    index_files: Callable[[str], dict[str, bytes]] | None = None

    @property
    def asset_name(self) -> str:
        return f"{self.name}_dataset"

    @property
    def checks_margin(self) -> bool:
        return "quality_difference" in self.contract.to_schema().columns


SFT_LINEAGE = {"messages": ["messages"], "tools": ["tools"], "reward": ["reward"], "task_type": ["task_type"],
               "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]}
DPO_LINEAGE = {"prompt": ["messages"], "chosen": ["messages"], "rejected": ["messages"], "tools": ["tools"],
               "reward_chosen": ["reward"], "reward_rejected": ["reward"], "quality_difference": ["reward"],
               "chosen_id": ["trajectory_id"], "rejected_id": ["trajectory_id"], "task_key": ["task_key"]}
TASK_LINEAGE = {"task_key": ["task_key"], "trajectory_ids": ["trajectory_id"], "mean_reward": ["reward"],
                "pass_rate": ["reward"], "agent_ref": ["agent_ref", "agent_name"]}
DPO_MEASURES = ("quality_difference", "reward_chosen", "reward_rejected")


def _llama_factory_index(export: str) -> dict[str, bytes]:
    files = {split: f"{split}.jsonl" for split in exports.SPLITS}
    return {"dataset_info.json": orjson.dumps(dataset_info(f"trajectory_assets_{export}", files),
                                              option=orjson.OPT_INDENT_2)}


EXPORT_KINDS = (
    ExportKind("sft", "Supervised fine-tuning rows {messages, tools?, reward?, task_type?} in Chat Completions form.",
               SftSchema, exports.iter_sft, "sft", SFT_LINEAGE, measures=("reward",)),
    ExportKind("dpo", "Preference pairs {prompt, chosen, rejected, quality_difference, reward_chosen, "
               "reward_rejected} from rollouts of the same task.",
               DpoSchema, exports.iter_dpo, "dpo", DPO_LINEAGE, measures=DPO_MEASURES),
    ExportKind("sft_hermes", "The SFT rows (same curation) rendered as Hermes ShareGPT: <think>, <tool_call> and "
               "<tool_response> markup and the function-calling system prompt.",
               SftHermesSchema, exports.iter_sft_hermes, "sft",
               {"conversations": ["messages", "tools"], "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]}),
    ExportKind("grpo", "One NeMo Gym RL input row {responses_create_params, agent_ref} per task.",
               GrpoSchema, exports.iter_grpo, "grpo", {"responses_create_params": ["request"], **TASK_LINEAGE},
               measures=("mean_reward",)),
    ExportKind("trl_sft", "TRL conversational SFT: {messages, tools (JSON string)} for trl.SFTTrainer.",
               TrlSftSchema, exports.iter_trl_sft, "sft", SFT_LINEAGE, group=FLAVORS_GROUP, file_format="parquet",
               arrow_schema=TRL_SFT_SCHEMA, measures=("reward",)),
    ExportKind("trl_dpo", "TRL explicit-prompt conversational preferences {prompt, chosen, rejected, tools} "
               "for trl.DPOTrainer.",
               TrlDpoSchema, exports.iter_trl_dpo, "dpo", DPO_LINEAGE, group=FLAVORS_GROUP, file_format="parquet",
               arrow_schema=TRL_DPO_SCHEMA, measures=DPO_MEASURES),
    ExportKind("trl_grpo", "TRL prompt-only rows {prompt, ...}: the other columns reach the reward functions.",
               TrlGrpoSchema, exports.iter_trl_grpo, "grpo",
               {"prompt": ["messages", "prompt_length"], "tools": ["tools"], "ground_truth": ["metadata"],
                **TASK_LINEAGE}, group=FLAVORS_GROUP, file_format="parquet", arrow_schema=TRL_GRPO_SCHEMA,
               measures=("mean_reward",)),
    ExportKind("verl", "verl RL Parquet {data_source, prompt, ability, reward_model, extra_info}, one row per task.",
               VerlSchema, exports.iter_verl, "grpo",
               {"prompt": ["messages", "prompt_length"], "data_source": ["agent_ref", "agent_name"],
                "ability": ["task_type"], "reward_model": ["metadata"], "extra_info": ["task_key", "trajectory_id",
                                                                                        "reward", "tools"]},
               group=FLAVORS_GROUP, file_format="parquet", arrow_schema=VERL_ARROW_SCHEMA, measures=("mean_reward",)),
    ExportKind("llama_factory", "LLaMA-Factory ShareGPT {conversations, system, tools} with dataset_info.json.",
               LlamaFactorySchema, exports.iter_llama_factory, "sft",
               {"conversations": ["messages"], "system": ["messages"], "tools": ["tools"],
                "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
               group=FLAVORS_GROUP, index_files=_llama_factory_index),
)


@dataclass
class _Written:
    rows: dict[str, int]
    files: dict[str, dict]  # file name -> sha256, bytes, rows
    excluded: Counter
    distributions: dict[str, dict]
    checks: list[dg.AssetCheckResult]
    first_line: str | None


class _BrokenExport(Exception):
    def __init__(self, checks: list[dg.AssetCheckResult], summary: list[str]) -> None:
        super().__init__(summary)
        self.checks = checks
        self.summary = summary


class _HashingWriter:
    """Counts and hashes the bytes on their way to the file (what the manifest records)."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        data = bytes(data)
        self.handle.write(data)
        self.sha256.update(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass


@dataclass
class _SplitSink:
    """One split's file: JSON lines as they are, or Parquet row groups built from them."""

    out: _HashingWriter
    arrow_schema: pyarrow.Schema | None
    rows: int = 0
    parquet: pq.ParquetWriter | None = field(default=None)

    def __post_init__(self) -> None:
        if self.arrow_schema is not None:
            self.parquet = pq.ParquetWriter(self.out, self.arrow_schema, compression="zstd")

    def write(self, lines: list[str]) -> None:
        if self.parquet is not None:
            records = [orjson.loads(line) for line in lines]
            self.parquet.write_table(pyarrow.Table.from_pylist(records, schema=self.arrow_schema))
        else:
            self.out.write(("\n".join(lines) + "\n").encode())
        self.rows += len(lines)

    def close(self) -> None:
        if self.parquet is not None:
            self.parquet.close()  # writes the footer (an empty split is still a valid file)
            self.parquet = None


def _unique_keys(schema) -> list[list[str]]:
    keys = [[name] for name, column in schema.columns.items() if column.unique]
    return keys + ([list(schema.unique)] if schema.unique else [])


def _write_export(store: Storage, kind: ExportKind, frames, config: PipelineConfig) -> _Written:
    """Streams every chunk through the contract into the split files.

    Files are written under temporary names and only renamed into place when every chunk
    passed, so a failing check leaves the previous export untouched. Checks that span
    chunks (uniqueness, split leaks, DPO margin) are tracked here over flat keys only.
    """
    schema = kind.contract.to_schema()
    unique_keys = _unique_keys(schema)
    seen: dict[tuple, set] = {tuple(key): set() for key in unique_keys}
    duplicates = 0
    prompts_by_split: dict[str, set[str]] = {split: set() for split in exports.SPLITS}
    below_margin = 0
    excluded: Counter = Counter()
    failures: dict[str, str] = {}
    rows_checked = 0
    first_line = None
    measured: dict[str, list[np.ndarray]] = {name: [] for name in (*kind.measures, "line_chars")}
    with contextlib.ExitStack() as stack:
        sinks = {}
        for split in exports.SPLITS:
            handle = stack.enter_context(store.open_write(layout.export_file(kind.name, split, kind.file_format)))
            sinks[split] = _SplitSink(_HashingWriter(handle), kind.arrow_schema)
            stack.callback(sinks[split].close)  # on an error too, before its file is discarded
        for frame in frames:
            excluded.update(frame.excluded)
            rows = frame.rows
            result = validate(kind.contract, rows)
            rows_checked += len(rows)
            failures.update({f"row {rows_checked - len(rows) + int(i)}": f for i, f in result.failures.items()})
            failures.update({f"table:{e}": e for e in result.table_errors})
            for key in unique_keys:
                values = list(zip(*(rows[name].tolist() for name in key)))
                duplicates += sum(1 for v in values if v in seen[tuple(key)])
                seen[tuple(key)].update(values)
            if kind.checks_margin and len(rows):
                below_margin += int((rows["quality_difference"] < config.dpo.min_margin).sum())
            for name in kind.measures:
                measured[name].append(rows[name].to_numpy(dtype=float, na_value=np.nan))
            measured["line_chars"].append(rows["line"].str.len().to_numpy(dtype=float))
            for split, sink in sinks.items():
                in_split = rows["split"] == split
                lines = rows.loc[in_split, "line"].tolist()
                prompts_by_split[split].update(rows.loc[in_split, "prompt_key"])
                if lines:
                    sink.write(lines)
                    first_line = first_line or lines[0]
        for sink in sinks.values():
            sink.close()
        if duplicates:
            failures["cross-chunk"] = f"{duplicates} duplicate value(s) of {unique_keys} across chunks"
        leaked = prompts_by_split["train"] & prompts_by_split["validation"]
        contract = ContractResult(passed=not failures, rows_checked=rows_checked, failures=failures)
        checks = [
            contract_check_result(contract, asset=kind.asset_name),
            dg.AssetCheckResult(asset_key=kind.asset_name, check_name="no_split_leak", passed=not leaked,
                                metadata={"leaked_prompts": len(leaked)}),
        ]
        if kind.checks_margin:
            checks.append(dg.AssetCheckResult(asset_key=kind.asset_name, check_name="dpo_margin",
                                              passed=below_margin == 0,
                                              metadata={"min_margin": config.dpo.min_margin,
                                                        "below_margin": below_margin}))
        if not all(check.passed for check in checks):
            raise _BrokenExport(checks, contract.summary(5))  # the temporary files are discarded
        # the manifest is about to describe new files: never leave the old one beside them
        store.remove(layout.export_manifest(kind.name))
    files = {
        f"{split}.{kind.file_format}": {"sha256": sink.out.sha256.hexdigest(), "bytes": sink.out.size,
                                        "rows": sink.rows}
        for split, sink in sinks.items()
    }
    distributions = {name: describe(np.concatenate(parts) if parts else np.empty(0))
                     for name, parts in measured.items()}
    return _Written({split: sink.rows for split, sink in sinks.items()}, files, excluded, distributions, checks,
                    first_line)


def build_export_asset(kind: ExportKind) -> dg.AssetsDefinition:
    check_specs = [
        dg.AssetCheckSpec("contract", asset=kind.asset_name, blocking=True,
                          description=f"every row satisfies {kind.contract.__name__}"),
        dg.AssetCheckSpec("no_split_leak", asset=kind.asset_name, blocking=True,
                          description="no prompt (prompt_key) appears in both train and validation"),
    ]
    if kind.checks_margin:
        check_specs.append(
            dg.AssetCheckSpec("dpo_margin", asset=kind.asset_name, blocking=True,
                              description="every pair's quality_difference >= dpo.min_margin")
        )

    @dg.asset(
        name=kind.asset_name,
        deps=["validated_trajectories"],
        group_name=kind.group,
        code_version=code_version(),
        kinds={kind.file_format, "pandera"},
        description=kind.description,
        check_specs=check_specs,
        metadata={"dagster/column_schema": column_schema(kind.contract)},
        automation_condition=dg.AutomationCondition.eager(),
        retry_policy=STORAGE_RETRY,
    )
    def _export(context: dg.AssetExecutionContext, storage: TrajectoryStorage, settings: PipelineSettings):
        with storage_faults_only():
            yield from _materialize_export(kind, context, storage, settings)

    return _export


def _materialize_export(kind: ExportKind, context: dg.AssetExecutionContext, storage: TrajectoryStorage,
                        settings: PipelineSettings) -> Iterator:
    config = settings.load()
    store = storage.open()
    batches = registered_batches(context)
    table = stored_trajectories(store, batches)
    frames = kind.build(table, getattr(config, kind.config_section), config.split)
    try:
        written = _write_export(store, kind, frames, config)
    except _BrokenExport as broken:
        # nothing was written: a dataset that breaks its checks must never reach a trainer
        yield from broken.checks
        failed = [c.check_name for c in broken.checks if not c.passed]
        raise dg.Failure(  # the same rows would fail again: no retry
            description=f"{kind.asset_name} failed {', '.join(failed)}: {broken.summary}; nothing was written",
            allow_retries=False,
        ) from None
    manifest = build_manifest(
        export=kind.name,
        file_format=kind.file_format,
        config_section=kind.config_section,
        batches=batches,
        config=config.model_dump(),
        sources=read_summary(store, batches)["sources"],
        rows=written.rows,
        excluded=dict(written.excluded),
        distributions=written.distributions,
        files=written.files,
    )
    for name, content in (kind.index_files(kind.name) if kind.index_files else {}).items():
        store.write_bytes(layout.export_extra(kind.name, name), content)
    store.write_bytes(layout.export_card(kind.name), render_card(manifest).encode())
    # last: a manifest beside the files means the set is complete
    store.write_bytes(layout.export_manifest(kind.name), orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    yield dg.MaterializeResult(
        metadata={
            "dagster/row_count": sum(written.rows.values()),
            "dagster/uri": store.uri(f"exports/{kind.name}"),
            "train_rows": written.rows["train"],
            "validation_rows": written.rows["validation"],
            "excluded": dg.MetadataValue.json(manifest["excluded"]),
            "manifest": store.uri(layout.export_manifest(kind.name)),
            "card": store.uri(layout.export_card(kind.name)),
            "batches": len(batches),
            "first_row": dg.MetadataValue.md(
                f"```json\n{written.first_line[:2000]}\n```" if written.first_line else "(empty)"
            ),
            "dagster/column_lineage": dg.TableColumnLineage(
                deps_by_column={
                    field: [dg.TableColumnDep(asset_key=dg.AssetKey("validated_trajectories"), column_name=c)
                            for c in columns]
                    for field, columns in kind.lineage.items()
                }
            ),
        },
        check_results=written.checks,
    )


export_assets = [build_export_asset(kind) for kind in EXPORT_KINDS]
