"""What the report page aggregates and samples (no Dagster, no HTML).

Everything the page shows is bounded whatever the corpus size: plots get aggregated
tables (bins, quantiles, the top tools, a sample of tasks), the viewer a fixed number of
rows per export, the quarantine a few examples per reason. The aggregates themselves are
exact: every export row is scanned once, as its shard writes it, for the trajectories it
was made from (``exports/export_scan.py``).

Samples are picked by a seeded hash of what a row refers to (its trajectory ids), so the
exports of one family show the same trajectories: the same rollout as an SFT row, a
Hermes conversation, a TRL row and a LLaMA-Factory row, side by side.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd

from trajectory_assets.exports.export_scan import ExportScan, rank
from trajectory_assets.report.viewer import TrajectoryInfo, clip
from trajectory_assets.report.tool_use import tool_use_of

MAX_GROUPS = 9  # reward histograms: the largest (agent, source format) groups; the rest are "other"
MAX_TOOLS = 20  # tools in the per-tool plot, by calls
MAX_SPREAD_TASKS = 30  # GRPO tasks whose rollouts' rewards are drawn one by one
MAX_FAILING_TASKS = 10  # tasks that never pass, listed with their prompt
DISCRETE_VALUES = 12  # up to this many distinct values get a bar each instead of bins
BINS = 20
RAW_EXAMPLE_LIMIT = 1_500  # characters of a quarantined record shown


# ------------------------------------------------------------------ trajectories


def trajectory_infos(trajectories: pd.DataFrame, ids: Iterable[str]) -> dict[str, TrajectoryInfo]:
    wanted = trajectories.loc[trajectories["trajectory_id"].isin(set(ids))]
    return {
        row.trajectory_id: TrajectoryInfo(
            uri=row.source_uri, line=None if pd.isna(row.source_line) else int(row.source_line),
            reward=None if pd.isna(row.reward) else float(row.reward), turns=int(row.num_assistant_turns))
        for row in wanted.itertuples(index=False)
    }


def _bins(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, middle) of the bars: one narrow bar per value when there are few
    distinct values (rewards are often 0 / 0.5 / 1), else equal-width bins."""
    distinct = np.unique(values)
    if len(distinct) <= DISCRETE_VALUES:
        # a lone value gets a narrow bar, not one that looks like a range
        half = 0.4 * float(np.min(np.diff(distinct))) if len(distinct) > 1 else 0.05 * max(1.0, abs(distinct[0]))
        return distinct - half, distinct + half, distinct
    edges = np.histogram_bin_edges(values, bins=BINS)
    return edges[:-1], edges[1:], (edges[:-1] + edges[1:]) / 2


def histogram(values: np.ndarray, groups: np.ndarray | None = None) -> pd.DataFrame:
    """Counts per bar (and group): columns group, start, end, value, count. Bars are
    shared by all groups, so their plots compare."""
    values = np.asarray(values, dtype=float)
    keep = np.isfinite(values)
    values = values[keep]
    groups = np.full(len(values), "all", dtype=object) if groups is None else np.asarray(groups, dtype=object)[keep]
    if not len(values):
        return pd.DataFrame(columns=["group", "start", "end", "value", "count"])
    start, end, middle = _bins(values)
    if len(middle) == len(np.unique(values)) and len(middle) <= DISCRETE_VALUES:
        index = np.searchsorted(middle, values)
    else:
        index = np.clip(np.searchsorted(end, values, side="left"), 0, len(end) - 1)
    counts = pd.DataFrame({"group": groups, "bar": index}).value_counts().rename("count").reset_index()
    counts["start"], counts["end"], counts["value"] = start[counts["bar"]], end[counts["bar"]], middle[counts["bar"]]
    return counts.sort_values(["group", "bar"])[["group", "start", "end", "value", "count"]].reset_index(drop=True)


def reward_by_group(trajectories: pd.DataFrame) -> pd.DataFrame:
    """Reward histogram per agent and source format (the largest groups; others pooled)."""
    rewarded = trajectories.loc[trajectories["reward"].notna()]
    labels = (rewarded["agent_name"].fillna("(no agent)") + " · " + rewarded["source_format"]).to_numpy(dtype=object)
    sizes = Counter(labels)
    top = {label for label, _ in sizes.most_common(MAX_GROUPS - 1)} if len(sizes) > MAX_GROUPS else set(sizes)
    labels = np.array([label if label in top else "(other)" for label in labels], dtype=object)
    return histogram(rewarded["reward"].to_numpy(dtype=float), labels)


