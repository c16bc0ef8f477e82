"""SFT / DPO / GRPO exports: one asset per dataset, each line checked by its contract."""


from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg
import orjson
import pandera.pandas as pa

from schemas.dpo import DpoSchema
from schemas.grpo import GrpoSchema
from schemas.sft import SftSchema
from schemas.validation import validate
from trajectory_assets import __version__, layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.datasets import exports
from trajectory_assets.datasets.manifest import build_manifest
from trajectory_assets.defs.batches import read_summary, read_trajectories, registered_batches
from trajectory_assets.defs.contracts import column_schema, contract_check_result
from trajectory_assets.defs.resources import PipelineSettings, TrajectoryStorage

GROUP = "exports"


@dataclass(frozen=True)
class ExportKind:
    name: str  # sft / dpo / grpo: also the config section and the folder under exports/
    description: str
    contract: type[pa.DataFrameModel]
    columns: list[str]
    build: Callable[..., exports.ExportFrame]
    # export field -> the validated_trajectories columns it is made from (shown in the UI)
    lineage: dict[str, list[str]]

    @property
    def asset_name(self) -> str:
        return f"{self.name}_dataset"


EXPORT_KINDS = (
    ExportKind(
        "sft",
        "Supervised fine-tuning rows {messages, tools?, reward?, task_type?} in Chat Completions form.",
        SftSchema,
        exports.SFT_COLUMNS,
        exports.build_sft,
        {"messages": ["messages"], "tools": ["tools"], "reward": ["reward"], "task_type": ["task_type"],
         "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
    ),
    ExportKind(
        "dpo",
        "Preference pairs {prompt, chosen, rejected, quality_difference, reward_chosen, reward_rejected} "
        "from rollouts of the same task.",
        DpoSchema,
        exports.DPO_COLUMNS,
        exports.build_dpo,
        {"prompt": ["messages"], "chosen": ["messages"], "rejected": ["messages"], "tools": ["tools"],
         "reward_chosen": ["reward"], "reward_rejected": ["reward"], "quality_difference": ["reward"],
         "chosen_id": ["trajectory_id"], "rejected_id": ["trajectory_id"], "task_key": ["task_key"]},
    ),
    ExportKind(
        "grpo",
        "One NeMo Gym RL input row {responses_create_params, agent_ref} per task.",
        GrpoSchema,
        exports.GRPO_COLUMNS,
        exports.build_grpo,
        {"responses_create_params": ["request"], "agent_ref": ["agent_ref", "agent_name"],
         "task_key": ["task_key"], "trajectory_ids": ["trajectory_id"], "mean_reward": ["reward"]},
    ),
)


def _split_leak(frame: exports.ExportFrame) -> set[str]:
    rows = frame.rows
    train = set(rows.loc[rows["split"] == "train", "task_key"])
    return train & set(rows.loc[rows["split"] == "validation", "task_key"])


def _margin_violations(frame: exports.ExportFrame, config: PipelineConfig) -> int:
    return int((frame.rows["quality_difference"] < config.dpo.min_margin).sum()) if len(frame.rows) else 0


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
        trajectories = read_trajectories(store, batches, kind.columns)
        frame = kind.build(trajectories, getattr(config, kind.name), config.split)

        contract = validate(kind.contract, frame.rows)
        leaked = _split_leak(frame)
        checks = [
            contract_check_result(contract, asset=kind.asset_name),
            dg.AssetCheckResult(asset_key=kind.asset_name, check_name="no_split_leak", passed=not leaked,
                                metadata={"leaked_task_keys": len(leaked)}),
        ]
        if kind.name == "dpo":
            below = _margin_violations(frame, config)
            checks.append(dg.AssetCheckResult(asset_key=kind.asset_name, check_name="dpo_margin",
                                              passed=below == 0,
                                              metadata={"min_margin": config.dpo.min_margin, "below_margin": below}))
        if not all(check.passed for check in checks):
            # nothing is written: a dataset that breaks its contract must never reach a trainer
            yield from checks
            failed = [c.check_name for c in checks if not c.passed]
            raise dg.Failure(
                description=f"{kind.asset_name} failed {', '.join(failed)}: {contract.summary(5)}; nothing was written"
            )

        files = {}
        rows_per_split = {}
        for split in exports.SPLITS:
            lines = frame.lines(split)
            files[f"{split}.jsonl"] = "".join(line + "\n" for line in lines).encode()
            rows_per_split[split] = len(lines)
            store.write_bytes(layout.export_file(kind.name, split), files[f"{split}.jsonl"])
        manifest = build_manifest(
            export=kind.name,
            batches=batches,
            config={kind.name: getattr(config, kind.name).model_dump(), "split": config.split.model_dump()},
            sources=read_summary(store, batches)["sources"],
            trajectories=len(trajectories),
            rows=rows_per_split,
            excluded=dict(frame.excluded),
            files=files,
        )
        store.write_bytes(layout.export_manifest(kind.name), orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        preview = frame.rows["line"].head(1).tolist()
        yield dg.MaterializeResult(
            metadata={
                "dagster/row_count": sum(rows_per_split.values()),
                "dagster/uri": store.uri(f"exports/{kind.name}"),
                "train_rows": rows_per_split["train"],
                "validation_rows": rows_per_split["validation"],
                "excluded": dg.MetadataValue.json(manifest["excluded"]),
                "manifest": store.uri(layout.export_manifest(kind.name)),
                "batches": len(batches),
                "first_row": dg.MetadataValue.md(f"```json\n{preview[0][:2000]}\n```" if preview else "(empty)"),
                "dagster/column_lineage": dg.TableColumnLineage(
                    deps_by_column={
                        field: [dg.TableColumnDep(asset_key=dg.AssetKey("validated_trajectories"), column_name=c)
                                for c in columns]
                        for field, columns in kind.lineage.items()
                    }
                ),
            },
            check_results=checks,
        )

    return _export


export_assets = [build_export_asset(kind) for kind in EXPORT_KINDS]
