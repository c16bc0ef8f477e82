"""The whole report from what the pipeline stored: ``stats.json``, ``tasks.jsonl``,
``stats.md`` with its main plots as PNG, and the ``index.html`` page (no Dagster import).

Reads, in bounded memory: the flat columns of every trajectory; the tool use ingest counted
beside each batch (``report/tool_use.py``); the messages of the trajectories whose prompt
is shown; and what each export's shards gathered of its rows as they wrote them (the
summary its merge wrote, ``exports/export_scan.py``: rows per split, the trajectories,
pairs and tasks they were made from, the rows the viewer shows). Only an export written
without a summary is read here: its rows once, whole. The Dagster asset (``defs/reports.py``) hands in the readers and
writes the result.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.families.frames import TrajectoryTable
from trajectory_assets.exports.export_scan import ExportScan, trajectory_refs
from trajectory_assets.report.report_data import (
    QuarantineExamples,
    dpo_margins,
    export_lengths,
    failing_tasks,
    grpo_spread,
    message_facts,
    pass_rate_buckets,
    reward_by_group,
    top_tools,
    trajectory_infos,
)
from trajectory_assets.report.page import ExportSection, Figure, Page, render_page
from trajectory_assets.report.stats import STATS_COLUMNS, compute_stats, render_markdown, source_section, task_stats
from trajectory_assets.report.viewer import TEXT_LIMIT, clip, view_sample
from trajectory_assets.sources import REPORT_SECTIONS

# shown in the Markdown (and so inside Dagster's UI) as well as on the page
MAIN_PLOTS = ("rewards", "pass_rate", "lengths", "tools")


class ExportRows(Protocol):
    """One export's rows: (split, position in the split (its files one after the other), row)."""

    def rows(self) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """Every row, whole, each split's in order."""
        ...


@dataclass
class Report:
    stats: dict[str, Any]
    tasks: list[dict[str, Any]]
    markdown: str  # links its plots as plots/<name>.png
    pngs: dict[str, bytes]  # plots/<name>.png -> image
    html: str


def build_report(
    table: TrajectoryTable,
    ingest_summary: dict[str, Any],
    manifests: Mapping[str, dict[str, Any]],
    exports: Mapping[str, ExportScan | ExportRows],
    quarantine: QuarantineExamples,
    config: PipelineConfig,
) -> Report:
    """``manifests`` / ``exports``: every export present in the storage, by name; an export
    is given by the scan its merge wrote (``exports/export_scan.py``: its picked rows are
    whole) or, without one, by its rows, read once here."""
    trajectories = pd.concat(list(table.scan(STATS_COLUMNS)), ignore_index=True)
    tasks, per_task = task_stats(trajectories, config.grpo.pass_threshold)
    failing = failing_tasks(per_task)
    first_of_task = trajectories.drop_duplicates("task_key").set_index("task_key")["trajectory_id"]
    prompt_ids = {first_of_task[task["task_key"]] for task in failing}
    facts = message_facts(table, trajectories, prompt_ids)
    # the table keeps the first copy of a record found in several batches
    copies = ingest_summary["records_valid"] - len(trajectories)
    sections = {name: source_section(trajectories, name, facts.tools(name)) for name in REPORT_SECTIONS}
    stats = compute_stats(trajectories, ingest_summary, manifests, sections,
                          duplicates_across_batches=copies, tasks=tasks, tools=facts.tools())

    scans = [rows if isinstance(rows, ExportScan) else scan_stored_export(name, manifests[name], rows, config)
             for name, rows in exports.items()]
    tools = top_tools(facts.tools())
    # Imported here, not at the top: Altair and vl-convert cost ~26 MiB and ~0.2 s in every
    # process that loads the code location (CLI, code server, run workers, fork server), and
    # only the report step draws.
    from trajectory_assets.report import plots

    figures = [plot for plot in (
        plots.reward_plot(reward_by_group(trajectories)),
        plots.pass_rate_plot(pass_rate_buckets(per_task), config.grpo.pass_threshold),
        plots.lengths_plot(export_lengths(scans, trajectories)),
        plots.tools_plot(tools),
        plots.margin_plot(dpo_margins(scans, trajectories)),
        plots.spread_plot(grpo_spread(scans, trajectories, config.report.seed)),
    ) if plot is not None]
    pngs = {f"plots/{plot.name}.png": plot.png() for plot in figures if plot.name in MAIN_PLOTS}
    markdown = render_markdown(stats, list(pngs))

    sections = []
    for scan in scans:
        picked = scan.picked()
        ids = {trajectory_id for _, _, row in picked for _, trajectory_id in trajectory_refs(row)}
        infos = trajectory_infos(trajectories, ids)
        samples = [view_sample(scan.name, split, position, row, infos) for split, position, row in picked]
        manifest = manifests[scan.name]
        sections.append(ExportSection(scan.name, scan.family, manifest.get("format", "jsonl"), dict(scan.rows),
                                      samples))
    page = Page(
        summary=stats,
        figures=[Figure(plot.name, plot.title, plot.svg, CAPTIONS.get(plot.name, "")) for plot in figures],
        exports=sections,
        failing_tasks=[{**task, "prompt": clip(facts.prompts.get(first_of_task[task["task_key"]], ""), TEXT_LIMIT)}
                       for task in failing],
        tools=tools.to_dict("records"),
        quarantine=quarantine.examples,
        settings={"samples_per_export": config.report.samples_per_export, "seed": config.report.seed,
                  "with_tool_calls": int((trajectories["num_tool_calls"] > 0).sum())},
    )
    return Report(stats, per_task, markdown, pngs, render_page(page))


def scan_stored_export(name: str, manifest: dict[str, Any], rows: ExportRows, config: PipelineConfig) -> ExportScan:
    """The scan of an export written without a summary (or with other sample settings): its
    rows read once, whole, so the rows it picks are as the files hold them."""
    scan = ExportScan(name, manifest.get("config_section", "sft"), config.report.samples_per_export,
                      config.report.seed)
    for split, position, row in rows.rows():
        scan.add(split, position, row)
    return scan


CAPTIONS = {
    "rewards": "Validated trajectories; one panel per agent and source format (the largest groups).",
    "pass_rate": "Tasks (rollouts of one prompt) by the share of their rollouts that passed.",
    "lengths": "The trajectories each export was made from (a DPO pair: both; a GRPO task: every rollout). "
               "Tokens as the rollout's usage recorded them. Whiskers min–max, box quartiles, tick median.",
    "tools": "Every trajectory's calls; a result is an error by the Hermes batch runner's rule.",
    "dpo_margins": "Every distinct pair of the DPO family's exports.",
    "grpo_spread": "Rewards of each GRPO task's rollouts: a seeded sample of tasks one by one (a larger dot: "
                   "more rollouts got that reward), and the spread of every task.",
}
