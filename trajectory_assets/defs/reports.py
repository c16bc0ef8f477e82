"""Statistics report over trajectories, quarantine and exports: JSON, Markdown and a page."""


import base64
from collections.abc import Sequence

import dagster as dg
import orjson

from trajectory_assets import layout
from trajectory_assets.report.report import MAIN_PLOTS, build_report
from trajectory_assets.report.report_data import QuarantineExamples
from trajectory_assets.exports.registry import EXPORTS
from trajectory_assets.defs.batches import QUARANTINE, TRAJECTORIES, asset_key, dataset_store
from trajectory_assets.defs.conditions import REBUILD_ON_CHANGED_DATA
from trajectory_assets.defs.resources import PipelineSettings
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.export_scan import stored_scan
from trajectory_assets.io.storage import Storage
from trajectory_assets.project import ENVIRONMENT, resource_key
from trajectory_assets.defs.retries import STORAGE_POOL, STORAGE_RETRY, stop_if_canceling, storage_faults_only
from trajectory_assets.io.batch_summary import read_summary
from trajectory_assets.io.export_files import StoredExport
from trajectory_assets.io.trajectory_table import StoredTrajectories


def build_report_asset(dataset: str = ENVIRONMENT, sources: Sequence[str] = (ENVIRONMENT,),
                       exports: Sequence[Export] = EXPORTS) -> dg.AssetsDefinition:
    """The stats report of the dataset ``dataset``: its sources' batches and its ``exports``."""
    resources = [resource_key(dataset, "storage"), resource_key(dataset, "settings"),
                 *(resource_key(source, "storage") for source in sources)]

    @dg.asset(
        key=asset_key(dataset, "stats_report"),
        group_name=dataset or "reports",
        kinds={"html", "markdown"},
        deps=[*(asset_key(source, base) for source in sources for base in (TRAJECTORIES, QUARANTINE)),
              *(asset_key(dataset, export.asset_name) for export in exports)],
        required_resource_keys=set(resources),
        automation_condition=REBUILD_ON_CHANGED_DATA,
        retry_policy=STORAGE_RETRY,
        pool=STORAGE_POOL,
    )
    def stats_report(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        """Counts (read / valid / rejected by reason), reward and length distributions, breakdowns
        per agent / task_type / model, rows and exclusions per export, DPO pairs and margins,
        pass@k per task, tool use per tool; written as JSON and Markdown with its main plots
        (every task in ``tasks.jsonl``), and as ``index.html``: plots, a seeded sample of every
        export shown as chats, quarantine examples. Also gathers every batch's quarantine into
        one ``quarantine/rejected.jsonl``."""
        stop_if_canceling(context)
        store, batch_sources = dataset_store(context, dataset, sources)
        settings = getattr(context.resources, resource_key(dataset, "settings"))
        with storage_faults_only():
            return write_report(store, list(batch_sources), settings)

    return stats_report


def write_report(store: Storage, batches: list[str], settings: PipelineSettings) -> dg.MaterializeResult:
    config = settings.load()
    table = StoredTrajectories(store, batches)
    ingest_summary = read_summary(store, batches)
    examples = QuarantineExamples(config.report.quarantine_examples, ingest_summary["rejected_by_reason"])
    with store.open_write(layout.QUARANTINE) as quarantine:
        for key in batches:
            rejected = store.read_bytes(layout.batch_quarantine(key))
            quarantine.write(rejected)
            examples.add_lines(rejected)
    # every export in the storage (a run may have built only some of them)
    manifests = {
        export.name: store.read_json(layout.export_manifest(export.name))
        for export in EXPORTS
        if store.exists(layout.export_manifest(export.name))
    }
    # what each export's shards gathered of its rows (or, without that, its rows)
    exports = {name: stored_scan(store, name, manifest, config.report.samples_per_export, config.report.seed)
               or StoredExport(store, name, manifest) for name, manifest in manifests.items()}
    report = build_report(table, ingest_summary, manifests, exports, examples, config)

    store.write_bytes(layout.STATS_JSON, orjson.dumps(report.stats, option=orjson.OPT_INDENT_2))
    store.write_bytes(layout.STATS_MARKDOWN, report.markdown.encode())
    for name in MAIN_PLOTS:  # a plot with nothing to draw this time: no stale picture beside stats.md
        if f"plots/{name}.png" not in report.pngs:
            store.remove(layout.report_file(f"plots/{name}.png"))
    for name, png in report.pngs.items():
        store.write_bytes(layout.report_file(name), png)
    store.write_bytes(layout.TASKS, b"".join(orjson.dumps(task) + b"\n" for task in report.tasks))
    store.write_bytes(layout.REPORT_PAGE, report.html.encode())
    # the UI renders the Markdown inline, with the plots embedded so it needs no file server
    inline = report.markdown
    for name, png in report.pngs.items():
        inline = inline.replace(f"]({name})", f"](data:image/png;base64,{base64.b64encode(png).decode()})")
    page = store.uri(layout.REPORT_PAGE)
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(inline),
            "page": dg.MetadataValue.path(page),
            "page_bytes": len(report.html.encode()),
            "records_read": report.stats["records_read"],
            "records_valid": report.stats["records_valid"],
            "records_rejected": report.stats["records_rejected"],
            "dagster/uri": page,
        }
    )


# the environment's dataset's report (unprefixed)
stats_report = build_report_asset()
