"""The whole report from what the pipeline stored: ``stats.json``, ``tasks.jsonl``,
``stats.md`` with its main plots as PNG, and the ``index.html`` page (no Dagster import),
in two parts.

The part over the trajectories (``summarize_trajectories``) depends on no export, so it runs
beside the export phase. It reads, in bounded memory: the flat columns of every trajectory;
the tool use ingest counted beside each batch (``report/tool_use.py``); the messages of the
trajectories whose prompt is shown; the quarantine's examples. It computes their statistics,
tasks and plots into a :class:`TrajectoryPart`, which it hands to the other part through the
storage (``save`` / ``load``: Parquet for the trajectories' columns, JSON and PNG for the rest).

The part over the exports (``build_report``) reads what each export's shards gathered of its
rows as they wrote them (the summary its merge wrote, ``exports/export_scan.py``: rows per
split, the trajectories, pairs and tasks they were made from, the rows the viewer shows). Only
an export written without a summary is read here: its rows once, whole. ``report/steps.py``
runs both parts over a dataset's storage.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.families.frames import TrajectoryTable
from trajectory_assets.exports.export_scan import ExportScan, trajectory_refs
from trajectory_assets.io.storage import Storage
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
from trajectory_assets.report.stats import (
    STATS_COLUMNS,
    render_markdown,
    source_section,
    task_stats,
    trajectory_stats,
    with_exports,
)
from trajectory_assets.report.viewer import TEXT_LIMIT, Text, clip, view_sample
from trajectory_assets.sources import REPORT_SECTIONS

if TYPE_CHECKING:  # plots.py imports Altair, which only the drawing imports (summarize_trajectories)
    from trajectory_assets.report.plots import Plot

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
    tasks_jsonl: bytes  # tasks.jsonl: every task, a line each
    markdown: str  # links its plots as plots/<name>.png
    pngs: dict[str, bytes]  # plots/<name>.png -> image
    html: str


# the plots in the order the Markdown and the page show them
PLOTS = ("rewards", "pass_rate", "lengths", "tools", "dpo_margins", "grpo_spread")


@dataclass(frozen=True)
class Drawn:
    """A plot drawn: its SVG (the page) and, for a main plot, its PNG (the Markdown)."""

    name: str
    title: str
    svg: str
    png: bytes | None


def draw(plot: Plot) -> Drawn:
    """``plot`` drawn, as SVG and, when the Markdown shows it, as PNG."""
    return Drawn(plot.name, plot.title, plot.svg, plot.png() if plot.name in MAIN_PLOTS else None)


# what the part over the exports needs of each trajectory (export_lengths, dpo_margins,
# grpo_spread, trajectory_infos)
EXPORT_PART_COLUMNS = ["trajectory_id", "reward", "total_tokens", "num_assistant_turns", "source_uri",
                       "source_line"]


@dataclass
class TrajectoryPart:
    """What the report takes from the trajectories, the ingest summary and the quarantine alone:
    computed by its first step, kept in the run's staging folder for the second (``save``, ``load``)."""

    trajectories: pd.DataFrame  # EXPORT_PART_COLUMNS of every trajectory
    stats: dict[str, Any]  # stats.json without the exports (stats.trajectory_stats)
    tasks_jsonl: bytes  # tasks.jsonl as written (the second step only copies it)
    failing_tasks: list[dict[str, Any]]  # failing_tasks, each with its prompt (a Text)
    quarantine: dict[str, list[dict[str, Any]]]  # QuarantineExamples.examples
    with_tool_calls: int  # trajectories that called a tool
    figures: list[Drawn]  # the plots of the trajectories alone

    def save(self, store: Storage, folder: str) -> None:
        """Into ``folder`` of ``store``: the frame as Parquet, the PNGs as files, the rest as
        JSON (``Text`` and ``Drawn`` are dataclasses, which orjson writes as objects)."""
        sink = pa.BufferOutputStream()
        pq.write_table(pa.Table.from_pandas(self.trajectories, preserve_index=False), sink)
        store.write_bytes(f"{folder}/trajectories.parquet", sink.getvalue().to_pybytes())
        store.write_bytes(f"{folder}/tasks.jsonl", self.tasks_jsonl)
        for drawn in self.figures:
            if drawn.png is not None:
                store.write_bytes(f"{folder}/plots/{drawn.name}.png", drawn.png)
        store.write_bytes(f"{folder}/part.json", orjson.dumps({
            "stats": self.stats, "failing_tasks": self.failing_tasks,
            "quarantine": self.quarantine, "with_tool_calls": self.with_tool_calls,
            "figures": [{"name": drawn.name, "title": drawn.title, "svg": drawn.svg, "png": drawn.png is not None}
                        for drawn in self.figures],
        }))

    @classmethod
    def load(cls, store: Storage, folder: str) -> TrajectoryPart:
        part = orjson.loads(store.read_bytes(f"{folder}/part.json"))
        return cls(
            trajectories=pq.read_table(pa.BufferReader(store.read_bytes(f"{folder}/trajectories.parquet"))).to_pandas(),
            stats=part["stats"],
            tasks_jsonl=store.read_bytes(f"{folder}/tasks.jsonl"),
            failing_tasks=[{**task, "prompt": Text(**task["prompt"])} for task in part["failing_tasks"]],
            quarantine={reason: [{**example, "detail": Text(**example["detail"]), "raw": Text(**example["raw"])}
                                 for example in examples] for reason, examples in part["quarantine"].items()},
            with_tool_calls=part["with_tool_calls"],
            figures=[Drawn(drawn["name"], drawn["title"], drawn["svg"],
                           store.read_bytes(f"{folder}/plots/{drawn['name']}.png") if drawn["png"] else None)
                     for drawn in part["figures"]],
        )


