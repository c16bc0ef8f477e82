"""Statistics report over trajectories, quarantine and exports."""


import base64

import dagster as dg
import orjson
import pandas as pd

from trajectory_assets import code_version, layout
from trajectory_assets.datasets.stats import (
    HERMES_COLUMNS,
    STATS_COLUMNS,
    compute_stats,
    hermes_stats,
    render_markdown,
    reward_histogram_png,
    task_stats,
)
from trajectory_assets.defs.batches import (
    STORAGE_POOL,
    STORAGE_RETRY,
    read_summary,
    registered_batches,
    storage_faults_only,
    stored_trajectories,
)
from trajectory_assets.defs.exports import EXPORT_KINDS
from trajectory_assets.defs.resources import PipelineSettings, TrajectoryStorage


@dg.asset(
    group_name="reports",
    code_version=code_version(),
    kinds={"markdown"},
    deps=["validated_trajectories", "quarantined_records", *(kind.asset_name for kind in EXPORT_KINDS)],
    automation_condition=dg.AutomationCondition.eager(),
    retry_policy=STORAGE_RETRY,
    pool=STORAGE_POOL,
)
def stats_report(
    context: dg.AssetExecutionContext, storage: TrajectoryStorage, settings: PipelineSettings
) -> dg.MaterializeResult:
    """Counts (read / valid / rejected by reason), reward and length distributions, breakdowns
    per agent / task_type / model, rows and exclusions per export, DPO pairs and margins,
    pass@k per task; written as JSON, Markdown and a plot (every task in ``tasks.jsonl``).
    Also gathers every batch's quarantine into one ``quarantine/rejected.jsonl``."""
    with storage_faults_only():
        return _write_report(context, storage, settings)


def _write_report(
    context: dg.AssetExecutionContext, storage: TrajectoryStorage, settings: PipelineSettings
) -> dg.MaterializeResult:
    config = settings.load()
    store = storage.open()
    batches = registered_batches(context)
    table = stored_trajectories(store, batches)
    trajectories = pd.concat(list(table.scan(STATS_COLUMNS)), ignore_index=True)
    ingest_summary = read_summary(store, batches)
    with store.open_write(layout.QUARANTINE) as quarantine:
        for key in batches:
            quarantine.write(store.read_bytes(layout.batch_quarantine(key)))
    # every export in the storage (a run may have built only some of them)
    manifests = {
        kind.name: orjson.loads(store.read_bytes(layout.export_manifest(kind.name)))
        for kind in EXPORT_KINDS
        if store.exists(layout.export_manifest(kind.name))
    }
    tasks, per_task = task_stats(trajectories, config.grpo.pass_threshold)
    # only Hermes rows' messages are read for the Hermes section (none at all without them)
    hermes_ids = set(trajectories.loc[trajectories["source_format"] == "hermes", "trajectory_id"])
    hermes = hermes_stats(table.scan(HERMES_COLUMNS, ids=hermes_ids) if hermes_ids else [])
    # the table keeps the first copy of a record found in several batches
    copies = ingest_summary["records_valid"] - len(trajectories)
    stats = compute_stats(trajectories, ingest_summary, manifests, hermes, duplicates_across_batches=copies,
                          tasks=tasks)
    plot = reward_histogram_png(trajectories)
    plot_name = layout.REWARD_PLOT.rsplit("/", 1)[1]
    markdown = render_markdown(stats, [plot_name])
    store.write_bytes(layout.STATS_JSON, orjson.dumps(stats, option=orjson.OPT_INDENT_2))
    store.write_bytes(layout.STATS_MARKDOWN, markdown.encode())
    store.write_bytes(layout.REWARD_PLOT, plot)
    store.write_bytes(layout.TASKS, b"".join(orjson.dumps(task) + b"\n" for task in per_task))
    # the UI renders the report inline, with the plot embedded so it needs no file server
    inline = markdown.replace(f"]({plot_name})", f"](data:image/png;base64,{base64.b64encode(plot).decode()})")
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(inline),
            "records_read": stats["records_read"],
            "records_valid": stats["records_valid"],
            "records_rejected": stats["records_rejected"],
            "dagster/uri": store.uri(layout.REPORTS),
        }
    )
