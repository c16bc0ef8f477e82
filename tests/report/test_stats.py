from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from trajectory_assets.report.stats import render_markdown, source_section, trajectory_stats, with_exports

SUMMARY = {"records_read": 5, "records_valid": 3, "records_rejected": 2, "sources_failed": 0,
           "rejected_by_reason": {"invalid_json": 2}, "sources": [{}]}


NOT_MEASURED = {"tokenizer": None, "max_tokens": None, "over_token_budget": "drop", "left_out": 0, "truncated": 0}
MANIFESTS = {"sft": {"rows": {"train": 1, "validation": 0}, "excluded": {"below_min_reward": 2},
                     "token_budget": NOT_MEASURED, "distributions": {"tokens": {"count": 0}}}}


def compute_stats(trajectories, ingest_summary, manifests, **trajectory_parts):
    """The statistics as the report's two steps make them: the trajectories', then the exports'."""
    return with_exports(trajectory_stats(trajectories, ingest_summary, **trajectory_parts), manifests)


def frame():
    return trajectory_frame([
        make_rollout([call_item("f", "{}", "c"), output_item("c", "r"), message_item("ok")], reward=1.0,
                     agent_ref={"name": "a1"}),
        make_rollout(reward=0.0, request_input="b", agent_ref={"name": "a1"}),
        make_rollout(reward=-2.0, request_input="c", agent_ref="a2"),
    ])


def test_counts_distributions_and_breakdowns():
    stats = compute_stats(frame(), SUMMARY, MANIFESTS)
    assert (stats["records_read"], stats["records_valid"], stats["records_rejected"]) == (5, 3, 2)
    assert stats["reward"]["min"] == -2.0 and stats["reward"]["max"] == 1.0 and stats["reward"]["count"] == 3
    assert stats["tool_calls"]["max"] == 1.0
    by_agent = {row["name"]: row for row in stats["by_agent"]}
    assert by_agent["a1"]["trajectories"] == 2 and by_agent["a1"]["mean_reward"] == 0.5
    assert by_agent["a2"]["tool_calls"] == 0
    assert stats["by_model"][0]["name"] == "m"


def test_markdown_shows_reconciliation_reasons_exports_tools_and_plots():
    tools = {"f": {"calls": 3, "failures": 1, "failure_rate": 0.3333}}
    stats = compute_stats(frame(), SUMMARY, MANIFESTS, tools=tools)
    markdown = render_markdown(stats, ["plots/rewards.png", "plots/tools.png"])
    assert "records read: **5** = valid **3** + rejected **2**" in markdown
    assert "| invalid_json | 2 |" in markdown
    assert "| sft | 1 | 0 |" in markdown
    assert "| f | 3 | 1 | 0.3333 |" in markdown
    assert "`index.html`" in markdown  # where the page is
    # the plots come right after the counts, before the tables
    assert markdown.index("![plots/rewards.png](plots/rewards.png)") < markdown.index("## Rejected by reason")
    assert "![plots/tools.png](plots/tools.png)" in markdown


def test_hermes_section_counts_flags_reasoning_and_takes_its_tools():
    import pandas as pd

    trajectories = frame()
    hermes = trajectories.iloc[:2].assign(source_format="hermes", has_reasoning=[True, False],
                                          quality_flags=["no_reasoning,unanswered_tool_calls", "no_reasoning"])
    both = pd.concat([hermes, trajectories.iloc[2:]], ignore_index=True)
    section = source_section(both, "hermes", {"f": {"calls": 1, "failures": 0, "failure_rate": 0.0}})
    assert section["trajectories"] == 2 and section["reasoning_coverage"] == 0.5
    assert section["quality_flags"] == {"no_reasoning": 2, "unanswered_tool_calls": 1}
    assert section["tools"] == {"f": {"calls": 1, "failures": 0, "failure_rate": 0.0}}