def summarize_trajectories(
    table: TrajectoryTable,
    ingest_summary: dict[str, Any],
    quarantine: QuarantineExamples,
    config: PipelineConfig,
) -> TrajectoryPart:
    """The report's part over the trajectories, the ingest summary and the ``quarantine``
    examples: their statistics, tasks, tool use, failing tasks' prompts and plots."""
    trajectories = pd.concat(list(table.scan(STATS_COLUMNS)), ignore_index=True)
    tasks, per_task = task_stats(trajectories, config.grpo.pass_threshold)
    failing = failing_tasks(per_task)
    first_of_task = trajectories.drop_duplicates("task_key").set_index("task_key")["trajectory_id"]
    prompt_ids = {first_of_task[task["task_key"]] for task in failing}
    facts = message_facts(table, trajectories, prompt_ids)
    # the table keeps the first copy of a record found in several batches
    copies = ingest_summary["records_valid"] - len(trajectories)
    sections = {name: source_section(trajectories, name, facts.tools(name)) for name in REPORT_SECTIONS}
    stats = trajectory_stats(trajectories, ingest_summary, sections, duplicates_across_batches=copies, tasks=tasks,
                             tools=facts.tools())
    # Imported here, not at the top: Altair and vl-convert cost ~26 MiB and ~0.2 s in every
    # process that loads the code location (CLI, code server, run workers, fork server), and
    # only the report's steps draw.
    from trajectory_assets.report import plots

    figures = [draw(plot) for plot in (
        plots.reward_plot(reward_by_group(trajectories)),
        plots.pass_rate_plot(pass_rate_buckets(per_task), config.grpo.pass_threshold),
        plots.tools_plot(top_tools(facts.tools())),
    ) if plot is not None]
    return TrajectoryPart(
        trajectories=trajectories[EXPORT_PART_COLUMNS],
        stats=stats,
        tasks_jsonl=b"".join(orjson.dumps(task) + b"\n" for task in per_task),
        failing_tasks=[{**task, "prompt": clip(facts.prompts.get(first_of_task[task["task_key"]], ""), TEXT_LIMIT)}
                       for task in failing],
        quarantine=quarantine.examples,
        with_tool_calls=int((trajectories["num_tool_calls"] > 0).sum()),
        figures=figures,
    )


def build_report(
    part: TrajectoryPart,
    manifests: Mapping[str, dict[str, Any]],
    exports: Mapping[str, ExportScan | ExportRows],
    config: PipelineConfig,
) -> Report:
    """The report's part over the exports, completing ``part``. ``manifests`` / ``exports``:
    every export present in the storage, by name; an export is given by the scan its merge
    wrote (``exports/export_scan.py``: its picked rows are whole) or, without one, by its
    rows, read once here."""
    stats = with_exports(part.stats, manifests)
    trajectories = part.trajectories
    scans = [rows if isinstance(rows, ExportScan) else scan_stored_export(name, manifests[name], rows, config)
             for name, rows in exports.items()]
    from trajectory_assets.report import plots  # as in summarize_trajectories

    drawn = [draw(plot) for plot in (
        plots.lengths_plot(export_lengths(scans, trajectories)),
        plots.margin_plot(dpo_margins(scans, trajectories)),
        plots.spread_plot(grpo_spread(scans, trajectories, config.report.seed)),
    ) if plot is not None]
    figures = sorted([*part.figures, *drawn], key=lambda figure: PLOTS.index(figure.name))
    pngs = {f"plots/{figure.name}.png": figure.png for figure in figures if figure.png is not None}
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
        figures=[Figure(figure.name, figure.title, figure.svg, CAPTIONS.get(figure.name, "")) for figure in figures],
        exports=sections,
        failing_tasks=part.failing_tasks,
        tools=top_tools(stats["tools"]).to_dict("records"),
        quarantine=part.quarantine,
        settings={"samples_per_export": config.report.samples_per_export, "seed": config.report.seed,
                  "with_tool_calls": part.with_tool_calls},
    )
    return Report(stats, part.tasks_jsonl, markdown, pngs, render_page(page))


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
