from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from trajectory_assets.datasets.stats import compute_stats, render_markdown, reward_histogram_png

SUMMARY = {"records_read": 5, "records_valid": 3, "records_rejected": 2, "sources_failed": 0,
           "rejected_by_reason": {"invalid_json": 2}, "sources": [{}]}


def frame():
    return trajectory_frame([
        make_rollout([call_item("f", "{}", "c"), output_item("c", "r"), message_item("ok")], reward=1.0,
                     agent_ref={"name": "a1"}),
        make_rollout(reward=0.0, request_input="b", agent_ref={"name": "a1"}),
        make_rollout(reward=-2.0, request_input="c", agent_ref="a2"),
    ])


def test_counts_distributions_and_breakdowns():
    stats = compute_stats(frame(), SUMMARY, {"sft": {"train": 1, "validation": 0}})
    assert (stats["records_read"], stats["records_valid"], stats["records_rejected"]) == (5, 3, 2)
    assert stats["reward"]["min"] == -2.0 and stats["reward"]["max"] == 1.0 and stats["reward"]["count"] == 3
    assert stats["tool_calls"]["max"] == 1.0
    by_agent = {row["name"]: row for row in stats["by_agent"]}
    assert by_agent["a1"]["trajectories"] == 2 and by_agent["a1"]["mean_reward"] == 0.5
    assert by_agent["a2"]["tool_calls"] == 0
    assert stats["by_model"][0]["name"] == "m"


def test_markdown_shows_reconciliation_reasons_exports_and_plot():
    stats = compute_stats(frame(), SUMMARY, {"sft": {"train": 1, "validation": 0}})
    markdown = render_markdown(stats, ["reward_histogram.png"])
    assert "records read: **5** = valid **3** + rejected **2**" in markdown
    assert "| invalid_json | 2 |" in markdown
    assert "| sft | 1 | 0 |" in markdown
    assert "![reward_histogram.png](reward_histogram.png)" in markdown


def test_plot_is_a_png_even_without_rewards():
    assert reward_histogram_png(frame()).startswith(b"\x89PNG")
    assert reward_histogram_png(frame().iloc[0:0]).startswith(b"\x89PNG")
