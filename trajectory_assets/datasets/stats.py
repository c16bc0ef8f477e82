"""Statistics report: computed from the trajectory table, the ingest summary and export counts."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson
import pandas as pd

from trajectory_assets.formats.hermes import tool_result_failed

STATS_COLUMNS = [
    "trajectory_id", "source_format", "agent_name", "task_type", "model", "reward", "completed", "mask_sample",
    "num_messages", "num_assistant_turns", "num_tool_calls", "messages_chars", "total_tokens",
    "has_reasoning", "unknown_items",
]


def _describe(series: pd.Series) -> dict[str, Any]:
    values = series.dropna().astype(float)
    if values.empty:
        return {"count": 0}
    quantiles = values.quantile([0.5, 0.9]).tolist()
    return {
        "count": int(values.size),
        "min": float(values.min()),
        "mean": round(float(values.mean()), 6),
        "p50": float(quantiles[0]),
        "p90": float(quantiles[1]),
        "max": float(values.max()),
    }


def _breakdown(trajectories: pd.DataFrame, column: str) -> list[dict[str, Any]]:
    if trajectories.empty:
        return []
    keys = trajectories[column].fillna("(none)")
    grouped = trajectories.groupby(keys, sort=True)
    table = grouped.agg(
        trajectories=("reward", "size"),
        mean_reward=("reward", "mean"),
        mean_turns=("num_assistant_turns", "mean"),
        tool_calls=("num_tool_calls", "sum"),
    )
    return [
        {
            "name": str(key),
            "trajectories": int(row.trajectories),
            "mean_reward": None if pd.isna(row.mean_reward) else round(float(row.mean_reward), 6),
            "mean_turns": round(float(row.mean_turns), 3),
            "tool_calls": int(row.tool_calls),
        }
        for key, row in table.iterrows()
    ]


HERMES_COLUMNS = ["source_format", "completed", "has_reasoning", "quality_flags", "messages"]


def hermes_stats(chunks: Iterable[pd.DataFrame]) -> dict[str, Any]:
    """Hermes section: tool usage and failure rates per tool (the batch runner's failure
    rule), reasoning coverage, quality flags. Only Hermes rows' messages are decoded."""
    trajectories = completed = with_reasoning = 0
    flags: Counter = Counter()
    calls: Counter = Counter()
    failures: Counter = Counter()
    for chunk in chunks:
        hermes = chunk.loc[chunk["source_format"] == "hermes"]
        trajectories += len(hermes)
        completed += int(hermes["completed"].sum())
        with_reasoning += int(hermes["has_reasoning"].sum())
        for row_flags in hermes["quality_flags"]:
            flags.update(flag for flag in row_flags.split(",") if flag)
        for messages_json in hermes["messages"]:
            names = {}
            for message in orjson.loads(messages_json):
                for call in message.get("tool_calls") or []:
                    names[call["id"]] = call["function"]["name"]
                    calls[call["function"]["name"]] += 1
                if message["role"] == "tool" and isinstance(message["content"], str):
                    if tool_result_failed(message["content"]):
                        failures[names.get(message["tool_call_id"], "?")] += 1
    return {
        "trajectories": trajectories,
        "completed": completed,
        "reasoning_coverage": round(with_reasoning / trajectories, 4) if trajectories else None,
        "quality_flags": dict(sorted(flags.items())),
        "tools": {
            name: {"calls": calls[name], "failures": failures[name],
                   "failure_rate": round(failures[name] / calls[name], 4) if calls[name] else None}
            for name in sorted(calls)
        },
    }


def compute_stats(
    trajectories: pd.DataFrame,
    ingest_summary: dict[str, Any],
    export_rows: dict[str, dict[str, int]],
    hermes: dict[str, Any] | None = None,
    duplicates_across_batches: int = 0,
) -> dict[str, Any]:
    return {
        "records_read": int(ingest_summary["records_read"]),
        "records_valid": int(ingest_summary["records_valid"]),
        "records_rejected": int(ingest_summary["records_rejected"]),
        "rejected_by_reason": dict(ingest_summary["rejected_by_reason"]),
        "redactions": {
            "by_type": dict(ingest_summary.get("redactions_by_type", {})),
            "trajectories": len(ingest_summary.get("redacted_trajectory_ids", [])),
            "trajectory_ids": list(ingest_summary.get("redacted_trajectory_ids", [])),
        },
        "sources": len(ingest_summary["sources"]),
        "sources_failed": int(ingest_summary["sources_failed"]),
        # valid in two batches (files) at once: kept once in every dataset, counted here
        "duplicates_across_batches": duplicates_across_batches,
        "exports": export_rows,
        "reward": _describe(trajectories["reward"]),
        "assistant_turns": _describe(trajectories["num_assistant_turns"]),
        "tool_calls": _describe(trajectories["num_tool_calls"]),
        "messages_chars": _describe(trajectories["messages_chars"]),
        "total_tokens": _describe(trajectories["total_tokens"]),
        "completed": int(trajectories["completed"].sum()),
        "mask_sample": int(trajectories["mask_sample"].sum()),
        "with_reasoning": int(trajectories["has_reasoning"].sum()),
        "unknown_items": int(trajectories["unknown_items"].sum()),
        "by_source_format": _breakdown(trajectories, "source_format"),
        "by_agent": _breakdown(trajectories, "agent_name"),
        "by_task_type": _breakdown(trajectories, "task_type"),
        "by_model": _breakdown(trajectories, "model"),
        "hermes": hermes or {"trajectories": 0},
    }


