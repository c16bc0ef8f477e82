"""The report's plots: Vega-Lite charts (Altair) drawn from aggregated tables, rendered
in-process by vl-convert to SVG (the page) and PNG (the Markdown in Dagster's UI).

vl-convert runs Vega's own renderer, so the page needs no JavaScript and no network, and
every label Vega draws is escaped by it. It holds the GIL while it draws (a Python loop in
another thread made about 5% of its progress during a draw, also during the first, which
starts the renderer: 0.3 s here), so starting it early in a thread overlaps nothing: at 1 GB
the report step took 4.71-4.78 s without such a warm-up and 4.72-4.73 s with it
(``bench.report``, interleaved), its plots 0.3 s less only because the start-up moved before
them. Rendering is told to fetch nothing
(``allowed_base_urls=[]``): the data is always inline. Each function returns ``None``
when there is nothing to draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import altair as alt
import pandas as pd
import vl_convert

from trajectory_assets.report.report_data import PASS_BUCKETS, GrpoSpread

BLUE, RED, GREEN, GREY = "#4c78a8", "#e45756", "#54a24b", "#9d9d9d"
WIDE, NARROW = 460, 170  # chart widths in pixels: one per row, or three per row (small multiples)


@dataclass(frozen=True)
class Plot:
    name: str  # file name stem (reports/plots/<name>.png) and HTML id
    title: str
    chart: alt.TopLevelMixin

    @cached_property
    def svg(self) -> str:
        return vl_convert.vegalite_to_svg(self.chart.to_dict(), allowed_base_urls=[])

    def png(self) -> bytes:
        """The same drawing as the SVG, rasterized (for Markdown viewers that show no SVG)."""
        return vl_convert.svg_to_png(self.svg, scale=1.0)


def _histogram_bars(data: pd.DataFrame, x_title: str, y_title: str, color: str = BLUE) -> alt.Chart:
    return alt.Chart(data).mark_bar(color=color).encode(
        x=alt.X("start:Q", title=x_title, scale=alt.Scale(zero=False, nice=False)),
        x2="end:Q",
        y=alt.Y("count:Q", title=y_title),
        y2=alt.datum(0),  # both x ends are given: the bars must be told to start at 0
    )


def reward_plot(data: pd.DataFrame) -> Plot | None:
    """Reward histogram per agent · source format (small multiples with their own y)."""
    if data.empty:
        return None
    groups = data.groupby("group")["count"].sum().sort_values(ascending=False).index.tolist()
    chart = _histogram_bars(data, "reward", "trajectories").properties(width=NARROW, height=110).facet(
        facet=alt.Facet("group:N", title=None, sort=groups), columns=3,
    ).resolve_scale(y="independent")
    return Plot("rewards", "Reward distribution per agent and source format", chart)


def pass_rate_plot(data: pd.DataFrame, threshold: float) -> Plot | None:
    if not data["tasks"].sum():
        return None
    color = alt.Color("bucket:N", legend=None, scale=alt.Scale(
        domain=list(PASS_BUCKETS), range=[RED, BLUE, BLUE, BLUE, BLUE, GREEN]))
    chart = alt.Chart(data).mark_bar().encode(
        x=alt.X("bucket:N", sort=list(PASS_BUCKETS), title=f"share of a task's rollouts with reward ≥ {threshold:g}",
                axis=alt.Axis(labelAngle=0)),
        y=alt.Y("tasks:Q", title="tasks"),
        color=color,
    ).properties(width=WIDE, height=200)
    return Plot("pass_rate", "Pass rate per task", chart)


def _box(data: pd.DataFrame, title: str) -> alt.LayerChart:
    base = alt.Chart(data).encode(y=alt.Y("export:N", title=None, sort=None))
    # the domain is set: Vega-Lite would size it by the layers' x fields only, cutting whiskers short
    domain = [min(0.0, float(data["min"].min())), float(data["max"].max())]
    whisker = base.mark_rule(color=GREY).encode(x=alt.X("min:Q", title=title, scale=alt.Scale(domain=domain)),
                                                x2="max:Q")
    box = base.mark_bar(color=BLUE, size=14).encode(x="p25:Q", x2="p75:Q")
    median = base.mark_tick(color="#1d2330", thickness=2, size=18).encode(x="p50:Q")
    return alt.layer(whisker, box, median).properties(width=NARROW + 40, height=alt.Step(22))


def lengths_plot(data: pd.DataFrame) -> Plot | None:
    """Tokens and assistant turns of the trajectories each export was made from
    (whiskers: min–max, box: quartiles, white tick: median)."""
    if data.empty:
        return None
    panels = [_box(data.loc[data["measure"] == measure], measure)
              for measure in ("tokens", "assistant turns") if (data["measure"] == measure).any()]
    return Plot("lengths", "Tokens and assistant turns per export", alt.hconcat(*panels))


def tools_plot(data: pd.DataFrame) -> Plot | None:
    if data.empty:
        return None
    y = alt.Y("tool:N", sort=None, title=None)
    calls = alt.Chart(data).mark_bar(color=BLUE).encode(y=y, x=alt.X("calls:Q", title="calls")).properties(
        width=NARROW + 40, height=alt.Step(18))
    errors = alt.Chart(data).mark_bar(color=RED).encode(
        y=alt.Y("tool:N", sort=None, axis=None),
        x=alt.X("failure_rate:Q", title="share of results that are errors", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
    ).properties(width=NARROW, height=alt.Step(18))
    return Plot("tools", "Tool calls and tool error rate per tool", alt.hconcat(calls, errors))


def margin_plot(data: pd.DataFrame) -> Plot | None:
    if data.empty:
        return None
    chart = _histogram_bars(data, "reward_chosen − reward_rejected", "pairs").properties(width=WIDE, height=180)
    return Plot("dpo_margins", "DPO margin distribution", chart)


def spread_plot(spread: GrpoSpread) -> Plot | None:
    if spread.tasks.empty:
        return None
    order = spread.tasks.drop_duplicates("task").sort_values(["mean", "task"])["task"].tolist()
    base = alt.Chart(spread.tasks).encode(y=alt.Y("task:N", sort=order, title=None))
    ranges = base.mark_rule(color=GREY).encode(x=alt.X("min(reward):Q", title="reward of each rollout"),
                                              x2="max(reward):Q")
    points = base.mark_circle(color=BLUE, opacity=0.8).encode(
        x="reward:Q", size=alt.Size("rollouts:Q", scale=alt.Scale(range=[30, 200]), legend=None))
    tasks = alt.layer(ranges, points).properties(width=NARROW + 60, height=alt.Step(14),
                                                 title=f"{spread.tasks['task'].nunique()} of {spread.total_tasks} "
                                                       "tasks (seeded sample)")
    std = _histogram_bars(spread.std, "reward standard deviation of a task", "tasks", GREEN).properties(
        width=NARROW + 20, height=180, title="every task")
    return Plot("grpo_spread", "GRPO reward spread per task", alt.hconcat(tasks, std))