PASS_BUCKETS = ("never passes", "0–25%", "25–50%", "50–75%", "75–<100%", "always passes")


def pass_rate_buckets(per_task: list[dict[str, Any]]) -> pd.DataFrame:
    """Tasks by the share of their rollouts that passed."""
    counts: Counter = Counter()
    for task in per_task:
        rate = task["passes"] / task["rollouts"]
        bucket = 0 if rate == 0 else 5 if rate == 1 else 1 + min(int(rate * 4), 3)
        counts[PASS_BUCKETS[bucket]] += 1
    return pd.DataFrame({"bucket": list(PASS_BUCKETS), "tasks": [counts[b] for b in PASS_BUCKETS]})


def failing_tasks(per_task: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tasks none of whose rollouts passed, the most tried first."""
    failing = [task for task in per_task if task["passes"] == 0]
    failing.sort(key=lambda task: (-task["rollouts"], task["task_key"]))
    return failing[:MAX_FAILING_TASKS]


def export_lengths(scans: list[ExportScan], trajectories: pd.DataFrame) -> pd.DataFrame:
    """Per export and measure (tokens as the rollout's usage recorded them, assistant
    turns): quantiles over the trajectories the export was made from."""
    indexed = trajectories.set_index("trajectory_id")[["total_tokens", "num_assistant_turns"]]
    rows = []
    for scan in scans:
        used = indexed.loc[indexed.index.intersection(list(scan.trajectory_ids))]
        for measure, column in (("tokens", "total_tokens"), ("assistant turns", "num_assistant_turns")):
            values = used[column].dropna().to_numpy(dtype=float)
            if not len(values):
                continue
            q = np.quantile(values, [0.0, 0.25, 0.5, 0.75, 1.0])
            rows.append({"export": scan.name, "measure": measure, "trajectories": len(values),
                         "min": q[0], "p25": q[1], "p50": q[2], "p75": q[3], "max": q[4],
                         "mean": round(float(values.mean()), 2)})
    return pd.DataFrame(rows, columns=["export", "measure", "trajectories", "min", "p25", "p50", "p75", "max", "mean"])


def dpo_margins(scans: list[ExportScan], trajectories: pd.DataFrame) -> pd.DataFrame:
    """Margin histogram of every distinct pair of the DPO family (a pair in several
    flavors counts once); a row without ``quality_difference`` gets its rewards' difference."""
    pairs: dict[tuple[str, str], float | None] = {}
    for scan in scans:
        if scan.family == "dpo":
            for pair, margin in scan.pairs.items():
                if pairs.get(pair) is None:
                    pairs[pair] = margin
    rewards = trajectories.set_index("trajectory_id")["reward"]
    margins = []
    for (chosen, rejected), margin in pairs.items():
        if margin is None and chosen in rewards.index and rejected in rewards.index:
            margin = rewards[chosen] - rewards[rejected]
        if margin is not None and np.isfinite(margin):
            margins.append(float(margin))
    return histogram(np.array(margins, dtype=float))


@dataclass
class GrpoSpread:
    std: pd.DataFrame  # histogram of each task's reward standard deviation (every task)
    tasks: pd.DataFrame  # task, reward, rollouts (a sample of tasks, every rollout's reward)
    total_tasks: int


def grpo_spread(scans: list[ExportScan], trajectories: pd.DataFrame, seed: str) -> GrpoSpread:
    """Rewards of each GRPO-family task's rollouts: the spread of every task, and the
    rewards themselves for a seeded sample of tasks."""
    tasks: dict[str, tuple[str, ...]] = {}
    for scan in scans:
        if scan.family == "grpo":
            for task, rollouts in scan.tasks.items():
                tasks.setdefault(task, rollouts)
    pairs = pd.DataFrame([(task, trajectory_id) for task, rollouts in tasks.items() for trajectory_id in rollouts],
                         columns=["task", "trajectory_id"])
    rewards = pairs.merge(trajectories[["trajectory_id", "reward"]], on="trajectory_id").dropna(subset=["reward"])
    by_task = rewards.groupby("task")["reward"]
    shown = sorted(rewards["task"].unique(), key=lambda task: rank(seed, task))[:MAX_SPREAD_TASKS]
    sampled = rewards.loc[rewards["task"].isin(shown)]
    points = sampled.groupby(["task", "reward"]).size().rename("rollouts").reset_index()
    points = points.merge(sampled.groupby("task")["reward"].mean().rename("mean").reset_index(), on="task")
    points["task"] = points["task"].str[:12]
    return GrpoSpread(histogram(by_task.std(ddof=0).to_numpy(dtype=float)),
                      points[["task", "reward", "rollouts", "mean"]],
                      len(tasks))


# ------------------------------------------------------------------ messages


@dataclass
class MessageFacts:
    """Tool use per source format and tool (calls, failed results, by the Hermes batch
    runner's rule), and the first user message of some trajectories."""

    calls: Counter = field(default_factory=Counter)  # (source_format, tool) -> calls
    failures: Counter = field(default_factory=Counter)  # (source_format, tool) -> failed results
    prompts: dict[str, str] = field(default_factory=dict)  # trajectory_id -> first user message

    def tools(self, source_format: str | None = None) -> dict[str, dict[str, Any]]:
        """{tool: {calls, failures, failure_rate}}, every tool, by name."""
        calls: Counter = Counter()
        failures: Counter = Counter()
        for (fmt, name), count in self.calls.items():
            if source_format in (None, fmt):
                calls[name] += count
        for (fmt, name), count in self.failures.items():
            if source_format in (None, fmt):
                failures[name] += count
        return {name: {"calls": calls[name], "failures": failures[name],
                       "failure_rate": round(failures[name] / calls[name], 4) if calls[name] else None}
                for name in sorted(calls)}


def message_facts(table: Any, trajectories: pd.DataFrame, prompt_ids: set[str]) -> MessageFacts:
    """Tool use of every trajectory that called a tool (``report/tool_use.py``: counted by
    ingest), per its source format; and the first user message of the trajectories of
    ``prompt_ids``, read from their messages (``trajectories``: trajectory_id,
    source_format, num_tool_calls)."""
    facts = MessageFacts()
    with_tools = trajectories.loc[trajectories["num_tool_calls"] > 0]
    formats = dict(zip(with_tools["trajectory_id"], with_tools["source_format"]))
    for trajectory_id, used in tool_use_of(table, set(formats)).items():
        source_format = formats[trajectory_id]
        for name, (calls, failures) in used.items():
            facts.calls[source_format, name] += calls
            facts.failures[source_format, name] += failures
    for chunk in table.scan(["trajectory_id", "messages"], ids=prompt_ids) if prompt_ids else []:
        for trajectory_id, messages_json in chunk.itertuples(index=False):
            first = next((m for m in orjson.loads(messages_json) if m["role"] == "user"), None)
            content = first["content"] if first else ""
            facts.prompts[trajectory_id] = content if isinstance(content, str) else " ".join(
                part.get("text", "") for part in content if isinstance(part, dict))
    return facts


def top_tools(tools: dict[str, dict[str, Any]]) -> pd.DataFrame:
    rows = [{"tool": name, **counts} for name, counts in tools.items()]
    rows.sort(key=lambda row: (-row["calls"], row["tool"]))
    return pd.DataFrame(rows[:MAX_TOOLS], columns=["tool", "calls", "failures", "failure_rate"])


# ------------------------------------------------------------------ quarantine


@dataclass
class QuarantineExamples:
    """The first few quarantined records of each reason (in batch order), cut to a bound.
    ``reasons``: records per reason (the ingest counts); reading stops once every reason
    has its examples."""

    per_reason: int
    reasons: Mapping[str, int]
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return all(len(self.examples.get(reason, [])) >= min(count, self.per_reason)
                   for reason, count in self.reasons.items())

    def add_lines(self, data: bytes) -> None:
        if self.complete:
            return
        for line in data.splitlines():
            if not line.strip():
                continue
            row = orjson.loads(line)
            kept = self.examples.setdefault(str(row.get("reason")), [])
            if len(kept) < self.per_reason:
                raw = row.get("raw") if isinstance(row.get("raw"), str) else ""
                kept.append({"source": row.get("source"), "line": row.get("line"),
                             "detail": clip(str(row.get("detail") or ""), 500), "raw": clip(raw, RAW_EXAMPLE_LIMIT)})
