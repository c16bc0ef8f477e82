"""SFT, DPO and GRPO rows from validated trajectories.

Builders stream: ``iter_sft`` / ``iter_dpo`` / ``iter_grpo`` read a :class:`TrajectoryTable`
chunk by chunk and yield :class:`ExportFrame` chunks: one row per export line, holding the
finished JSON line (``line``), its ``split`` and the flat columns that the export's Pandera
contract checks, plus counts of what was left out and why. Memory stays bounded by a chunk:
DPO and GRPO first plan on the small columns of every trajectory (ids, task keys, rewards),
then fetch the large payloads of only the rows they use. Nested message payloads stay JSON
strings and are spliced into the output with ``orjson.Fragment``, never re-encoded.
``build_sft`` / ``build_dpo`` / ``build_grpo`` are the same over one in-memory DataFrame.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import pandas as pd

from trajectory_assets.config import DpoConfig, GrpoConfig, SftConfig, SplitConfig
from trajectory_assets.formats.chat import divergence_point, role_shape
from trajectory_assets.formats.hermes import render_hermes
from trajectory_assets.formats.jsonutil import sha256_hex

SPLITS = ("train", "validation")

# the trajectory columns each builder reads (so no more is loaded than it needs)
SFT_COLUMNS = [
    "trajectory_id", "task_key", "task_type", "reward", "completed", "mask_sample",
    "unanswered_tool_calls", "quality_flags", "messages", "tools", "role_shape",
]
DPO_PLAN_COLUMNS = ["trajectory_id", "task_key", "reward", "completed", "mask_sample"]
DPO_PAYLOAD_COLUMNS = ["trajectory_id", "messages", "tools"]
GRPO_PLAN_COLUMNS = ["trajectory_id", "task_key", "reward", "mask_sample", "agent_name", "agent_ref", "source_format"]
GRPO_PAYLOAD_COLUMNS = ["trajectory_id", "request"]


class TrajectoryTable(Protocol):
    """The validated trajectories, readable in chunks (always in the same order)."""

    def scan(self, columns: list[str], ids: set[str] | None = None) -> Iterator[pd.DataFrame]:
        """Chunks of the given columns; only rows whose trajectory_id is in ``ids`` if given."""
        ...


@dataclass
class FrameTable:
    """A TrajectoryTable over one in-memory DataFrame (tests, small data)."""

    frame: pd.DataFrame

    def scan(self, columns: list[str], ids: set[str] | None = None) -> Iterator[pd.DataFrame]:
        chunk = self.frame[columns]
        yield chunk if ids is None else chunk.loc[chunk["trajectory_id"].isin(ids)]


# Flat columns of each export frame (what its contract checks) with their dtypes, so even
# an empty export has the columns and types its contract expects.
SFT_FRAME = {"trajectory_id": str, "task_key": str, "role_shape": str, "reward": float, "line": str}
DPO_FRAME = {
    "task_key": str, "chosen_id": str, "rejected_id": str, "prompt_shape": str, "chosen_shape": str,
    "rejected_shape": str, "reward_chosen": float, "reward_rejected": float, "quality_difference": float, "line": str,
}
GRPO_FRAME = {"task_key": str, "agent_name": str, "input_items": "int64", "line": str}
SFT_HERMES_FRAME = {"trajectory_id": str, "task_key": str, "from_shape": str, "line": str}
FROM_LETTER = {"system": "s", "human": "h", "gpt": "g", "tool": "t"}


@dataclass
class ExportFrame:
    rows: pd.DataFrame
    excluded: Counter = field(default_factory=Counter)

    def lines(self, split: str) -> list[str]:
        return self.rows.loc[self.rows["split"] == split, "line"].tolist()


def collect(frames: Iterable[ExportFrame]) -> ExportFrame:
    """All chunks of one export as one frame (for small data and tests)."""
    frames = list(frames)
    excluded: Counter = Counter()
    for frame in frames:
        excluded.update(frame.excluded)
    return ExportFrame(pd.concat([f.rows for f in frames], ignore_index=True), excluded)


def _concat(chunks: Iterable[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(list(chunks), ignore_index=True)  # a TrajectoryTable yields at least one chunk


def split_of(task_key: str, config: SplitConfig) -> str:
    """Deterministic, per task: every rollout of a prompt lands in the same split."""
    bucket = int(sha256_hex(f"{config.seed}:{task_key}".encode())[:8], 16) / 2**32
    return "validation" if bucket < config.validation_fraction else "train"


def _frame(records: list[dict[str, Any]], dtypes: dict[str, Any], split: SplitConfig) -> pd.DataFrame:
    rows = pd.DataFrame.from_records(records, columns=list(dtypes)).astype(dtypes)
    split_by_task = {key: split_of(key, split) for key in rows["task_key"].unique()}
    rows.insert(rows.columns.get_loc("task_key") + 1, "split", rows["task_key"].map(split_by_task).astype(str))
    return rows


def _count_dropped(excluded: Counter, reason: str, keep: pd.Series) -> None:
    dropped = int((~keep).sum())
    if dropped:
        excluded[reason] += dropped


def iter_sft(table: TrajectoryTable, config: SftConfig, split: SplitConfig) -> Iterator[ExportFrame]:
    for chunk in table.scan(SFT_COLUMNS):
        selected, excluded = select_for_sft(chunk, config)
        yield ExportFrame(_frame([_sft_record(row) for row in selected.itertuples(index=False)], SFT_FRAME, split),
                          excluded)


def iter_sft_hermes(table: TrajectoryTable, config: SftConfig, split: SplitConfig) -> Iterator[ExportFrame]:
    """The SFT rows again, rendered as Hermes ShareGPT (from either source format)."""
    for chunk in table.scan(SFT_COLUMNS):
        selected, excluded = select_for_sft(chunk, config)
        records = []
        for row in selected.itertuples(index=False):
            conversations = render_hermes(orjson.loads(row.messages), orjson.loads(row.tools) if row.tools else None)
            records.append(
                {
                    "trajectory_id": row.trajectory_id,
                    "task_key": row.task_key,
                    "from_shape": "".join(FROM_LETTER[turn["from"]] for turn in conversations),
                    "line": orjson.dumps({"conversations": conversations, "trajectory_id": row.trajectory_id,
                                          "task_key": row.task_key}).decode(),
                }
            )
        yield ExportFrame(_frame(records, SFT_HERMES_FRAME, split), excluded)


def select_for_sft(trajectories: pd.DataFrame, config: SftConfig) -> tuple[pd.DataFrame, Counter]:
    """The SFT filter (shared by every SFT flavor): rows kept, and why the others were not."""
    excluded: Counter = Counter()
    keep = pd.Series(True, index=trajectories.index)
    flags = "|".join(re.escape(flag) for flag in config.exclude_quality_flags)
    filters = [
        ("not_completed", config.require_completed, lambda t: t["completed"]),
        ("mask_sample", config.exclude_mask_sample, lambda t: ~t["mask_sample"]),
        ("unanswered_tool_calls", config.exclude_unanswered_tool_calls, lambda t: t["unanswered_tool_calls"] == 0),
        (
            "below_min_reward",
            config.min_reward is not None,
            # rows without a reward (Hermes trajectories) have nothing to filter on
            lambda t: t["reward"].isna() | (t["reward"] >= (config.min_reward or 0.0)),
        ),
        (
            "quality_flags",
            bool(flags),
            lambda t: ~t["quality_flags"].str.contains(rf"(?:^|,)(?:{flags})(?:,|$)", regex=True),
        ),
    ]
    for reason, enabled, predicate in filters:
        if enabled:
            passes = predicate(trajectories).astype(bool)
            _count_dropped(excluded, reason, passes | ~keep)  # count each row under its first reason
            keep &= passes
    return trajectories.loc[keep], excluded


def _sft_record(row) -> dict[str, Any]:
    record: dict[str, Any] = {"messages": orjson.Fragment(row.messages)}
    if row.tools is not None:
        record["tools"] = orjson.Fragment(row.tools)
    if row.reward is not None and not pd.isna(row.reward):
        record["reward"] = row.reward
    if row.task_type is not None:
        record["task_type"] = row.task_type
    record["trajectory_id"] = row.trajectory_id
    record["task_key"] = row.task_key
    return {
        "trajectory_id": row.trajectory_id,
        "task_key": row.task_key,
        "role_shape": row.role_shape,
        "reward": row.reward,
        "line": orjson.dumps(record).decode(),
    }


def iter_dpo(table: TrajectoryTable, config: DpoConfig, split: SplitConfig) -> Iterator[ExportFrame]:
    excluded: Counter = Counter()
    trajectories = _concat(table.scan(DPO_PLAN_COLUMNS))
    eligible = pd.Series(True, index=trajectories.index)
    if config.require_completed:
        eligible &= trajectories["completed"].astype(bool)
    if config.exclude_mask_sample:
        eligible &= ~trajectories["mask_sample"].astype(bool)
    eligible &= trajectories["reward"].notna()
    _count_dropped(excluded, "ineligible_trajectories", eligible)
    pairs = []
    for chosen, rejected in _candidate_pairs(trajectories.loc[eligible], config, excluded):
        margin = float(chosen.reward) - float(rejected.reward)
        if margin <= 0 or margin < config.min_margin:
            excluded["below_min_margin" if margin > 0 else "tied_rewards"] += 1
        else:
            pairs.append((chosen, rejected, margin))
    yield ExportFrame(_frame([], DPO_FRAME, split), excluded)  # the plan's exclusions

    # payloads arrive chunk by chunk; a pair is written as soon as both sides are loaded
    waiting: dict[str, list[int]] = {}
    for index, (chosen, rejected, _) in enumerate(pairs):
        waiting.setdefault(chosen.trajectory_id, []).append(index)
        waiting.setdefault(rejected.trajectory_id, []).append(index)
    loaded: dict[str, tuple[str, str | None]] = {}
    written: set[int] = set()
    for chunk in table.scan(DPO_PAYLOAD_COLUMNS, ids=set(waiting)):
        loaded.update(zip(chunk["trajectory_id"], zip(chunk["messages"], chunk["tools"])))
        ready = sorted(
            index
            for trajectory_id in chunk["trajectory_id"]
            for index in waiting[trajectory_id]
            if pairs[index][0].trajectory_id in loaded and pairs[index][1].trajectory_id in loaded
        )
        records, chunk_excluded = [], Counter()
        for index in dict.fromkeys(ready):  # a pair within one chunk is ready twice
            chosen, rejected, margin = pairs[index]
            record = _dpo_record(chosen, rejected, margin, loaded[chosen.trajectory_id],
                                 loaded[rejected.trajectory_id], chunk_excluded)
            written.add(index)
            if record:
                records.append(record)
        # keep a payload only while a pair still waits for it
        for index in set(ready):
            for trajectory_id in (pairs[index][0].trajectory_id, pairs[index][1].trajectory_id):
                if all(other in written for other in waiting[trajectory_id]):
                    loaded.pop(trajectory_id, None)
        yield ExportFrame(_frame(records, DPO_FRAME, split), chunk_excluded)


def _dpo_record(chosen, rejected, margin: float, chosen_payload, rejected_payload, excluded: Counter):
    chosen_messages = orjson.loads(chosen_payload[0])
    rejected_messages = orjson.loads(rejected_payload[0])
    shared = divergence_point(chosen_messages, rejected_messages)
    if shared == 0:
        excluded["no_shared_prompt"] += 1
        return None
    full_chosen_shape = role_shape(chosen_messages)
    full_rejected_shape = role_shape(rejected_messages)
    record: dict[str, Any] = {
        "prompt": chosen_messages[:shared],
        "chosen": chosen_messages[shared:],
        "rejected": rejected_messages[shared:],
        "quality_difference": margin,
        "reward_chosen": float(chosen.reward),
        "reward_rejected": float(rejected.reward),
    }
    if chosen_payload[1] is not None:
        record["tools"] = orjson.Fragment(chosen_payload[1])
    record.update(chosen_id=chosen.trajectory_id, rejected_id=rejected.trajectory_id, task_key=chosen.task_key)
    return {
        "task_key": chosen.task_key,
        "chosen_id": chosen.trajectory_id,
        "rejected_id": rejected.trajectory_id,
        "prompt_shape": full_chosen_shape[:shared],
        "chosen_shape": full_chosen_shape[shared:],
        "rejected_shape": full_rejected_shape[shared:],
        "reward_chosen": record["reward_chosen"],
        "reward_rejected": record["reward_rejected"],
        "quality_difference": margin,
        "line": orjson.dumps(record).decode(),
    }


def _candidate_pairs(candidates: pd.DataFrame, config: DpoConfig, excluded: Counter):
    """(chosen, rejected) rows per task, in order of the tasks' first appearance.

    Ranks every task at once (one sort, no per-group Python): the best rollout is the
    highest reward, the worst the lowest; trajectory_id breaks ties so the choice never
    depends on file order.
    """
    if candidates.empty:
        return []
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
    best = groups.sort_values(["reward", "trajectory_id"], ascending=[False, True], kind="mergesort")
    worst = groups.sort_values(["reward", "trajectory_id"], ascending=[True, True], kind="mergesort")
    best = best.drop_duplicates("task_key").set_index("task_key", drop=False)
    worst = worst.drop_duplicates("task_key").set_index("task_key", drop=False)
    keys = sorted(order, key=order.__getitem__)
    return list(zip(best.loc[keys].itertuples(index=False), worst.loc[keys].itertuples(index=False)))


def iter_grpo(table: TrajectoryTable, config: GrpoConfig, split: SplitConfig) -> Iterator[ExportFrame]:
    excluded: Counter = Counter()
    trajectories = _concat(table.scan(GRPO_PLAN_COLUMNS))
    if config.exclude_mask_sample:
        keep = ~trajectories["mask_sample"].astype(bool)
        _count_dropped(excluded, "mask_sample", keep)
        trajectories = trajectories.loc[keep]
    # one row per task, built from its first rollout's request (in table order); the
    # per-task aggregates are computed for all tasks at once, not group by group
    by_task = trajectories.groupby("task_key", sort=False)
    ids = by_task["trajectory_id"].agg(list)
    mean_reward = by_task["reward"].mean()
    tasks: dict[str, dict[str, Any]] = {}
    for first in trajectories.drop_duplicates("task_key").itertuples(index=False):
        fallback = config.hermes_agent_ref if first.source_format == "hermes" else config.default_agent_ref
        agent_ref = _agent_ref(first.agent_ref, first.agent_name, fallback)
        if agent_ref is None:
            excluded["no_agent_ref"] += 1
            continue
        reward = mean_reward[first.task_key]
        tasks[first.trajectory_id] = {
            "agent_ref": agent_ref,
            "task_key": first.task_key,
            "trajectory_ids": ids[first.task_key],
            "num_rollouts": len(ids[first.task_key]),
            "mean_reward": None if pd.isna(reward) else float(reward),
        }
    yield ExportFrame(_frame([], GRPO_FRAME, split), excluded)
    for chunk in table.scan(GRPO_PAYLOAD_COLUMNS, ids=set(tasks)):
        records, chunk_excluded = [], Counter()
        for trajectory_id, request_json in zip(chunk["trajectory_id"], chunk["request"]):
            task = tasks[trajectory_id]
            if request_json is None:
                chunk_excluded["no_request"] += 1
                continue
            request = orjson.loads(request_json)
            request_input = request.get("input")
            records.append(
                {
                    "task_key": task["task_key"],
                    "agent_name": task["agent_ref"]["name"],
                    "input_items": len(request_input) if isinstance(request_input, list) else int(bool(request_input)),
                    "line": orjson.dumps({"responses_create_params": request, **task}).decode(),
                }
            )
        yield ExportFrame(_frame(records, GRPO_FRAME, split), chunk_excluded)


def _agent_ref(agent_ref_json: str | None, agent_name: str | None, default_name: str | None) -> dict[str, Any] | None:
    """NeMo Gym routes RL rows by ``agent_ref``; ``ng_prepare_data`` writes the dict form."""
    if agent_ref_json is not None:
        agent_ref = orjson.loads(agent_ref_json)
        if isinstance(agent_ref, dict) and isinstance(agent_ref.get("name"), str) and agent_ref["name"]:
            return agent_ref
    name = agent_name or default_name
    return {"type": "responses_api_agents", "name": name} if name else None


def _over_frame(builder: Callable[..., Iterator[ExportFrame]]) -> Callable[..., ExportFrame]:
    def build(trajectories: pd.DataFrame, config: Any, split: SplitConfig) -> ExportFrame:
        return collect(builder(FrameTable(trajectories), config, split))

    build.__doc__ = f"{builder.__name__} over one in-memory DataFrame, collected into one ExportFrame."
    return build


build_sft = _over_frame(iter_sft)
build_sft_hermes = _over_frame(iter_sft_hermes)
build_dpo = _over_frame(iter_dpo)
build_grpo = _over_frame(iter_grpo)
