"""Every export as an asset: the seed formats (SFT, Hermes SFT, DPO, GRPO) and the trainer
flavors (TRL, NeMo RL, LLaMA-Factory, verl), built by one graph of steps per dataset.

The export phase is shards and merges (``exports/shard_phase.py``):

1. ``plan_exports``: the decisions that span the dataset (curation, pairs, tasks, balance), over
   small columns only, for every selected family; then the shards, contiguous bucket ranges of
   about ``shards.target_trajectories`` trajectories each. One dynamic output per shard.
2. ``render_shard`` (one step per shard, mapped): reads its buckets' payloads once and renders
   every selected export of every family from them, writing its part of each export's files
   to the run's staging folder, with what the checks need of its rows.
3. ``merge_<export>`` (one step per export): the checks over every shard's part, then the
   files committed under Hub names with the manifest and the card, or nothing when a check
   failed.

Each export is still its own asset with its own contract, checks, manifest and card, and is
committed or discarded on its own: one that fails a check writes nothing, while the others are
written. Steps pass each other only small JSON values (``defs/staging.py`` keeps them in the
dataset's storage, so a step on another machine reads them); the data stays in the storage.
"""


import warnings
from collections.abc import Iterator, Sequence

import dagster as dg

from trajectory_assets import __version__, layout
from trajectory_assets.code_versions import source_version
from trajectory_assets.config import PipelineConfig
from trajectory_assets.defs.batches import TRAJECTORIES, asset_key, dataset_store, planned_store
from trajectory_assets.defs.conditions import REBUILD_ON_CHANGED_DATA
from trajectory_assets.defs.contracts import contract_check_result, written_column_schema
from trajectory_assets.defs.staging import remove_finished_runs
from trajectory_assets.defs.retries import STORAGE_POOL, STORAGE_RETRY, stop_if_canceling, storage_faults_only
from trajectory_assets.ingest.decontamination import BenchmarkError, BenchmarkIndex, cached_index
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.manifest import dataset_identity
from trajectory_assets.exports.shard_phase import ShardTask, merge_export, plan_exports, render_shard
from trajectory_assets.exports.token_budget import TokenBudget, TokenizerError, load_counter
from trajectory_assets.exports.writer import Broken, CheckOutcome, Written, check_names
from trajectory_assets.io.trajectory_table import StoredTrajectories
from trajectory_assets.project import ENVIRONMENT, resource_key

CHECK_DESCRIPTIONS = {
    "contract": "every row satisfies {contract}",
    "no_split_leak": "no prompt (prompt_key) appears in both train and validation",
    "arrow_schema": "every JSON line has the Arrow types its dataset card declares",
    "dpo_margin": "every pair's quality_difference >= dpo.min_margin",
    "token_budget": "with a tokenizer, every row's chat-template length <= {family}.max_tokens",
}


