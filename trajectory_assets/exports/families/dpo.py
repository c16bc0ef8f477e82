"""The DPO family: one unit per pair of rollouts of a task (:class:`PairItem`), planned by
``dpo.pairing`` and the margin, every export of the family rendered from it (``dpo``,
``trl_dpo``, ``nemo_rl_dpo``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from functools import cached_property, partial
from typing import Any

import numpy as np
import orjson
import pandas as pd

from trajectory_assets.chat.messages import divergence_point, is_context_summary
from trajectory_assets.chat.reward_components import comparable, dominates, margins, objectives
from trajectory_assets.config import DpoConfig, SplitConfig
from trajectory_assets.exports.curation import balance, carries_flag
from trajectory_assets.ingest.decontamination import BenchmarkIndex
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.families.frames import (
    PLAN_COLUMNS,
    Candidates,
    ExportFrame,
    Payloads,
    Plan,
    SharedJson,
    TrajectoryTable,
    curated_trajectories,
    render_all,
    unit_chunks,
)
from trajectory_assets.exports.template import template_messages
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.exports.unrepresentable import Unrepresentable

PAYLOAD_COLUMNS = ["trajectory_id", "messages", "tools"]

PLAN = [*PLAN_COLUMNS, "reward_components"]
# objectives_*: each side's reward components ({name: score}, empty without them)
# bucket: the pair's (its task's first rollout's, in the canonical order); chosen_bucket and
# rejected_bucket: each side's own, another bucket's when the task's rollouts hold several prompts
PAIR_COLUMNS = ["task_key", "prompt_key", "task_type", "chosen_id", "rejected_id", "reward_chosen", "reward_rejected",
                "objectives_chosen", "objectives_rejected", "bucket", "chosen_bucket", "rejected_bucket"]
# what a pair reads: each side's trajectory, in its own bucket
READS = (("chosen_id", "chosen_bucket"), ("rejected_id", "rejected_bucket"))


def plan(table: TrajectoryTable, config: DpoConfig,
         budget: TokenBudget | None = None,
         benchmarks: BenchmarkIndex | None = None,
         candidates: Candidates | None = None) -> Plan:
    """Pairs (PAIR_COLUMNS + quality_difference), tasks in order of first appearance in the
    canonical order."""
    kept, excluded, rows_per_bucket = curated_trajectories(table, config, PLAN, budget, benchmarks, candidates)
    rewarded = kept["reward"].notna()
    skipped = carries_flag(kept["quality_flags"], "verification_skipped")
    for reason, dropped in (("verification_skipped", ~rewarded & skipped), ("no_reward", ~rewarded & ~skipped)):
        if dropped.any():
            excluded[reason] += int(dropped.sum())
    kept = kept.loc[rewarded]
    pairs = candidate_pairs(kept.assign(objectives=kept["reward_components"].map(objectives)), config, excluded)
    margin = pairs["reward_chosen"] - pairs["reward_rejected"]
    for reason, dropped in (("tied_rewards", margin <= 0), ("below_min_margin", (margin > 0) & (margin < config.min_margin))):
        if dropped.any():
            excluded[reason] += int(dropped.sum())
    # assigned before filtering: assigning a Series to an empty frame would reindex it to the Series
    pairs = pairs.assign(quality_difference=margin).loc[margin >= max(config.min_margin, np.nextafter(0.0, 1.0))]
    pairs = balance(pairs.assign(pair_id=pairs["chosen_id"] + pairs["rejected_id"]), config, "pair_id", excluded)
    return Plan(pairs.drop(columns="pair_id").reset_index(drop=True), excluded, rows_per_bucket, PAYLOAD_COLUMNS,
                READS)


def candidate_pairs(candidates: pd.DataFrame, config: DpoConfig, excluded: Counter) -> pd.DataFrame:
    """(chosen, rejected) candidates per task by the configured strategy, before the margin.

    Ranks every task at once (sorts and one merge, no per-group Python). ``trajectory_id``
    breaks reward ties, so the choice never depends on file order.
    """
    sizes = candidates.groupby("task_key", sort=False)["task_key"].transform("size")
    single = int(candidates.loc[sizes < 2, "task_key"].nunique())  # counted per task, not per row
    if single:
        excluded["single_rollout_task"] += single
    groups = candidates.loc[sizes >= 2]
    if config.pairing == "exactly_two":
        group_sizes = groups.groupby("task_key", sort=False)["task_key"].transform("size")
        skipped = int(groups.loc[group_sizes != 2, "task_key"].nunique())
        if skipped:
            excluded["task_without_exactly_two_rollouts"] += skipped
        groups = groups.loc[group_sizes == 2]
    order = {key: position for position, key in enumerate(groups["task_key"].unique())}
    task_bucket = groups.groupby("task_key", sort=False)["bucket"].first()  # the groups are in canonical order
    side = groups[["task_key", "prompt_key", "task_type", "trajectory_id", "reward", "objectives", "bucket"]]
    if config.pairing in ("all_pairs_with_margin", "dominance"):
        pairs = side.merge(side[["task_key", "trajectory_id", "reward", "objectives", "bucket"]], on="task_key",
                           suffixes=("_c", "_r"))
        # each unordered pair once: the higher reward chosen; equal rewards once, as a tie
        pairs = pairs.loc[(pairs["reward_c"] > pairs["reward_r"]) | (
            (pairs["reward_c"] == pairs["reward_r"]) & (pairs["trajectory_id_c"] < pairs["trajectory_id_r"]))]
        if config.pairing == "dominance":  # ties stay ties (counted below, as in every pairing)
            ordered = pairs["reward_c"] > pairs["reward_r"]
            pairs = pd.concat([_dominant_pairs(pairs.loc[ordered], excluded), pairs.loc[~ordered]])
        pairs = pairs.assign(order=pairs["task_key"].map(order), margin=pairs["reward_c"] - pairs["reward_r"],
                             bucket=pairs["task_key"].map(task_bucket))
        pairs = pairs.sort_values(["order", "margin", "trajectory_id_c", "trajectory_id_r"],
                                  ascending=[True, False, True, True], kind="mergesort")
        widest = pairs["margin"] >= config.min_margin
        # the cap counts only pairs that could be kept, widest first
        over_cap = widest & (pairs.loc[widest].groupby("task_key").cumcount() >= config.max_pairs_per_task
                             ).reindex(pairs.index, fill_value=False)
        if over_cap.any():
            excluded["pair_cap"] += int(over_cap.sum())
        pairs = pairs.loc[~over_cap]
        chosen = pairs.rename(columns={"trajectory_id_c": "chosen_id", "reward_c": "reward_chosen",
                                       "trajectory_id_r": "rejected_id", "reward_r": "reward_rejected",
                                       "objectives_c": "objectives_chosen", "objectives_r": "objectives_rejected",
                                       "bucket_c": "chosen_bucket", "bucket_r": "rejected_bucket"})
        return chosen[PAIR_COLUMNS].reset_index(drop=True)
    best = groups.sort_values(["reward", "trajectory_id"], ascending=[False, True], kind="mergesort")
    worst = groups.sort_values(["reward", "trajectory_id"], ascending=[True, True], kind="mergesort")
    best = best.drop_duplicates("task_key").set_index("task_key")
    worst = worst.drop_duplicates("task_key").set_index("task_key")
    keys = sorted(order, key=order.__getitem__)
    return pd.DataFrame({
        "task_key": keys,
        "prompt_key": best.loc[keys, "prompt_key"].to_numpy(),
        "task_type": best.loc[keys, "task_type"].to_numpy(),
        "chosen_id": best.loc[keys, "trajectory_id"].to_numpy(),
        "rejected_id": worst.loc[keys, "trajectory_id"].to_numpy(),
        "reward_chosen": best.loc[keys, "reward"].to_numpy(dtype=float),
        "reward_rejected": worst.loc[keys, "reward"].to_numpy(dtype=float),
        "objectives_chosen": best.loc[keys, "objectives"].to_numpy(),
        "objectives_rejected": worst.loc[keys, "objectives"].to_numpy(),
        "bucket": task_bucket.loc[keys].to_numpy(),
        "chosen_bucket": best.loc[keys, "bucket"].to_numpy(),
        "rejected_bucket": worst.loc[keys, "bucket"].to_numpy(),
    }, columns=PAIR_COLUMNS)


def _dominant_pairs(pairs: pd.DataFrame, excluded: Counter) -> pd.DataFrame:
    """The pairs (oriented by the scalar reward) whose chosen side Pareto-dominates the other
    on the reward components; the rest are counted: the two rollouts were scored on no or
    different objectives, or neither is at least as good on every one."""
    if pairs.empty:
        return pairs
    sides = list(zip(pairs["objectives_c"], pairs["objectives_r"]))
    scored_alike = [comparable(chosen, rejected) for chosen, rejected in sides]
    dominant = [dominates(chosen, rejected) for chosen, rejected in sides]
    for reason, dropped in (("no_comparable_objectives", scored_alike.count(False)),
                            ("not_dominant", sum(alike and not d for alike, d in zip(scored_alike, dominant)))):
        if dropped:
            excluded[reason] += dropped
    return pairs.loc[dominant]


class PairItem:
    """One planned pair with both payloads; the conversations are decoded and split once (its
    tools by its chunk's ``shared``)."""

    def __init__(self, pair, chosen_payload: tuple[str, str | None], rejected_payload: tuple[str, str | None],
                 pairing: str, shared: SharedJson) -> None:
        self.pair = pair
        self.tools_json = chosen_payload[1]
        self.pairing = pairing
        self.shared = shared
        self._payloads = (chosen_payload[0], rejected_payload[0])

    @property
    def prompt_key(self) -> str:
        return self.pair.prompt_key

    @cached_property
    def parts(self) -> tuple[list, list, list]:
        """(prompt, chosen, rejected): the shared prompt up to where the sides diverge."""
        chosen_messages, rejected_messages = (orjson.loads(payload) for payload in self._payloads)
        shared = divergence_point(chosen_messages, rejected_messages)
        if shared == 0:
            raise Unrepresentable("no_shared_prompt")
        if any(is_context_summary(message) for message in chosen_messages[:shared]):
            raise Unrepresentable("context_summary_in_prompt")  # the harness's words, not a user's
        return chosen_messages[:shared], chosen_messages[shared:], rejected_messages[shared:]

    @cached_property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.shared(self.tools_json)

    @cached_property
    def template_parts(self) -> tuple[list, list, list]:
        """(prompt, chosen, rejected) as chat templates render them; made once."""
        return tuple(template_messages(messages) for messages in self.parts)

    def record(self, prompt: list, chosen: list, rejected: list, tools: Any) -> dict[str, Any]:
        """The pair's row in the seed DPO field order, with the sides given in an export's form."""
        return {"prompt": prompt, "chosen": chosen, "rejected": rejected, **self.scores,
                **({"tools": tools} if tools is not None else {}), **self.lineage}

    @cached_property  # every export of the pair writes it
    def scores(self) -> dict[str, Any]:
        """What every preference row says of the pair's rewards (``columns.PAIR_SCORES``)."""
        pair = self.pair
        return {"quality_difference": pair.quality_difference, "reward_chosen": pair.reward_chosen,
                "reward_rejected": pair.reward_rejected,
                "component_margins": margins(pair.objectives_chosen, pair.objectives_rejected)}

    @cached_property
    def lineage(self) -> dict[str, Any]:
        """Which rollouts made the pair, and by which rule (``columns.PAIR_LINEAGE``)."""
        pair = self.pair
        return {"chosen_id": pair.chosen_id, "rejected_id": pair.rejected_id, "task_key": pair.task_key,
                "pairing": self.pairing}

    def cut(self, chosen: list[dict[str, Any]], rejected: list[dict[str, Any]]) -> "PairItem":
        """The same pair with shorter completions (each still starts with its first assistant turn)."""
        prompt = self.parts[0]
        return PairItem(self.pair, (orjson.dumps(prompt + chosen).decode(), self.tools_json),
                        (orjson.dumps(prompt + rejected).decode(), self.tools_json), self.pairing, self.shared)


def render(units: pd.DataFrame, payloads: Payloads, config: DpoConfig, split: SplitConfig,
           exports: dict[str, Export], budget: TokenBudget | None = None) -> Iterator[dict[str, ExportFrame]]:
    """A shard's pairs (``Plan.units_in``) in every export, a chunk at a time, in plan order."""
    fit = None if budget is None else partial(_fit_pair, budget)
    for chunk in unit_chunks(units):
        chosen, rejected = payloads.rows(chunk["chosen_id"]), payloads.rows(chunk["rejected_id"])
        shared = SharedJson()
        sides = zip(chunk.itertuples(index=False), zip(chosen["messages"], chosen["tools"]),
                    zip(rejected["messages"], rejected["tools"]))
        items = (PairItem(pair, chosen_side, rejected_side, config.pairing, shared)
                 for pair, chosen_side, rejected_side in sides)
        yield render_all(items, exports, split, fit)


def _fit_pair(budget: TokenBudget, item: PairItem) -> tuple[PairItem, int, bool]:
    """The longer side counts, as in TRL and NeMo RL; each side is cut on its own."""
    prompt, chosen, rejected = item.parts
    chosen, chosen_tokens, chosen_cut = budget.fit(prompt, chosen, item.tools)
    rejected, rejected_tokens, rejected_cut = budget.fit(prompt, rejected, item.tools)
    cut = chosen_cut or rejected_cut
    return (item.cut(chosen, rejected) if cut else item), max(chosen_tokens, rejected_tokens), cut
