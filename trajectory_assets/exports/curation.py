"""Curation: which trajectories an export may use, and how many of its rows it keeps.

Three steps, each counting what it leaves out under a reason code:

1. ``filter_trajectories``: per-trajectory rules (completed, mask_sample, reward, turns,
   tokens, length, tool-error rate, quality flags), vectorized over flat columns;
2. ``deduplicate``: one trajectory per identical conversation (``content_hash``), and with
   ``dedup: near`` also none whose MinHash similarity to a kept one reaches the threshold;
3. ``balance``: a cap per ``task_type`` and a sample over the export's own rows (SFT rows,
   DPO pairs, GRPO tasks), ranked by a hash of the seed and the row's id, so the choice is
   the same on every machine and does not depend on file order.

Plain pandas; no Dagster. Only ``signature`` (for ``near_duplicates``; ``ingest/near_signatures.py``)
reads message payloads, and only when asked to and no signature stored beside the batch holds it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

import orjson
import pandas as pd

from trajectory_assets.config import Curation
from trajectory_assets.ingest.near_signatures import MINHASH_PERMUTATIONS
from trajectory_assets.jsonutil import sha256_hex

if TYPE_CHECKING:
    from datasketch import LeanMinHash

# the flat trajectory columns the filters read
FILTER_COLUMNS = [
    "trajectory_id", "task_key", "task_type", "reward", "completed", "mask_sample", "unanswered_tool_calls",
    "quality_flags", "num_assistant_turns", "total_tokens", "messages_chars", "tool_results", "tool_errors",
    "content_hash",
]
NO_TASK_TYPE = "(none)"
LSH_BANDING_THRESHOLD = 0.8


def filter_trajectories(trajectories: pd.DataFrame, config: Curation) -> tuple[pd.DataFrame, Counter]:
    """Rows that pass every enabled rule; each dropped row is counted under its first failed rule."""
    excluded: Counter = Counter()
    t = trajectories

    def flagged(*names: str) -> pd.Series:
        return carries_flag(t["quality_flags"], *names)

    # NaN compares False, so "passes when unknown" is spelled out for the optional measures
    error_rate = t["tool_errors"] / t["tool_results"].where(t["tool_results"] > 0)
    rules = [
        # a run that did not really complete, each way counted apart: Hermes' partial runs
        # (stopped on an error path), any run not completed, and a failure Hermes saved as
        # completed (an error message or its "(empty)" reply as the final turn)
        ("partial_run", config.require_completed, lambda: ~flagged("partial_run")),
        ("not_completed", config.require_completed, lambda: t["completed"]),
        ("failure_saved_as_completed", config.require_completed,
         lambda: ~flagged("error_in_final_turn", "empty_final_turn")),
        ("mask_sample", config.exclude_mask_sample, lambda: ~t["mask_sample"]),
        ("unanswered_tool_calls", config.exclude_unanswered_tool_calls, lambda: t["unanswered_tool_calls"] == 0),
        ("context_summary_as_assistant", config.exclude_summary_as_assistant,
         lambda: ~flagged("context_summary_as_assistant")),
        # a rollout whose verifier was skipped has no reward: it cannot pass a reward filter
        ("verification_skipped", config.min_reward is not None, lambda: ~flagged("verification_skipped")),
        # rows without a reward (Hermes trajectories) have nothing to filter on
        ("below_min_reward", config.min_reward is not None, lambda: t["reward"].isna() | (t["reward"] >= config.min_reward)),
        ("too_few_turns", config.min_turns is not None, lambda: t["num_assistant_turns"] >= config.min_turns),
        ("too_many_turns", config.max_turns is not None, lambda: t["num_assistant_turns"] <= config.max_turns),
        ("too_many_tokens", config.max_tokens is not None,
         lambda: t["total_tokens"].isna() | (t["total_tokens"] <= config.max_tokens)),
        ("too_long", config.max_chars is not None, lambda: t["messages_chars"] <= config.max_chars),
        ("tool_error_rate", config.max_tool_error_rate is not None,
         lambda: error_rate.isna() | (error_rate <= config.max_tool_error_rate)),
        ("quality_flags", bool(config.exclude_quality_flags), lambda: ~flagged(*config.exclude_quality_flags)),
    ]
    keep = pd.Series(True, index=t.index)
    for reason, enabled, passes in rules:
        if enabled:
            passed = passes().astype(bool)
            dropped = int((keep & ~passed).sum())  # counted under the first rule a row fails
            if dropped:
                excluded[reason] += dropped
            keep &= passed
    return t.loc[keep], excluded


def carries_flag(quality_flags: pd.Series, *names: str) -> pd.Series:
    """Which rows' quality flags (the table's comma-separated column) hold any of ``names``.

    >>> carries_flag(pd.Series(["a,partial_run", "", "partial_run_x"]), "partial_run").tolist()
    [True, False, False]
    """
    return quality_flags.str.contains(rf"(?:^|,)(?:{'|'.join(map(re.escape, names))})(?:,|$)", regex=True)


SUPERSEDED = "superseded"
# what the superseded-copy rule reads: small flat columns, and the provenance only where it
# says re-verified
SUPERSEDED_COLUMNS = ["trajectory_id", "source_id", "task_index", "rollout_index", "reward_provenance"]


def superseded_copies(trajectories: pd.DataFrame, keep: str) -> set[str]:
    """The trajectory ids that are another copy of a rollout kept elsewhere: one rollout read
    from its rollouts file and from a re-verification of it (``gym eval reverify`` keeps its
    task and rollout indices, not its ``_ng_rollout_id``), told apart by (the original file, task
    index, rollout index). ``keep``: "reverified" (the re-verified reward wins; of several
    re-verifications, the file whose id sorts last) or "original".

    >>> frame = pd.DataFrame({"trajectory_id": ["a", "b", "c"], "source_id": ["r/x.jsonl", "r/x_v.jsonl", "r/x.jsonl"],
    ...     "task_index": [0, 0, 1], "rollout_index": [0, 0, 0],
    ...     "reward_provenance": [None, '{"reverified":true,"reverifies":"r/x.jsonl"}', None]})
    >>> sorted(superseded_copies(frame, "reverified")), sorted(superseded_copies(frame, "original"))
    (['a'], ['b'])
    """
    provenance = trajectories["reward_provenance"]
    reverified = provenance.notna() & provenance.astype("string").str.contains('"reverified":true', regex=False)
    if not reverified.any():
        return set()
    indexed = trajectories.loc[trajectories["task_index"].notna() & trajectories["rollout_index"].notna()]
    original = indexed["source_id"].where(~reverified.loc[indexed.index], indexed["reward_provenance"].map(
        lambda text: orjson.loads(text).get("reverifies") if isinstance(text, str) else None))
    frame = pd.DataFrame({"trajectory_id": indexed["trajectory_id"], "original": original,
                          "task": indexed["task_index"], "rollout": indexed["rollout_index"],
                          "reverified": reverified.loc[indexed.index], "source_id": indexed["source_id"]})
    frame = frame.loc[frame["original"].notna()]
    mixed = frame.groupby(["original", "task", "rollout"])["reverified"].transform("nunique") > 1
    frame = frame.loc[mixed]
    if keep == "original":
        return set(frame.loc[frame["reverified"], "trajectory_id"])
    ranked = frame.sort_values(["reverified", "source_id", "trajectory_id"])
    winners = ranked.drop_duplicates(["original", "task", "rollout"], keep="last")["trajectory_id"]
    return set(frame["trajectory_id"]) - set(winners)


def drop_exact_duplicates(trajectories: pd.DataFrame, excluded: Counter) -> pd.DataFrame:
    """The first trajectory (in table order) of each identical conversation."""
    duplicated = trajectories["content_hash"].duplicated()
    if duplicated.any():
        excluded["duplicate_content"] += int(duplicated.sum())
    return trajectories.loc[~duplicated]


def near_duplicates(signatures: Iterable[tuple[str, LeanMinHash]], threshold: float) -> set[str]:
    """Ids of conversations whose estimated Jaccard similarity to an earlier kept one is
    >= threshold. ``signatures`` are (trajectory_id, :func:`signature`) in the plan's order
    (the canonical order), so the first of a group of near-copies is the one kept."""
    from datasketch import MinHashLSH  # only needed with dedup: near

    # LSH cannot band for thresholds near 1 with few permutations; it only proposes
    # candidates, so a lower banding threshold just means more of them are checked
    index = MinHashLSH(threshold=min(threshold, LSH_BANDING_THRESHOLD), num_perm=MINHASH_PERMUTATIONS)
    kept: dict[str, LeanMinHash] = {}
    dropped: set[str] = set()
    for trajectory_id, minhash in signatures:
        # LSH only proposes candidates; the estimated similarity decides
        if any(kept[other].jaccard(minhash) >= threshold for other in index.query(minhash)):
            dropped.add(trajectory_id)
            continue
        index.insert(trajectory_id, minhash)
        kept[trajectory_id] = minhash
    return dropped


def rank(ids: pd.Series, seed: str) -> pd.Series:
    """A uniform number in [0, 1) per id, fixed by the seed: the order caps and samples keep."""
    return ids.map(lambda value: int(sha256_hex(f"{seed}:{value}".encode())[:8], 16) / 2**32).astype(float)


def balance(units: pd.DataFrame, config: Curation, id_column: str, excluded: Counter) -> pd.DataFrame:
    """Cap rows per task_type, then sample; the rows kept stay in their original order."""
    if units.empty or (config.max_per_task_type is None and config.sample_fraction >= 1.0):
        return units
    ranks = rank(units[id_column], config.seed)
    keep = pd.Series(True, index=units.index)
    if config.max_per_task_type is not None:
        groups = units["task_type"].fillna(NO_TASK_TYPE)
        position = ranks.groupby(groups).rank(method="first")
        capped = position > config.max_per_task_type
        if capped.any():
            excluded["task_type_cap"] += int(capped.sum())
        keep &= ~capped
    if config.sample_fraction < 1.0:
        # a rank independent of the cap's, so sampling does not favour the capped survivors
        sampled_out = keep & (rank(units[id_column], f"{config.seed}:sample") >= config.sample_fraction)
        if sampled_out.any():
            excluded["sampled_out"] += int(sampled_out.sum())
        keep &= ~sampled_out
    return units.loc[keep]
