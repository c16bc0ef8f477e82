"""The report's two steps over a dataset's storage (no Dagster import): ``defs/reports.py``
runs them as the two ops of the ``stats_report`` asset.

1. ``summarize_stored_trajectories``: the part over the trajectories, the ingest summary and
   the quarantine (``report.summarize_trajectories``), kept in ``folder`` (the run's staging
   folder); it also gathers every batch's quarantine into one ``quarantine/rejected.jsonl``.
   It needs no export, so it runs beside the export phase.
2. ``write_stored_report``: the part over the exports (``report.build_report``), once the
   merges wrote them, and the report's files.
"""

from __future__ import annotations

import base64

import orjson

from trajectory_assets import layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.export_scan import stored_scan
from trajectory_assets.exports.registry import EXPORTS
from trajectory_assets.io.batch_summary import read_summary
from trajectory_assets.io.export_files import StoredExport
from trajectory_assets.io.storage import Storage
from trajectory_assets.io.trajectory_table import StoredTrajectories
from trajectory_assets.report.report import MAIN_PLOTS, Report, TrajectoryPart, build_report, summarize_trajectories
from trajectory_assets.report.report_data import QuarantineExamples


def summarize_stored_trajectories(store: Storage, batches: list[str], config: PipelineConfig, folder: str) -> None:
    """The part over the trajectories of ``batches``, into ``folder``; and the quarantine gathered."""
    ingest_summary = read_summary(store, batches)
    examples = QuarantineExamples(config.report.quarantine_examples, ingest_summary["rejected_by_reason"])
    with store.open_write(layout.QUARANTINE) as quarantine:
        for key in batches:
            rejected = store.read_bytes(layout.batch_quarantine(key))
            quarantine.write(rejected)
            examples.add_lines(rejected)
    summarize_trajectories(StoredTrajectories(store, batches), ingest_summary, examples, config).save(store, folder)


def write_stored_report(store: Storage, config: PipelineConfig, folder: str) -> Report:
    """The report from the part over the trajectories in ``folder`` and every export in the
    storage (a run may have built only some of them), written under ``reports/``."""
    manifests = {
        export.name: store.read_json(layout.export_manifest(export.name))
        for export in EXPORTS
        if store.exists(layout.export_manifest(export.name))
    }
    # what each export's shards gathered of its rows (or, without that, its rows)
    exports = {name: stored_scan(store, name, manifest, config.report.samples_per_export, config.report.seed)
               or StoredExport(store, name, manifest) for name, manifest in manifests.items()}
    report = build_report(TrajectoryPart.load(store, folder), manifests, exports, config)

    store.write_bytes(layout.STATS_JSON, orjson.dumps(report.stats, option=orjson.OPT_INDENT_2))
    store.write_bytes(layout.STATS_MARKDOWN, report.markdown.encode())
    for name in MAIN_PLOTS:  # a plot with nothing to draw this time: no stale picture beside stats.md
        if f"plots/{name}.png" not in report.pngs:
            store.remove(layout.report_file(f"plots/{name}.png"))
    for name, png in report.pngs.items():
        store.write_bytes(layout.report_file(name), png)
    store.write_bytes(layout.TASKS, report.tasks_jsonl)
    store.write_bytes(layout.REPORT_PAGE, report.html.encode())
    return report


def write_report(store: Storage, batches: list[str], config: PipelineConfig, run: str = "local") -> Report:
    """Both steps one after the other, in this process (``bench/report.py``, tests), handing
    the part over the trajectories through the staging folder of ``run``."""
    folder = layout.staging_report(run)
    summarize_stored_trajectories(store, batches, config, folder)
    report = write_stored_report(store, config, folder)
    store.remove_folder(layout.staging_run(run))
    return report


def inline_markdown(report: Report) -> str:
    """The Markdown with its plots embedded, as the UI renders it inline, needing no file server."""
    inline = report.markdown
    for name, png in report.pngs.items():
        inline = inline.replace(f"]({name})", f"](data:image/png;base64,{base64.b64encode(png).decode()})")
    return inline