def build_export_assets(exports: Sequence[Export], dataset: str = ENVIRONMENT,
                        sources: Sequence[str] = (ENVIRONMENT,), declared: bool = False) -> dg.AssetsDefinition:
    """The ``exports`` of the dataset ``dataset``, read from the batches of its ``sources``, as
    one graph of steps (plan, a step per shard, a merge per export); any subset of them can be
    materialized. A ``declared`` dataset's manifests and cards name it, its sources and batches."""
    exports = list(exports)
    keys = {export.name: asset_key(dataset, export.asset_name) for export in exports}
    trajectories = [asset_key(source, TRAJECTORIES) for source in sources]
    resources = {resource_key(dataset, "storage"), resource_key(dataset, "settings"),
                 *(resource_key(source, "storage") for source in sources)}
    staging = resource_key(dataset, "staging")
    prefix = f"{dataset}_" if dataset else ""
    inputs = {f"trajectories_{number}": key for number, key in enumerate(trajectories)}

    def selected(context: dg.OpExecutionContext) -> list[Export]:
        return [export for export in exports if keys[export.name] in context.selected_asset_keys]

    def config_of(context: dg.OpExecutionContext) -> PipelineConfig:
        return getattr(context.resources, resource_key(dataset, "settings")).load()

    def code_version(context: dg.OpExecutionContext, export: Export) -> str:
        return context.assets_def.specs_by_key[keys[export.name]].code_version or __version__

    @dg.op(name=f"{prefix}plan_exports", out=dg.DynamicOut(dict, io_manager_key=staging),
           # one input per source's trajectories (a fan-in of graph inputs would not subset in Dagster 1.13)
           ins={name: dg.In(dg.Nothing) for name in inputs},
           required_resource_keys=resources, retry_policy=STORAGE_RETRY, pool=STORAGE_POOL)
    def plan(context: dg.OpExecutionContext) -> Iterator[dg.DynamicOutput]:
        """The decisions over every trajectory (small columns only) and the shards."""
        stop_if_canceling(context)
        config = config_of(context)
        store, batch_sources = dataset_store(context, dataset, sources)
        chosen = selected(context)
        with storage_faults_only():
            removed = remove_finished_runs(store, context.instance, context.run_id)
            tasks = plan_exports(store, StoredTrajectories(store, list(batch_sources)), batch_sources, config, chosen,
                                 context.run_id,
                                 {family: _token_budget(config, family) for family in {e.family for e in chosen}},
                                 _benchmarks(config),
                                 {export.name: source_version(code_version(context, export)) for export in chosen})
        if removed:
            context.log.info(f"removed the staging folders of {len(removed)} finished run(s)")
        context.log.info(f"{len(tasks)} shard(s) of {sum(task.trajectories for task in tasks)} trajectories")
        for task in tasks:
            yield dg.DynamicOutput(task.to_json(), mapping_key=f"shard_{task.index:05d}")

    @dg.op(name=f"{prefix}render_shard", out=dg.Out(dict, io_manager_key=staging),
           required_resource_keys=resources, retry_policy=STORAGE_RETRY, pool=STORAGE_POOL)
    def render(context: dg.OpExecutionContext, task: dict) -> dict:
        """One shard's rows, read once, in every selected export."""
        stop_if_canceling(context)
        shard = ShardTask.from_json(task)
        config = config_of(context)
        store = planned_store(context, dataset, sources, shard.batches)
        with storage_faults_only():
            rendered = render_shard(store, StoredTrajectories(store, list(shard.batches)), shard, config,
                                    selected(context), {family: _token_budget(config, family) for family in shard.families})
        context.log.info(f"shard {shard.index + 1} of {shard.count}: {len(rendered['reused'])} of "
                         f"{len(rendered['rows'])} export(s) reused from the committed build (input unchanged)")
        return rendered

    def merge_op(export: Export):
        names = check_names(export)

        @dg.op(name=f"{prefix}merge_{export.name}",
               out={"written": dg.Out(dg.Nothing), **{name: dg.Out(dg.Nothing) for name in names}},
               required_resource_keys=resources, retry_policy=STORAGE_RETRY, pool=STORAGE_POOL)
        def merge(context: dg.OpExecutionContext, shards: list[dict]) -> Iterator:
            """The checks over every shard's part of the export; its files committed with the
            manifest and the card, or nothing when a check failed."""
            stop_if_canceling(context)
            tasks = sorted((ShardTask.from_json(task) for task in shards), key=lambda task: task.index)
            config = config_of(context)
            store = planned_store(context, dataset, sources, tasks[0].batches)
            version = code_version(context, export)
            identity = dataset_identity(dataset, {source: [key for key, read_from in tasks[0].batches.items()
                                                           if read_from == source] for source in sources}
                                        ) if declared else None
            with storage_faults_only():
                outcome = merge_export(store, export, tasks, config, version, identity)
            asset = keys[export.name]
            if isinstance(outcome, Broken):
                # nothing of it was written: a dataset that breaks its checks must never reach a trainer
                yield from (_check_result(asset, check) for check in outcome.checks)
                raise dg.Failure(  # the same rows would fail again: no retry
                    description=f"{asset.to_user_string()} failed {', '.join(outcome.failed)}: {outcome.summary}; "
                                "nothing was written for it",
                    allow_retries=False)
            materialization = _materialization(store.uri, outcome, asset, trajectories)
            yield dg.Output(None, "written", metadata=materialization.metadata)
            yield from materialization.check_results

        return merge

    merges = {export.name: merge_op(export) for export in exports}
    check_specs = {export.name: [dg.AssetCheckSpec(name, asset=keys[export.name], blocking=True,
                                                   description=CHECK_DESCRIPTIONS[name].format(
                                                       contract=export.contract.__name__, family=export.family))
                                 for name in check_names(export)] for export in exports}

    @dg.graph_multi_asset(
        name=f"{prefix}exports",
        outs={export.name: dg.AssetOut(
            key=keys[export.name],
            kinds={export.file_format, "pandera"},
            description=export.description,
            metadata={"dagster/column_schema": written_column_schema(export.arrow_schema,
                                                                     export.column_descriptions)},
            automation_condition=REBUILD_ON_CHANGED_DATA,
        ) for export in exports},
        # the trajectories are read from the storage by the plan and the shards, not handed over
        ins={name: dg.AssetIn(key=key, dagster_type=dg.Nothing) for name, key in inputs.items()},
        check_specs=[spec for specs in check_specs.values() for spec in specs],
        can_subset=True,
    )
    def _exports(**trajectory_inputs):
        shards = plan(**trajectory_inputs).map(render).collect()
        outputs = {}
        for export in exports:
            written, *checks = merges[export.name](shards)
            outputs[export.name] = written
            outputs.update({spec.get_python_identifier(): check for spec, check in zip(check_specs[export.name], checks)})
        return outputs

    # Dagster 1.13 leaves a graph_multi_asset's outputs in the default group whatever their
    # AssetOut says (tests/defs/test_definitions.py's snapshot holds the groups): set them here
    groups = {keys[export.name]: dataset or export.group for export in exports}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # map_asset_specs is marked preview
        return _exports.map_asset_specs(lambda spec: spec.replace_attributes(group_name=groups[spec.key]))


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