def render_markdown(stats: dict[str, Any], plot_files: list[str]) -> str:
    lines = [
        "# Trajectory statistics",
        "",
        f"- records read: **{stats['records_read']}** = valid **{stats['records_valid']}**"
        f" + rejected **{stats['records_rejected']}**",
        f"- sources: {stats['sources']} ({stats['sources_failed']} failed to read); "
        f"copies of one record in several batches, used once: {stats['duplicates_across_batches']}",
        f"- completed: {stats['completed']}, mask_sample: {stats['mask_sample']},"
        f" with reasoning: {stats['with_reasoning']}, unknown output items: {stats['unknown_items']}",
        "",
        "## Rejected by reason",
        "",
        *_table(["reason", "records"], [[r, n] for r, n in stats["rejected_by_reason"].items()]),
        "",
        "## Secrets redacted",
        "",
        (f"{stats['redactions']['trajectories']} record(s) held secrets; each was replaced by a typed "
         "placeholder before anything was stored (ids in stats.json)."
         if stats["redactions"]["trajectories"] else "No secrets found."),
        "",
        *_table(["type", "replaced"], [[t, n] for t, n in stats["redactions"]["by_type"].items()]),
        "",
        "## Export rows",
        "",
        *_table(
            ["export", "train", "validation"],
            [[name, c.get("train", 0), c.get("validation", 0)] for name, c in stats["exports"].items()],
        ),
        "",
        "## Distributions",
        "",
        *_table(
            ["measure", "count", "min", "mean", "p50", "p90", "max"],
            [
                [name, *(stats[name].get(k, "") for k in ("count", "min", "mean", "p50", "p90", "max"))]
                for name in ("reward", "assistant_turns", "tool_calls", "messages_chars", "total_tokens")
            ],
        ),
    ]
    for key, title in (("by_agent", "agent"), ("by_task_type", "task_type"), ("by_model", "model")):
        lines += ["", f"## By {title}", ""]
        lines += _table(
            [title, "trajectories", "mean reward", "mean turns", "tool calls"],
            [[r["name"], r["trajectories"], r["mean_reward"], r["mean_turns"], r["tool_calls"]] for r in stats[key]],
        )
    hermes = stats.get("hermes") or {}
    if hermes.get("trajectories"):
        lines += [
            "", "## Hermes", "",
            f"- trajectories: {hermes['trajectories']} (completed {hermes['completed']}), "
            f"reasoning coverage: {hermes['reasoning_coverage']:.1%}",
            "",
            *_table(["quality flag", "trajectories"], [[f, n] for f, n in hermes["quality_flags"].items()]),
            "",
            *_table(["tool", "calls", "failures", "failure rate"],
                    [[name, t["calls"], t["failures"], t["failure_rate"]] for name, t in hermes["tools"].items()]),
        ]
    if plot_files:
        lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in plot_files]
    return "\n".join(lines) + "\n"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return ["(none)"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join("" if v is None else str(v).replace("|", "\\|") for v in row) + " |" for row in rows]
    return out


def reward_histogram_png(trajectories: pd.DataFrame) -> bytes:
    import matplotlib

    matplotlib.use("Agg")  # headless: never needs a display
    from matplotlib import pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.2), dpi=100)
    rewards = trajectories["reward"].dropna()
    if rewards.empty:
        axis.text(0.5, 0.5, "no rewards", ha="center", va="center")
    else:
        axis.hist(rewards, bins=min(30, max(5, rewards.nunique())), color="#4f6db8")
    axis.set_xlabel("reward")
    axis.set_ylabel("trajectories")
    axis.set_title("Reward distribution of validated trajectories")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()
