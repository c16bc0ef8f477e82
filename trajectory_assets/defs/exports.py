"""Every export as an asset: the seed formats (SFT, Hermes SFT, DPO, GRPO) and the trainer
flavors (TRL, NeMo RL, LLaMA-Factory, verl).

The exports of one family (SFT, DPO, GRPO) are one multi-asset step: the family plans and
reads its payloads once and renders every selected export from them (reading payloads is
most of an export's cost). Each export is still its own asset with its own contract, checks,
manifest and card, and is committed or discarded on its own: one that fails a check writes
nothing, while the others of its family are written (``exports/writer.py``). With a
``tokenizer`` configured, every row is measured with its chat template and the family's
token budget enforced (``exports/token_budget.py``).
"""


from collections.abc import Iterator, Sequence

import dagster as dg

from trajectory_assets import __version__, layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.defs.batches import TRAJECTORIES, asset_key, dataset_store
from trajectory_assets.defs.conditions import REBUILD_ON_CHANGED_DATA
from trajectory_assets.defs.contracts import contract_check_result, written_column_schema
from trajectory_assets.defs.retries import STORAGE_POOL, STORAGE_RETRY, stop_if_canceling, storage_faults_only
from trajectory_assets.ingest.decontamination import BenchmarkError, BenchmarkIndex, cached_index
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.manifest import dataset_identity
from trajectory_assets.exports.registry import family_exports
from trajectory_assets.exports.token_budget import TokenBudget, TokenizerError, load_counter
from trajectory_assets.exports.writer import Broken, CheckOutcome, Written, check_names, write_family
from trajectory_assets.io.batch_summary import read_summary
from trajectory_assets.io.trajectory_table import StoredTrajectories
from trajectory_assets.project import ENVIRONMENT, resource_key

CHECK_DESCRIPTIONS = {
    "contract": "every row satisfies {contract}",
    "no_split_leak": "no prompt (prompt_key) appears in both train and validation",
    "arrow_schema": "every JSON line has the Arrow types its dataset card declares",
    "dpo_margin": "every pair's quality_difference >= dpo.min_margin",
    "token_budget": "with a tokenizer, every row's chat-template length <= {family}.max_tokens",
}

# The longest family step starts first (measured at 1 GB: SFT 19 s, DPO 14 s, GRPO 12 s), so
# with two at a time the datasets run ends after SFT || (DPO then GRPO), not DPO then SFT.
FAMILY_PRIORITY = {"sft": 2, "dpo": 1, "grpo": 0}


def build_family_asset(family: str, exports: list[Export] | None = None, dataset: str = ENVIRONMENT,
                       sources: Sequence[str] = (ENVIRONMENT,), declared: bool = False) -> dg.AssetsDefinition:
    """One step for the exports of a family (all of the registry's by default) of the dataset
    ``dataset``, read from the batches of its ``sources``; any subset of them can be
    materialized. A ``declared`` dataset's manifests and cards name it, its sources and batches."""
    exports = family_exports(family) if exports is None else exports
    trajectories = [asset_key(source, TRAJECTORIES) for source in sources]
    keys = {export.name: asset_key(dataset, export.asset_name) for export in exports}
    resources = [resource_key(dataset, "storage"), resource_key(dataset, "settings"),
                 *(resource_key(source, "storage") for source in sources)]

    @dg.multi_asset(
        name=f"{dataset}_{family}_exports" if dataset else f"{family}_exports",
        op_tags={"dagster/priority": str(FAMILY_PRIORITY.get(family, 0))},
        specs=[
            dg.AssetSpec(
                keys[export.name],
                deps=trajectories,
                group_name=dataset or export.group,
                kinds={export.file_format, "pandera"},
                description=export.description,
                metadata={"dagster/column_schema": written_column_schema(export.arrow_schema,
                                                                         export.column_descriptions)},
                automation_condition=REBUILD_ON_CHANGED_DATA,
            )
            for export in exports
        ],
        check_specs=[
            dg.AssetCheckSpec(name, asset=keys[export.name], blocking=True,
                              description=CHECK_DESCRIPTIONS[name].format(contract=export.contract.__name__,
                                                                          family=export.family))
            for export in exports for name in check_names(export)
        ],
        required_resource_keys=set(resources),
        can_subset=True,
        retry_policy=STORAGE_RETRY,
        pool=STORAGE_POOL,
    )
    def _family(context: dg.AssetExecutionContext):
        selected = [export for export in exports if keys[export.name] in context.selected_asset_keys]
        stop_if_canceling(context)
        with storage_faults_only():
            yield from _materialize_family(family, selected, context, dataset, sources, keys, trajectories, declared)

    return _family


