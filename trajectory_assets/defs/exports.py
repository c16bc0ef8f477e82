"""SFT / DPO / GRPO exports: one asset per dataset, each line checked by its contract."""


import contextlib
import hashlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import dagster as dg
import orjson
import pandera.pandas as pa

from schemas.dpo import DpoSchema
from schemas.grpo import GrpoSchema
from schemas.sft import SftSchema
from schemas.sft_hermes import SftHermesSchema
from schemas.validation import ContractResult, validate
from trajectory_assets import __version__, layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.datasets import exports
from trajectory_assets.datasets.manifest import build_manifest
from trajectory_assets.defs.batches import read_summary, registered_batches, stored_trajectories
from trajectory_assets.defs.contracts import column_schema, contract_check_result
from trajectory_assets.defs.resources import PipelineSettings, TrajectoryStorage
from trajectory_assets.io.storage import Storage

GROUP = "exports"


@dataclass(frozen=True)
class ExportKind:
    name: str  # sft / dpo / grpo: also the config section and the folder under exports/
    description: str
    contract: type[pa.DataFrameModel]
    build: Callable[..., Iterator[exports.ExportFrame]]  # (TrajectoryTable, config section, SplitConfig)
    # export field -> the validated_trajectories columns it is made from (shown in the UI)
    lineage: dict[str, list[str]]
    config_section: str = ""  # the config section it reads; its own name when empty

    @property
    def section(self) -> str:
        return self.config_section or self.name

    @property
    def asset_name(self) -> str:
        return f"{self.name}_dataset"


