"""Statistics report: computed from the trajectory table and the ingest summary (``trajectory_stats``),
then completed by the exports' manifests (``with_exports``)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pandas as pd

from trajectory_assets.chat.reward_components import objectives
from trajectory_assets.markdown import table
from trajectory_assets.sources import REPORT_SECTIONS
from trajectory_assets.sources.provenance import reward_provenance_lines

STATS_COLUMNS = [
    "trajectory_id", "task_key", "source_format", "source_uri", "source_line", "agent_name", "task_type", "model",
    "reward", "completed", "mask_sample", "num_messages", "num_assistant_turns", "num_tool_calls", "messages_chars",
    "total_tokens", "has_reasoning", "unknown_items", "quality_flags", "reward_components",
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


def component_stats(reward_components: pd.Series) -> dict[str, dict[str, Any]]:
    """The distribution of each objective of a multi-objective reward (``reward_components``)
    over the rollouts scored on it, by objective name.

    >>> component_stats(pd.Series(['{"format": 1.0, "correctness": 0.0}', None, '{"correctness": 1}']))
    {'correctness': {'count': 2, 'min': 0.0, 'mean': 0.5, 'p50': 0.5, 'p90': 0.9, 'max': 1.0}, \
'format': {'count': 1, 'min': 1.0, 'mean': 1.0, 'p50': 1.0, 'p90': 1.0, 'max': 1.0}}
    """
    scored = pd.DataFrame.from_records(list(reward_components.dropna().map(objectives)))
    return {str(name): _describe(scored[name]) for name in sorted(scored.columns)}


def flag_counts(quality_flags: pd.Series) -> dict[str, int]:
    """Trajectories per quality flag, every source format (the table's comma-separated column).

    >>> flag_counts(pd.Series(["compressed,partial_run", "", "compressed"]))
    {'compressed': 2, 'partial_run': 1}
    """
    counts: Counter = Counter()
    for row_flags in quality_flags:
        counts.update(flag for flag in row_flags.split(",") if flag)
    return dict(sorted(counts.items()))


def source_section(trajectories: pd.DataFrame, source_format: str, tools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The section of a source format that has one (``SourceFormat.report_section``): reasoning
    coverage, quality flags, and ``tools`` (tool use per tool of its rows, by the Hermes batch
    runner's failure rule: ``report_data.message_facts``)."""
    rows = trajectories.loc[trajectories["source_format"] == source_format]
    return {
        "trajectories": len(rows),
        "completed": int(rows["completed"].sum()),
        "reasoning_coverage": round(int(rows["has_reasoning"].sum()) / len(rows), 4) if len(rows) else None,
        "quality_flags": flag_counts(rows["quality_flags"]),
        "tools": tools,
    }


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k rollouts drawn from n (c of them passing) passes:
    the unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al., 2021, "Evaluating Large
    Language Models Trained on Code")."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def task_stats(trajectories: pd.DataFrame, pass_threshold: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Per task (every rewarded rollout of a task_key): rollouts, passes, mean reward, and
    pass@k; plus the means over tasks that have at least k rollouts, for k = 1, 2, 4, ..."""
    rewarded = trajectories.loc[trajectories["reward"].notna(), ["task_key", "task_type", "reward"]]
    by_task = rewarded.assign(passed=rewarded["reward"] >= pass_threshold).groupby("task_key", sort=True)
    table = by_task.agg(task_type=("task_type", "first"), rollouts=("reward", "size"), passes=("passed", "sum"),
                        mean_reward=("reward", "mean"), min_reward=("reward", "min"), max_reward=("reward", "max"))
    max_rollouts = int(table["rollouts"].max()) if len(table) else 0
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= max_rollouts]
    tasks = []
    for row in table.itertuples():
        n, c = int(row.rollouts), int(row.passes)
        tasks.append({
            "task_key": row.Index, "task_type": row.task_type, "rollouts": n, "passes": c,
            "mean_reward": round(float(row.mean_reward), 6),
            "zero_variance": n >= 2 and row.min_reward == row.max_reward,
            "pass_at_k": {str(k): round(pass_at_k(n, c, k), 6) for k in ks if k <= n},
        })
    summary = {
        "tasks": len(tasks),
        "pass_threshold": pass_threshold,
        "rollouts_per_task": _describe(table["rollouts"]),
        "mean_reward_per_task": _describe(table["mean_reward"]),
        "zero_variance_tasks": sum(task["zero_variance"] for task in tasks),
        "pass_at_k": {
            str(k): {"tasks": len(values), "mean": round(sum(values) / len(values), 6)}
            for k in ks
            if (values := [task["pass_at_k"][str(k)] for task in tasks if str(k) in task["pass_at_k"]])
        },
    }
    return summary, tasks


def trajectory_stats(
    trajectories: pd.DataFrame,
    ingest_summary: dict[str, Any],
    sections: dict[str, dict[str, Any]] | None = None,
    duplicates_across_batches: int = 0,
    tasks: dict[str, Any] | None = None,
    tools: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The statistics of the trajectories and the ingest summary, with no export yet (its keys
    are in their places, empty, for ``with_exports``). ``sections``: the source formats' own
    sections by name (``source_section``); ``tools``: calls, failed results and error rate per
    tool, every source format."""
    stats = {
        "records_read": int(ingest_summary["records_read"]),
        "records_valid": int(ingest_summary["records_valid"]),
        "records_rejected": int(ingest_summary["records_rejected"]),
        "rejected_by_reason": dict(ingest_summary["rejected_by_reason"]),
        "redactions": {
            "by_type": dict(ingest_summary.get("redactions_by_type", {})),
            "trajectories": len(ingest_summary.get("redacted_trajectory_ids", [])),
            "trajectory_ids": list(ingest_summary.get("redacted_trajectory_ids", [])),
            # the detector(s) that scrubbed the sources (none: redaction was off)
            "detectors": sorted({source.get("redaction") for source in ingest_summary["sources"]} - {None}),
        },
        "sources": len(ingest_summary["sources"]),
        "sources_failed": int(ingest_summary["sources_failed"]),
        # NaN / Infinity outside rewards in valid records: JSON has no such number, so stored as null
        "non_finite_values": int(ingest_summary.get("non_finite_values", 0)),
        # valid in two batches (files) at once: kept once in every dataset, counted here
        "duplicates_across_batches": duplicates_across_batches,
        **export_stats({}),
        "tasks": tasks or {"tasks": 0},
        "reward": _describe(trajectories["reward"]),
        "reward_components": component_stats(trajectories["reward_components"]),
        "assistant_turns": _describe(trajectories["num_assistant_turns"]),
        "tool_calls": _describe(trajectories["num_tool_calls"]),
        "messages_chars": _describe(trajectories["messages_chars"]),
        "total_tokens": _describe(trajectories["total_tokens"]),
        "completed": int(trajectories["completed"].sum()),
        "mask_sample": int(trajectories["mask_sample"].sum()),
        # what the producers flagged (compressed, partial_run, verification_skipped, ...): kept in
        # the table, left out of an export where its curation says (excluded_by_export)
        "quality_flags": flag_counts(trajectories["quality_flags"]),
        "with_reasoning": int(trajectories["has_reasoning"].sum()),
        "unknown_items": int(trajectories["unknown_items"].sum()),
        "by_source_format": _breakdown(trajectories, "source_format"),
        "by_agent": _breakdown(trajectories, "agent_name"),
        "by_task_type": _breakdown(trajectories, "task_type"),
        "by_model": _breakdown(trajectories, "model"),
        "tools": tools or {},
        **{name: (sections or {}).get(name) or {"trajectories": 0} for name in REPORT_SECTIONS},
    }
    provenance = [{"source_id": source["source_id"], "reward_provenance": source["reward_provenance"]}
                  for source in ingest_summary["sources"] if source.get("reward_provenance")]
    if provenance:  # only where a format said where its rewards came from (NeMo Gym)
        stats["reward_provenance"] = provenance
    return stats


def export_stats(manifests: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """What the statistics take from each export's manifest: rows, exclusions, token lengths,
    DPO pairs."""
    dpo = manifests.get("dpo")
    return {
        "exports": {name: manifest["rows"] for name, manifest in manifests.items()},
        "excluded_by_export": {name: manifest["excluded"] for name, manifest in manifests.items()},
        # each export's rows measured with the configured tokenizer's chat template (count 0: not measured)
        "tokens_by_export": {name: {**manifest["token_budget"], **manifest["distributions"]["tokens"]}
                             for name, manifest in manifests.items()},
        "dpo_pairs": None if dpo is None else {
            "pairing": dpo["config"]["dpo"]["pairing"],
            "pairs": sum(dpo["rows"].values()),
            "quality_difference": dpo["distributions"].get("quality_difference", {"count": 0}),
        },
    }


def with_exports(stats: dict[str, Any], manifests: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """``stats`` of the trajectories (``trajectory_stats``) completed by the exports' ``manifests``:
    their keys filled in where ``stats`` holds them, so stats.json's keys keep one order.

    >>> manifest = {"rows": {"train": 2, "validation": 0}, "excluded": {}, "token_budget": {},
    ...             "distributions": {"tokens": {"count": 0}}}
    >>> stats = {"sources": 1, **export_stats({}), "tasks": {"tasks": 0}}
    >>> completed = with_exports(stats, {"sft": manifest})
    >>> list(completed) == list(stats), completed["exports"]
    (True, {'sft': {'train': 2, 'validation': 0}})
    """
    completed = {**stats, **export_stats(manifests)}
    decontamination = decontamination_stats(manifests)
    if decontamination is not None:  # only when benchmarks are configured: otherwise stats.json is as it was
        completed["decontamination"] = decontamination
    return completed


def decontamination_stats(manifests: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The evaluation sets the exports were checked against and, per export, the trajectories
    each left out (from the manifests' ``decontamination`` blocks); None when none is configured.

    >>> block = {"ngram": 13, "benchmarks": [{"name": "gsm8k", "path": "g.jsonl", "sha256": "ab", "items": 2,
    ...                                        "ngrams": 30, "ids": 0, "left_out": 4}]}
    >>> decontamination_stats({"sft": {"decontamination": block}, "dpo": {}})["left_out_by_export"]
    {'sft': {'gsm8k': 4}}
    """
    blocks = {name: manifest["decontamination"] for name, manifest in manifests.items()
              if manifest.get("decontamination")}
    if not blocks:
        return None
    first = next(iter(blocks.values()))
    return {
        "ngram": first["ngram"],
        "benchmarks": [{key: value for key, value in benchmark.items() if key != "left_out"}
                       for benchmark in first["benchmarks"]],
        "left_out_by_export": {name: {benchmark["name"]: benchmark["left_out"] for benchmark in block["benchmarks"]}
                               for name, block in blocks.items()},
    }


def _redaction_summary(redactions: dict[str, Any]) -> str:
    if not redactions["detectors"]:
        return "Redaction was off (`redaction.enabled: false`): records were stored as they came."
    found = (f"{redactions['trajectories']} record(s) held secrets; each was replaced by a typed placeholder "
             "before anything was stored (ids in stats.json)." if redactions["trajectories"] else "No secrets found.")
    return f"{found} Detector: {'; '.join(redactions['detectors'])}."


def render_markdown(stats: dict[str, Any], plot_files: list[str]) -> str:
    lines = [
        "# Trajectory statistics",
        "",
        "Plots, a sample of every export shown as chats, and quarantined examples: `index.html` beside this file.",
        "",
        f"- records read: **{stats['records_read']}** = valid **{stats['records_valid']}**"
        f" + rejected **{stats['records_rejected']}**",
        f"- sources: {stats['sources']} ({stats['sources_failed']} failed to read); "
        f"copies of one record in several batches, used once: {stats['duplicates_across_batches']}",
        f"- completed: {stats['completed']}, mask_sample: {stats['mask_sample']},"
        f" with reasoning: {stats['with_reasoning']}, unknown output items: {stats['unknown_items']}",
        f"- NaN / Infinity values outside rewards (stored as null, rows flagged non_finite_number): "
        f"{stats['non_finite_values']}",
        *(["", "## Plots", "", *(f"![{name}]({name})" for name in plot_files)] if plot_files else []),
        "",
        "## Rejected by reason",
        "",
        *table(["reason", "records"], [[r, n] for r, n in stats["rejected_by_reason"].items()]),
        "",
        "## Secrets redacted",
        "",
        _redaction_summary(stats["redactions"]),
        "",
        *table(["type", "replaced"], [[t, n] for t, n in stats["redactions"]["by_type"].items()]),
        "",
        "## Export rows",
        "",
        *table(
            ["export", "train", "validation"],
            [[name, c.get("train", 0), c.get("validation", 0)] for name, c in stats["exports"].items()],
        ),
        "",
        "## Distributions",
        "",
        *table(
            ["measure", "count", "min", "mean", "p50", "p90", "max"],
            [
                [name, *(stats[name].get(k, "") for k in ("count", "min", "mean", "p50", "p90", "max"))]
                for name in ("reward", "assistant_turns", "tool_calls", "messages_chars", "total_tokens")
            ],
        ),
    ]
    lines += reward_provenance_lines(stats.get("reward_provenance", []))
    if stats["quality_flags"]:
        lines += ["", "## Quality flags (every source)", "",
                  *table(["flag", "trajectories"], [[flag, n] for flag, n in stats["quality_flags"].items()])]
    if stats["reward_components"]:
        lines += [
            "", "## Reward components (multi-objective verifiers)", "",
            *table(["objective", "rollouts", "min", "mean", "p50", "p90", "max"],
                   [[name, *(d.get(k, "") for k in ("count", "min", "mean", "p50", "p90", "max"))]
                    for name, d in stats["reward_components"].items()]),
        ]
    tasks = stats["tasks"]
    if tasks.get("tasks"):
        lines += [
            "", "## Tasks (rollouts of one prompt)", "",
            f"- tasks with rewards: {tasks['tasks']}; a rollout passes at reward >= {tasks['pass_threshold']};"
            f" tasks whose rollouts all got one reward (no GRPO signal): {tasks['zero_variance_tasks']}",
            f"- rollouts per task: mean {tasks['rollouts_per_task']['mean']}, max {tasks['rollouts_per_task']['max']};"
            f" mean reward per task: p50 {tasks['mean_reward_per_task']['p50']},"
            f" mean {tasks['mean_reward_per_task']['mean']} (every task in reports/tasks.jsonl)",
            "",
            *table(["k", "pass@k (mean over tasks)", "tasks with >= k rollouts"],
                   [[k, v["mean"], v["tasks"]] for k, v in tasks["pass_at_k"].items()]),
        ]
    if stats["dpo_pairs"]:
        margin = stats["dpo_pairs"]["quality_difference"]
        lines += [
            "", "## DPO pairs", "",
            *table(["pairing", "pairs", "margin min", "margin p50", "margin mean", "margin max"],
                   [[stats["dpo_pairs"]["pairing"], stats["dpo_pairs"]["pairs"],
                     *(margin.get(k, "") for k in ("min", "p50", "mean", "max"))]]),
        ]
    lines += ["", "## Token lengths per export", ""]
    measured = {name: t for name, t in stats["tokens_by_export"].items() if t["count"]}
    if measured:
        tokenizers = sorted({t["tokenizer"] for t in measured.values()})
        lines += [f"Rows rendered with the chat template of {', '.join(f'`{n}`' for n in tokenizers)} and tokenized"
                  " (SFT: the conversation; DPO: the longer side; GRPO: the prompt).", ""]
        lines += table(["export", "rows", "min", "p50", "p90", "max", "max_tokens", "left out", "truncated"],
                       [[name, t["count"], t["min"], t["p50"], t["p90"], t["max"], t["max_tokens"] or "",
                         t["left_out"], t["truncated"]] for name, t in measured.items()])
    else:
        lines += ["Not measured: no `tokenizer` is configured."]
    decontamination = stats.get("decontamination")
    if decontamination:
        names = [benchmark["name"] for benchmark in decontamination["benchmarks"]]
        lines += [
            "", "## Benchmark decontamination", "",
            f"Trajectories sharing a {decontamination['ngram']}-word n-gram of their user or assistant turns, or a "
            "task id, with an evaluation set are left out of every export (counted as `contaminated:<benchmark>`).",
            "",
            *table(["benchmark", "path", "items", "n-grams", "ids", "sha256"],
                   [[b["name"], b["path"], b["items"], b["ngrams"], b["ids"], b["sha256"][:12]]
                    for b in decontamination["benchmarks"]]),
            "",
            *table(["export", *(f"left out: {name}" for name in names)],
                   [[export, *(counts.get(name, 0) for name in names)]
                    for export, counts in decontamination["left_out_by_export"].items()]),
        ]
    lines += ["", "## Left out of each export", ""]
    lines += table(["export", "reason", "rows"],
                   [[name, reason, count] for name, excluded in stats["excluded_by_export"].items()
                    for reason, count in excluded.items()])
    for key, title in (("by_agent", "agent"), ("by_task_type", "task_type"), ("by_model", "model")):
        lines += ["", f"## By {title}", ""]
        lines += table(
            [title, "trajectories", "mean reward", "mean turns", "tool calls"],
            [[r["name"], r["trajectories"], r["mean_reward"], r["mean_turns"], r["tool_calls"]] for r in stats[key]],
        )
    if stats["tools"]:
        busiest = sorted(stats["tools"].items(), key=lambda item: (-item[1]["calls"], item[0]))
        lines += ["", "## Tools (most called)", ""]
        lines += table(["tool", "calls", "failed results", "error rate"],
                       [[name, t["calls"], t["failures"], t["failure_rate"]] for name, t in busiest[:20]])
    for name, title in REPORT_SECTIONS.items():
        section = stats.get(name) or {}
        if section.get("trajectories"):
            lines += [
                "", f"## {title}", "",
                f"- trajectories: {section['trajectories']} (completed {section['completed']}), "
                f"reasoning coverage: {section['reasoning_coverage']:.1%}",
                "",
                *table(["quality flag", "trajectories"], [[f, n] for f, n in section["quality_flags"].items()]),
                "",
                *table(["tool", "calls", "failures", "failure rate"],
                       [[tool, t["calls"], t["failures"], t["failure_rate"]] for tool, t in section["tools"].items()]),
            ]
    return "\n".join(lines) + "\n"