def test_pass_at_k_is_the_unbiased_estimator():
    from trajectory_assets.report.stats import pass_at_k

    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(4, 1, 1) == 0.25
    assert abs(pass_at_k(4, 1, 2) - 0.5) < 1e-12  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 2, 3) == 1.0  # any 3 of 4 include a pass


def test_task_stats_per_task_and_means_over_tasks_with_enough_rollouts():
    from trajectory_assets.report.stats import task_stats

    rows = [make_rollout(reward=r, request_input="t0", _ng_task_index=0, response_id=i)
            for i, r in enumerate([1.0, 0.0, 0.0, 0.0])]
    rows += [make_rollout(reward=1.0, request_input="t1", _ng_task_index=1, response_id=9),
             make_rollout(reward=1.0, request_input="t1", _ng_task_index=1, response_id=10)]
    summary, tasks = task_stats(trajectory_frame(rows), pass_threshold=1.0)
    by_rollouts = {task["rollouts"]: task for task in tasks}
    assert by_rollouts[4]["pass_at_k"] == {"1": 0.25, "2": 0.5, "4": 1.0} and not by_rollouts[4]["zero_variance"]
    assert by_rollouts[2]["zero_variance"] and by_rollouts[2]["mean_reward"] == 1.0
    assert summary["pass_at_k"]["1"] == {"tasks": 2, "mean": 0.625}
    assert summary["pass_at_k"]["4"] == {"tasks": 1, "mean": 1.0}
    assert summary["zero_variance_tasks"] == 1


def test_markdown_lists_exclusions_per_export():
    stats = compute_stats(frame(), SUMMARY, MANIFESTS)
    assert "| sft | below_min_reward | 2 |" in render_markdown(stats, [])


def test_markdown_says_tokens_were_not_measured_without_a_tokenizer():
    markdown = render_markdown(compute_stats(frame(), SUMMARY, MANIFESTS), [])
    assert "Not measured: no `tokenizer` is configured." in markdown


def test_markdown_shows_token_lengths_and_budget_per_export():
    measured = {"tokenizer": "tok", "max_tokens": 512, "over_token_budget": "truncate", "left_out": 3, "truncated": 2}
    tokens = {"count": 4, "min": 10.0, "p10": 11.0, "mean": 100.0, "p50": 90.0, "p90": 400.0, "max": 510.0}
    manifests = {**MANIFESTS, "trl_sft": {"rows": {"train": 4, "validation": 0}, "excluded": {"over_token_budget": 3},
                                          "token_budget": measured, "distributions": {"tokens": tokens}}}
    stats = compute_stats(frame(), SUMMARY, manifests)
    assert stats["tokens_by_export"]["trl_sft"]["p90"] == 400.0
    markdown = render_markdown(stats, [])
    assert "chat template of `tok`" in markdown
    assert "| trl_sft | 4 | 10.0 | 90.0 | 400.0 | 510.0 | 512 | 3 | 2 |" in markdown
    assert "| sft | 0 |" not in markdown  # an export without measured rows has no row in the table


def test_reward_components_and_producer_flags_are_reported():
    rows = [make_rollout(reward=2.0, request_input=f"t{i}", reward_components={"correctness": c, "format": 1.0})
            for i, c in enumerate((1.0, 0.0))]
    rows.append(make_rollout(reward=0.25, request_input="s", verification_skipped=True))
    stats = compute_stats(trajectory_frame(rows), SUMMARY, MANIFESTS)
    assert stats["reward_components"]["correctness"]["mean"] == 0.5
    assert stats["reward_components"]["format"]["count"] == 2
    assert stats["quality_flags"] == {"verification_skipped": 1}
    assert stats["reward"]["count"] == 2  # the placeholder reward is no reward
    markdown = render_markdown(stats, [])
    assert "## Reward components (multi-objective verifiers)" in markdown and "| correctness | 2 |" in markdown
    assert "| verification_skipped | 1 |" in markdown