EXPORT_KINDS = (
    ExportKind(
        "sft",
        "Supervised fine-tuning rows {messages, tools?, reward?, task_type?} in Chat Completions form.",
        SftSchema,
        exports.iter_sft,
        {"messages": ["messages"], "tools": ["tools"], "reward": ["reward"], "task_type": ["task_type"],
         "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
    ),
    ExportKind(
        "dpo",
        "Preference pairs {prompt, chosen, rejected, quality_difference, reward_chosen, reward_rejected} "
        "from rollouts of the same task.",
        DpoSchema,
        exports.iter_dpo,
        {"prompt": ["messages"], "chosen": ["messages"], "rejected": ["messages"], "tools": ["tools"],
         "reward_chosen": ["reward"], "reward_rejected": ["reward"], "quality_difference": ["reward"],
         "chosen_id": ["trajectory_id"], "rejected_id": ["trajectory_id"], "task_key": ["task_key"]},
    ),
    ExportKind(
        "sft_hermes",
        "The SFT rows (same filter) rendered as Hermes ShareGPT: <think>, <tool_call> and <tool_response> "
        "markup and the function-calling system prompt.",
        SftHermesSchema,
        exports.iter_sft_hermes,
        {"conversations": ["messages", "tools"], "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
        config_section="sft",
    ),
    ExportKind(
        "grpo",
        "One NeMo Gym RL input row {responses_create_params, agent_ref} per task.",
        GrpoSchema,
        exports.iter_grpo,
        {"responses_create_params": ["request"], "agent_ref": ["agent_ref", "agent_name"],
         "task_key": ["task_key"], "trajectory_ids": ["trajectory_id"], "mean_reward": ["reward"]},
    ),
)


@dataclass
class _Written:
    rows: dict[str, int]
    files: dict[str, dict]  # file name -> sha256, bytes, lines
    excluded: Counter
    checks: list[dg.AssetCheckResult]
    first_line: str | None


class _BrokenExport(Exception):
    def __init__(self, checks: list[dg.AssetCheckResult], summary: list[str]) -> None:
        super().__init__(summary)
        self.checks = checks
        self.summary = summary


def _write_export(store: Storage, kind: ExportKind, frames, config: PipelineConfig) -> _Written:
    """Streams every chunk through the contract into the split files.

    Files are written under temporary names and only renamed into place when every chunk
    passed, so a failing check leaves the previous export untouched. Checks that span
    chunks (uniqueness, split leaks, DPO margin) are tracked here over flat keys only.
    """
    schema = kind.contract.to_schema()
    unique_columns = [name for name, column in schema.columns.items() if column.unique]
    seen: dict[str, set] = {name: set() for name in unique_columns}
    duplicates = 0
    tasks_by_split: dict[str, set[str]] = {split: set() for split in exports.SPLITS}
    below_margin = 0
    excluded: Counter = Counter()
    failures: dict[str, str] = {}
    rows_checked = 0
    first_line = None
    hashes = {split: hashlib.sha256() for split in exports.SPLITS}
    sizes = {split: [0, 0] for split in exports.SPLITS}  # bytes, lines
    with contextlib.ExitStack() as stack:
        handles = {split: stack.enter_context(store.open_write(layout.export_file(kind.name, split)))
                   for split in exports.SPLITS}
        for frame in frames:
            excluded.update(frame.excluded)
            rows = frame.rows
            result = validate(kind.contract, rows)
            rows_checked += len(rows)
            failures.update({f"row {rows_checked - len(rows) + int(i)}": f for i, f in result.failures.items()})
            failures.update({f"table:{e}": e for e in result.table_errors})
            for name in unique_columns:
                values = rows[name].tolist()
                duplicates += sum(1 for v in values if v in seen[name])
                seen[name].update(values)
            if kind.name == "dpo" and len(rows):
                below_margin += int((rows["quality_difference"] < config.dpo.min_margin).sum())
            for split in exports.SPLITS:
                lines = rows.loc[rows["split"] == split, "line"]
                tasks_by_split[split].update(rows.loc[rows["split"] == split, "task_key"])
                if len(lines):
                    data = ("\n".join(lines) + "\n").encode()
                    handles[split].write(data)
                    hashes[split].update(data)
                    sizes[split][0] += len(data)
                    sizes[split][1] += len(lines)
                    first_line = first_line or lines.iloc[0]
        if duplicates:
            failures["cross-chunk"] = f"{duplicates} duplicate value(s) in {unique_columns} across chunks"
        leaked = tasks_by_split["train"] & tasks_by_split["validation"]
        contract = ContractResult(passed=not failures, rows_checked=rows_checked, failures=failures)
        checks = [
            contract_check_result(contract, asset=kind.asset_name),
            dg.AssetCheckResult(asset_key=kind.asset_name, check_name="no_split_leak", passed=not leaked,
                                metadata={"leaked_task_keys": len(leaked)}),
        ]
        if kind.name == "dpo":
            checks.append(dg.AssetCheckResult(asset_key=kind.asset_name, check_name="dpo_margin",
                                              passed=below_margin == 0,
                                              metadata={"min_margin": config.dpo.min_margin,
                                                        "below_margin": below_margin}))
        if not all(check.passed for check in checks):
            raise _BrokenExport(checks, contract.summary(5))  # the temporary files are discarded
    files = {
        f"{split}.jsonl": {"sha256": hashes[split].hexdigest(), "bytes": sizes[split][0], "lines": sizes[split][1]}
        for split in exports.SPLITS
    }
    return _Written({split: sizes[split][1] for split in exports.SPLITS}, files, excluded, checks, first_line)


def build_export_asset(kind: ExportKind) -> dg.AssetsDefinition:
    check_specs = [
        dg.AssetCheckSpec("contract", asset=kind.asset_name, blocking=True,
                          description=f"every row satisfies {kind.contract.__name__}"),
        dg.AssetCheckSpec("no_split_leak", asset=kind.asset_name, blocking=True,
                          description="no task_key appears in both train and validation"),
    ]
    if kind.name == "dpo":
        check_specs.append(
            dg.AssetCheckSpec("dpo_margin", asset=kind.asset_name, blocking=True,
                              description="every pair's quality_difference >= dpo.min_margin")
        )

    @dg.asset(
        name=kind.asset_name,
        deps=["validated_trajectories"],
        group_name=GROUP,
        code_version=__version__,
        kinds={"jsonl", "pandera"},
        description=kind.description,
        check_specs=check_specs,
        metadata={"dagster/column_schema": column_schema(kind.contract)},
        automation_condition=dg.AutomationCondition.eager(),
    )
    def _export(context: dg.AssetExecutionContext, storage: TrajectoryStorage, settings: PipelineSettings):
        config = settings.load()
        store = storage.open()
        batches = registered_batches(context)
        table = stored_trajectories(store, batches)
        frames = kind.build(table, getattr(config, kind.section), config.split)
        try:
            written = _write_export(store, kind, frames, config)
        except _BrokenExport as broken:
            # nothing was written: a dataset that breaks its checks must never reach a trainer
            yield from broken.checks
            failed = [c.check_name for c in broken.checks if not c.passed]
            raise dg.Failure(
                description=f"{kind.asset_name} failed {', '.join(failed)}: {broken.summary}; nothing was written"
            ) from None
        manifest = build_manifest(
            export=kind.name,
            batches=batches,
            config={kind.section: getattr(config, kind.section).model_dump(), "split": config.split.model_dump()},
            sources=read_summary(store, batches)["sources"],
            rows=written.rows,
            excluded=dict(written.excluded),
            files=written.files,
        )
        store.write_bytes(layout.export_manifest(kind.name), orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        yield dg.MaterializeResult(
            metadata={
                "dagster/row_count": sum(written.rows.values()),
                "dagster/uri": store.uri(f"exports/{kind.name}"),
                "train_rows": written.rows["train"],
                "validation_rows": written.rows["validation"],
                "excluded": dg.MetadataValue.json(manifest["excluded"]),
                "manifest": store.uri(layout.export_manifest(kind.name)),
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

    return _export


export_assets = [build_export_asset(kind) for kind in EXPORT_KINDS]