def _materialize_family(family: str, exports: list[Export], context: dg.AssetExecutionContext, dataset: str,
                        sources: Sequence[str], keys: dict[str, dg.AssetKey], trajectories: list[dg.AssetKey],
                        declared: bool) -> Iterator:
    config = getattr(context.resources, resource_key(dataset, "settings")).load()
    store, batch_sources = dataset_store(context, dataset, sources)
    batches = list(batch_sources)
    table = StoredTrajectories(store, batches)
    read_sources = read_summary(store, batches)["sources"]
    broken = []
    specs = context.assets_def.specs_by_key
    code_versions = {export.name: specs[keys[export.name]].code_version or __version__ for export in exports}
    identity = dataset_identity(dataset, {source: [key for key, read_from in batch_sources.items()
                                                   if read_from == source] for source in sources}) if declared else None
    for outcome in write_family(store, family, exports, table, config, _token_budget(config, family), batches,
                                read_sources, code_versions, _benchmarks(config), identity):
        asset = keys[outcome.export.name]
        if isinstance(outcome, Broken):
            # nothing of it was written: a dataset that breaks its checks must never reach a trainer
            yield from (_check_result(asset, check) for check in outcome.checks)
            broken.append(f"{asset.to_user_string()} failed {', '.join(outcome.failed)}: {outcome.summary}")
            continue
        yield _materialization(store.uri, outcome, asset, trajectories)
    if broken:
        raise dg.Failure(  # the same rows would fail again: no retry
            description="; ".join(broken) + "; nothing was written for them",
            allow_retries=False,
        )


def _token_budget(config: PipelineConfig, family: str) -> TokenBudget | None:
    """The family's budget when a tokenizer is configured (None: rows are not measured)."""
    if config.tokenizer is None:
        return None
    try:
        counter = load_counter(config.tokenizer)
    except TokenizerError as error:
        raise dg.Failure(description=str(error), allow_retries=False) from None
    section = getattr(config, family)
    return TokenBudget(counter, section.max_tokens, section.over_token_budget == "truncate")


def _benchmarks(config: PipelineConfig) -> BenchmarkIndex | None:
    """The evaluation sets to leave out, read once for the family's step (None: none configured)."""
    try:
        return cached_index(config.decontamination)
    except BenchmarkError as error:
        raise dg.Failure(description=str(error), allow_retries=False) from None


def _check_result(asset: dg.AssetKey, check: CheckOutcome) -> dg.AssetCheckResult:
    if check.contract is not None:
        return contract_check_result(check.contract, asset=asset, check_name=check.name)
    return dg.AssetCheckResult(asset_key=asset, check_name=check.name, passed=check.passed, metadata=check.metadata)


def _materialization(uri, written: Written, asset: dg.AssetKey,
                     trajectories: list[dg.AssetKey]) -> dg.MaterializeResult:
    export, manifest = written.export, written.manifest
    return dg.MaterializeResult(
        asset_key=asset,
        metadata={
            "dagster/row_count": sum(manifest["rows"].values()),
            "dagster/uri": uri(layout.export_folder(export.name)),
            "train_rows": manifest["rows"]["train"],
            "validation_rows": manifest["rows"]["validation"],
            "excluded": dg.MetadataValue.json(manifest["excluded"]),
            "manifest": uri(layout.export_manifest(export.name)),
            "card": uri(layout.export_card(export.name)),
            "batches": len(manifest["batches"]),
            "first_row": dg.MetadataValue.md(
                f"```json\n{written.first_line[:2000]}\n```" if written.first_line else "(empty)"
            ),
            "dagster/column_lineage": dg.TableColumnLineage(
                deps_by_column={
                    column: [dg.TableColumnDep(asset_key=source, column_name=c)
                             for source in trajectories for c in columns]
                    for column, columns in export.lineage.items()
                }
            ),
        },
        check_results=[_check_result(asset, check) for check in written.checks],
    )


