"""Statistics report over trajectories, quarantine and exports: JSON, Markdown and a page.

One asset, ``stats_report``, executed as two steps (``report/steps.py``), so that the larger
part of the report does not wait for the exports:

1. ``report_trajectories``: the part over the trajectories and the quarantine. Its inputs are
   only the sources' batch assets, so in a datasets run it starts at once, beside the export
   phase's plan. It keeps its result in the run's staging folder (``layout.staging_report``)
   and hands the next step a small JSON value naming it (``defs/staging.py``).
2. ``report_exports``: after every export's merge, the part over the exports; writes the
   report and materializes the asset.
"""


from collections.abc import Sequence

import dagster as dg

from trajectory_assets import layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.defs.batches import QUARANTINE, TRAJECTORIES, asset_key, dataset_store, planned_store
from trajectory_assets.defs.conditions import REBUILD_ON_CHANGED_DATA
from trajectory_assets.defs.retries import STORAGE_POOL, STORAGE_RETRY, stop_if_canceling, storage_faults_only
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.registry import EXPORTS
from trajectory_assets.io.storage import Storage
from trajectory_assets.project import ENVIRONMENT, resource_key
from trajectory_assets.report.report import Report
from trajectory_assets.report.steps import inline_markdown, summarize_stored_trajectories, write_stored_report


def build_report_asset(dataset: str = ENVIRONMENT, sources: Sequence[str] = (ENVIRONMENT,),
                       exports: Sequence[Export] = EXPORTS) -> dg.AssetsDefinition:
    """The stats report of the dataset ``dataset``: its sources' batches and its ``exports``."""
    resources = {resource_key(dataset, "storage"), resource_key(dataset, "settings"),
                 *(resource_key(source, "storage") for source in sources)}
    prefix = f"{dataset}_" if dataset else ""
    # one graph input per upstream asset, each the input of one op (a fan-in of graph inputs
    # would not subset in Dagster 1.13, as defs/exports.py found)
    batch_inputs = {f"{base}_{number}": asset_key(source, base)
                    for base in (TRAJECTORIES, QUARANTINE) for number, source in enumerate(sources)}
    export_inputs = {export.asset_name: asset_key(dataset, export.asset_name) for export in exports}

    def config_of(context: dg.OpExecutionContext) -> PipelineConfig:
        return getattr(context.resources, resource_key(dataset, "settings")).load()

    @dg.op(name=f"{prefix}report_trajectories", ins={name: dg.In(dg.Nothing) for name in batch_inputs},
           out=dg.Out(dict, io_manager_key=resource_key(dataset, "staging")),
           required_resource_keys=resources, retry_policy=STORAGE_RETRY, pool=STORAGE_POOL)
    def report_trajectories(context: dg.OpExecutionContext) -> dict:
        """The report's part over the trajectories and the quarantine, kept in the run's staging folder."""
        stop_if_canceling(context)
        store, batch_sources = dataset_store(context, dataset, sources)
        with storage_faults_only():
            summarize_stored_trajectories(store, list(batch_sources), config_of(context),
                                          layout.staging_report(context.run_id))
        # the run whose staging folder holds the part (a re-execution reads its parent's), and the batches read
        return {"run": context.run_id, "batches": batch_sources}

    @dg.op(name=f"{prefix}report_exports",
           ins={"summarized": dg.In(dict), **{name: dg.In(dg.Nothing) for name in export_inputs}},
           out=dg.Out(dg.Nothing), required_resource_keys=resources, retry_policy=STORAGE_RETRY, pool=STORAGE_POOL)
    def report_exports(context: dg.OpExecutionContext, summarized: dict) -> dg.Output:
        """The report's part over the exports; writes the report."""
        stop_if_canceling(context)
        store = planned_store(context, dataset, sources, summarized["batches"])
        with storage_faults_only():
            report = write_stored_report(store, config_of(context), layout.staging_report(summarized["run"]))
        return dg.Output(None, metadata=report_metadata(store, report))

    @dg.graph_asset(
        key=asset_key(dataset, "stats_report"),
        group_name=dataset or "reports",
        kinds={"html", "markdown"},
        ins={name: dg.AssetIn(key=key, dagster_type=dg.Nothing) for name, key in {**batch_inputs,
                                                                                   **export_inputs}.items()},
        automation_condition=REBUILD_ON_CHANGED_DATA,
    )
    def stats_report(**inputs):
        """Counts (read / valid / rejected by reason), reward and length distributions, breakdowns
        per agent / task_type / model, rows and exclusions per export, DPO pairs and margins,
        pass@k per task, tool use per tool; written as JSON and Markdown with its main plots
        (every task in ``tasks.jsonl``), and as ``index.html``: plots, a seeded sample of every
        export shown as chats, quarantine examples. Also gathers every batch's quarantine into
        one ``quarantine/rejected.jsonl``."""
        summarized = report_trajectories(**{name: inputs[name] for name in batch_inputs})
        return report_exports(summarized, **{name: inputs[name] for name in export_inputs})

    return stats_report


def report_metadata(store: Storage, report: Report) -> dict:
    page = store.uri(layout.REPORT_PAGE)
    return {
        # the UI renders the Markdown inline, with the plots embedded so it needs no file server
        "report": dg.MetadataValue.md(inline_markdown(report)),
        "page": dg.MetadataValue.path(page),
        "page_bytes": len(report.html.encode()),
        "records_read": report.stats["records_read"],
        "records_valid": report.stats["records_valid"],
        "records_rejected": report.stats["records_rejected"],
        "dagster/uri": page,
    }


# the environment's dataset's report (unprefixed)
stats_report = build_report_asset()
