"""The plots render offline to SVG and PNG from aggregated tables, and say when there is nothing to draw."""

import xml.etree.ElementTree as ElementTree

import altair as alt
import pandas as pd
import pytest

from trajectory_assets.report import plots
from trajectory_assets.report.report_data import GrpoSpread, histogram, pass_rate_buckets

HISTOGRAM = histogram(pd.Series([0.0, 1.0, 1.0, 0.5]).to_numpy(), pd.Series(["a", "a", "b", "b"]).to_numpy())
LENGTHS = pd.DataFrame([{"export": "sft", "measure": m, "trajectories": 3, "min": 1, "p25": 2, "p50": 3, "p75": 4,
                         "max": 9, "mean": 3.5} for m in ("tokens", "assistant turns")])
TOOLS = pd.DataFrame([{"tool": "bash", "calls": 5, "failures": 1, "failure_rate": 0.2}])
SPREAD = GrpoSpread(histogram(pd.Series([0.0, 0.5]).to_numpy()),
                    pd.DataFrame([{"task": "k1", "reward": 0.0, "rollouts": 2, "mean": 0.3},
                                  {"task": "k1", "reward": 1.0, "rollouts": 1, "mean": 0.3}]), 2)


@pytest.mark.parametrize("plot", [
    plots.reward_plot(HISTOGRAM),
    plots.pass_rate_plot(pass_rate_buckets([{"rollouts": 2, "passes": 1}]), 1.0),
    plots.lengths_plot(LENGTHS),
    plots.tools_plot(TOOLS),
    plots.margin_plot(histogram(pd.Series([0.5, 1.0]).to_numpy())),
    plots.spread_plot(SPREAD),
], ids=lambda plot: plot.name)
def test_each_plot_renders_to_svg_and_png(plot):
    root = ElementTree.fromstring(plot.svg)
    assert root.tag.endswith("svg") and float(root.attrib["width"]) > 100
    assert len(list(root.iter())) > 20  # marks, axes, labels
    assert plot.png().startswith(b"\x89PNG\r\n\x1a\n")


def test_nothing_to_draw_gives_no_plot():
    empty = histogram(pd.Series([], dtype=float).to_numpy())
    assert plots.reward_plot(empty) is None and plots.margin_plot(empty) is None
    assert plots.pass_rate_plot(pass_rate_buckets([]), 1.0) is None
    assert plots.lengths_plot(LENGTHS.iloc[0:0]) is None and plots.tools_plot(TOOLS.iloc[0:0]) is None
    assert plots.spread_plot(GrpoSpread(empty, SPREAD.tasks.iloc[0:0], 0)) is None


def test_rendering_fetches_nothing():
    """The data is always inline; a chart that names a URL is refused, never fetched."""
    remote = plots.Plot("remote", "remote", alt.Chart("http://127.0.0.1:9/data.json").mark_bar().encode(x="a:Q"))
    with pytest.raises(Exception, match="(?i)not allowed|denied|access"):
        remote.svg
