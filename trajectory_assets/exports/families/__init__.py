"""Export rows from validated trajectories: three families, each in several formats.

Every export works the same way, so memory stays bounded by a chunk:

1. **plan** on the small flat columns of every trajectory (ids, keys, rewards, counts):
   curation (``exports/curation.py``) picks the trajectories, then the family builds its
   units: SFT rows (one per trajectory), DPO pairs (two rollouts of a task), GRPO tasks
   (one per task), and balances them (cap per task_type, sample);
2. **fetch** the message payloads of only the planned trajectories, chunk by chunk;
3. **measure** each unit with the configured tokenizer's chat template, when there is one
   (``exports/token_budget.py``): over the family's ``max_tokens`` it is left out or cut at a turn
   boundary, for every format of the family alike;
4. **render** each unit in every requested :class:`Format` of the family: the seed formats
   (SFT, Hermes ShareGPT SFT, DPO, NeMo Gym GRPO input) and the trainer flavors (TRL,
   NeMo RL, LLaMA-Factory, verl). A unit a format cannot express raises ``Unrepresentable``
   and is counted, never written lossily.

A family plans and reads its payloads once for all its formats, and decodes each JSON
payload at most once (the ``*Item`` classes cache what the renderers ask for): reading the
payloads is most of an export's cost. ``iter_<family>_family`` yields, per chunk, one
:class:`ExportFrame` per format: the rows to write as records (dicts, serialized only by a
JSON-lines writer; a Parquet writer builds Arrow columns from them), and beside them one
flat row each: its ``split``, its record's top-level ``fields`` and the columns its Pandera
contract checks; plus counts of what was left out and why, each row's length in ``tokens``
(NaN when not measured) and the number of rows cut to the token budget. Payloads a
JSON-lines format copies unchanged stay JSON strings, spliced in as ``orjson.Fragment``.
Records are written after every format of the chunk is rendered, and formats share what a
unit caches, so a renderer builds new containers and never changes one it was given. The
split is by ``prompt_key`` (the content of the prompt), so one prompt never lands in both
splits, even when two source files hold it under different task indices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, Protocol

import numpy as np
import orjson
import pandas as pd

from schemas.validation import ARROW_STRING, cast_columns
from trajectory_assets.config import Curation, DpoConfig, GrpoConfig, SftConfig, SplitConfig
from trajectory_assets.exports.curation import (
    FILTER_COLUMNS,
    balance,
    drop_exact_duplicates,
    filter_trajectories,
    near_duplicates,
)
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.chat.messages import divergence_point, role_shape
from trajectory_assets.sources.hermes import render_hermes
from trajectory_assets.jsonutil import sha256_hex
from trajectory_assets.exports.llama_factory import to_llama_factory, turn_shape
from trajectory_assets.sources.nemo_gym import HERMES_MARKUP_FLAG, TOKEN_KEYS
from trajectory_assets.exports.nemo_rl import completions, require_final_assistant
from trajectory_assets.chat.template import template_messages, value_types
from trajectory_assets.chat.token_data import contiguous, token_calls
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.exports.verl import ground_truth_of, verl_row

SPLITS = ("train", "validation")

PLAN_COLUMNS = [*FILTER_COLUMNS, "prompt_key"]
SFT_PAYLOAD_COLUMNS = [
    "trajectory_id", "task_key", "prompt_key", "task_type", "reward", "quality_flags", "messages", "tools", "role_shape",
]
DPO_PAYLOAD_COLUMNS = ["trajectory_id", "messages", "tools"]
GRPO_PLAN_COLUMNS = [*PLAN_COLUMNS, "agent_name", "agent_ref", "source_format"]
GRPO_PAYLOAD_COLUMNS = ["trajectory_id", "request", "messages", "prompt_length", "tools", "task_inputs", "metadata"]


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


@dataclass
class ExportFrame:
    rows: pd.DataFrame  # the flat columns the contract checks, one row per record
    records: list[dict[str, Any]] = field(default_factory=list)  # what is written, in row order
    excluded: Counter = field(default_factory=Counter)
    truncated: int = 0  # rows written cut to the token budget
    # each row's length under the chat template (NaN when not measured), in row order
    tokens: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.tokens is None:
            self.tokens = np.full(len(self.rows), np.nan)

    def lines(self) -> list[str]:
        """The records as the JSON lines a JSON-lines file holds."""
        return [orjson.dumps(record).decode() for record in self.records]


def collect(frames: Iterable[ExportFrame]) -> ExportFrame:
    """All chunks of one export as one frame (for small data and tests)."""
    frames = list(frames)
    excluded: Counter = Counter()
    for frame in frames:
        excluded.update(frame.excluded)
    return ExportFrame(pd.concat([f.rows for f in frames], ignore_index=True),
                       [record for f in frames for record in f.records], excluded,
                       sum(f.truncated for f in frames), np.concatenate([f.tokens for f in frames]))


def _concat(chunks: Iterable[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(list(chunks), ignore_index=True)  # a TrajectoryTable yields at least one chunk


def split_of(prompt_key: str, config: SplitConfig) -> str:
    """Deterministic, per prompt: every rollout of a prompt lands in the same split."""
    bucket = int(sha256_hex(f"{config.seed}:{prompt_key}".encode())[:8], 16) / 2**32
    return "validation" if bucket < config.validation_fraction else "train"


def _frame(rendered: list[dict[str, Any]], dtypes: dict[str, Any],
           split: SplitConfig) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Renderers' output (flat columns + ``record``) as the flat rows and the records apart."""
    rows = cast_columns(pd.DataFrame.from_records(rendered, columns=list(dtypes)), dtypes)
    records = [columns["record"] for columns in rendered]
    split_by_prompt = {key: split_of(key, split) for key in rows["prompt_key"].unique()}
    split_column = rows["prompt_key"].map(split_by_prompt).astype(ARROW_STRING)
    rows.insert(rows.columns.get_loc("task_key") + 1, "split", split_column)
    rows["fields"] = pd.array([",".join(record) for record in records], dtype=ARROW_STRING)
    return rows, records


def _loads_or_none(value: str | None) -> Any:
    return None if value is None else orjson.loads(value)


# ------------------------------------------------------------------ curation (all families)


def curated_trajectories(table: TrajectoryTable, config: Curation, columns: list[str],
                         budget: TokenBudget | None = None) -> tuple[pd.DataFrame, Counter]:
    """The trajectories an export may use (flat columns only), and why the others were left out.

    With a tokenizer (``budget``) ``max_tokens`` is enforced on the rendered rows, not on the
    rollouts' recorded usage."""
    if budget is not None:
        config = config.model_copy(update={"max_tokens": None})
    kept, excluded = filter_trajectories(_concat(table.scan(columns)), config)
    if config.dedup != "none":
        kept = drop_exact_duplicates(kept, excluded)
    if config.dedup == "near" and len(kept) > 1:
        payloads = (
            pair
            for chunk in table.scan(["trajectory_id", "messages"], ids=set(kept["trajectory_id"]))
            for pair in zip(chunk["trajectory_id"], chunk["messages"])
        )
        near = near_duplicates(payloads, config.near_duplicate_threshold)
        if near:
            excluded["near_duplicate"] += len(near)
            kept = kept.loc[~kept["trajectory_id"].isin(near)]
    return kept, excluded


# ------------------------------------------------------------------ SFT family


def plan_sft(table: TrajectoryTable, config: SftConfig,
             budget: TokenBudget | None = None) -> tuple[pd.DataFrame, Counter]:
    kept, excluded = curated_trajectories(table, config, PLAN_COLUMNS, budget)
    return balance(kept, config, "trajectory_id", excluded), excluded


class Format(Protocol):
    """One way to write a family's units (an ``ExportSpec`` of ``registry.py`` is one): a
    renderer (unit -> flat columns + ``record``) and the dtypes of those flat columns, which are
    what the format's contract checks. A format that needs more of the trajectory than its
    family reads names those ``columns``, so they are only read when it is built."""

    render: Callable[..., dict[str, Any]]
    frame: dict[str, Any]
    columns: tuple[str, ...]


def _payload_columns(family_columns: list[str], formats: dict[str, Format]) -> list[str]:
    extra = [column for fmt in formats.values() for column in fmt.columns if column not in family_columns]
    return [*family_columns, *dict.fromkeys(extra)]


class SftItem:
    """One planned trajectory's payload; JSON columns are decoded once, on first use."""

    def __init__(self, row) -> None:
        self.row = row
        self.cut_short = False  # cut to the token budget (see cut)

    @cached_property
    def messages(self) -> list[dict[str, Any]]:
        return orjson.loads(self.row.messages)

    @cached_property
    def tools(self) -> list[dict[str, Any]] | None:
        return _loads_or_none(self.row.tools)

    @cached_property
    def template_row(self) -> dict[str, Any]:
        """The row in the form chat templates render (TRL and NeMo RL share it), made once."""
        row = self.row
        messages = template_messages(self.messages)
        record = {"messages": messages, "tools": self.tools, "reward": None if pd.isna(row.reward) else row.reward,
                  "task_type": row.task_type, "trajectory_id": row.trajectory_id, "task_key": row.task_key}
        return {
            **_lineage(row),
            "role_shape": row.role_shape,
            "reward": row.reward,
            "value_types": value_types(messages),
            "tools_type": type(self.tools).__name__,
            "record": record,
        }

    def cut(self, messages: list[dict[str, Any]]) -> "SftItem":
        """The same trajectory with only its first ``len(messages)`` messages (a format that
        writes more of the trajectory than its messages must check ``cut_short``)."""
        item = SftItem(self.row._replace(messages=orjson.dumps(messages).decode(), role_shape=role_shape(messages)))
        item.messages = messages
        item.cut_short = True
        return item


# unit -> (the unit, cut if it had to be, its tokens, whether it was cut)
Fit = Callable[[Any], tuple[Any, int, bool]]


def _render_all(units: Iterable, formats: dict[str, Format], split: SplitConfig,
                fit: Fit | None = None) -> dict[str, ExportFrame]:
    """Every unit in every format; a unit one format cannot express is counted for that format
    only, a unit over the token budget (``fit``) for every format of the family."""
    rendered: dict[str, list[dict[str, Any]]] = {name: [] for name in formats}
    lengths: dict[str, list[float]] = {name: [] for name in formats}
    unrepresentable: dict[str, Counter] = {name: Counter() for name in formats}
    truncated: Counter = Counter()
    for unit in units:
        tokens, cut = np.nan, False
        if fit is not None:
            try:
                unit, tokens, cut = fit(unit)
            except Unrepresentable as error:
                for counts in unrepresentable.values():
                    counts[error.reason] += 1
                continue
        for name, fmt in formats.items():
            try:
                rendered[name].append(fmt.render(unit))
            except Unrepresentable as error:
                unrepresentable[name][error.reason] += 1
                continue
            lengths[name].append(tokens)
            truncated[name] += cut
    return {name: ExportFrame(*_frame(rendered[name], fmt.frame, split), unrepresentable[name], truncated[name],
                              np.array(lengths[name], dtype=float))
            for name, fmt in formats.items()}


def _exclusions(excluded: Counter, formats: dict[str, Format], split: SplitConfig) -> dict[str, ExportFrame]:
    """The plan's exclusions, the same for every format of the family."""
    return {name: ExportFrame(*_frame([], fmt.frame, split), Counter(excluded)) for name, fmt in formats.items()}


def iter_sft_family(table: TrajectoryTable, config: SftConfig, split: SplitConfig, formats: dict[str, Format],
                    budget: TokenBudget | None = None) -> Iterator[dict[str, ExportFrame]]:
    plan, excluded = plan_sft(table, config, budget)
    yield _exclusions(excluded, formats, split)
    planned = set(plan["trajectory_id"])
    del plan  # its flat columns (a Python object per value) are not needed while the payloads are read
    if not planned:
        return
    fit = None if budget is None else partial(_fit_sft, budget)
    for chunk in table.scan(_payload_columns(SFT_PAYLOAD_COLUMNS, formats), ids=planned):
        yield _render_all((SftItem(row) for row in chunk.itertuples(index=False)), formats, split, fit)


def _fit_sft(budget: TokenBudget, item: SftItem) -> tuple[SftItem, int, bool]:
    messages, tokens, cut = budget.fit([], item.messages, item.tools)
    return (item.cut(messages) if cut else item), tokens, cut


def _lineage(row) -> dict[str, str]:
    return {"trajectory_id": row.trajectory_id, "task_key": row.task_key, "prompt_key": row.prompt_key}


def sft_record(item: SftItem) -> dict[str, Any]:
    row = item.row
    record: dict[str, Any] = {"messages": orjson.Fragment(row.messages)}  # copied as stored, not re-encoded
    if row.tools is not None:
        record["tools"] = orjson.Fragment(row.tools)
    if not pd.isna(row.reward):
        record["reward"] = row.reward
    if row.task_type is not None:
        record["task_type"] = row.task_type
    record["trajectory_id"] = row.trajectory_id
    record["task_key"] = row.task_key
    return {**_lineage(row), "role_shape": row.role_shape, "reward": row.reward, "record": record}


FROM_LETTER = {"system": "s", "human": "h", "gpt": "g", "tool": "t"}


def sft_hermes_record(item: SftItem) -> dict[str, Any]:
    row = item.row
    if HERMES_MARKUP_FLAG in row.quality_flags.split(","):
        raise Unrepresentable(HERMES_MARKUP_FLAG)
    conversations = render_hermes(item.messages, item.tools)
    record = {"conversations": conversations, "trajectory_id": row.trajectory_id, "task_key": row.task_key}
    return {
        **_lineage(row),
        "from_shape": "".join(FROM_LETTER[turn["from"]] for turn in conversations),
        "record": record,
    }


def trl_sft_record(item: SftItem) -> dict[str, Any]:
    return item.template_row


def nemo_rl_sft_record(item: SftItem) -> dict[str, Any]:
    """NeMo RL's openai_format: the TRL row, which must end with the assistant's turn."""
    require_final_assistant(item.messages, "ends_without_assistant_turn")
    return item.template_row


def llama_factory_record(item: SftItem) -> dict[str, Any]:
    row = item.row
    record = to_llama_factory(item.messages, item.tools)
    record.update(trajectory_id=row.trajectory_id, task_key=row.task_key)
    return {**_lineage(row), "turn_shape": turn_shape(record["conversations"]), "record": record}


def tokens_record(item: SftItem) -> dict[str, Any]:
    row = item.row
    if row.token_data is None or len(row.token_data) == 0:
        raise Unrepresentable("no_token_data")  # served without token capture
    calls = token_calls(row.token_data)
    if item.cut_short:  # cut to the token budget at a turn boundary: the calls of the messages kept
        calls = [call for call in calls if call["message_index"] < len(item.messages)]
        if not calls:
            raise Unrepresentable("no_token_data")
    reward = None if pd.isna(row.reward) else row.reward
    record = {"trajectory_id": row.trajectory_id, "task_key": row.task_key, "reward": reward, "model": row.model,
              "calls": calls, "contiguous": contiguous(calls)}
    return {
        **_lineage(row),
        "reward": row.reward,
        "calls": len(calls),
        "generated_tokens": sum(len(call["generation_token_ids"]) for call in calls),
        "aligned": all(len(c["generation_log_probs"]) == len(c["generation_token_ids"]) for c in calls),
        "contiguous": record["contiguous"],
        "record": record,
    }


# ------------------------------------------------------------------ DPO family

PAIR_COLUMNS = ["task_key", "prompt_key", "task_type", "chosen_id", "rejected_id", "reward_chosen", "reward_rejected"]


def plan_dpo(table: TrajectoryTable, config: DpoConfig,
             budget: TokenBudget | None = None) -> tuple[pd.DataFrame, Counter]:
    """Pairs (PAIR_COLUMNS + quality_difference), tasks in order of first appearance."""
    kept, excluded = curated_trajectories(table, config, PLAN_COLUMNS, budget)
    rewarded = kept["reward"].notna()
    if (~rewarded).any():
        excluded["no_reward"] += int((~rewarded).sum())
    pairs = candidate_pairs(kept.loc[rewarded], config, excluded)
    margin = pairs["reward_chosen"] - pairs["reward_rejected"]
    for reason, dropped in (("tied_rewards", margin <= 0), ("below_min_margin", (margin > 0) & (margin < config.min_margin))):
        if dropped.any():
            excluded[reason] += int(dropped.sum())
    # assigned before filtering: assigning a Series to an empty frame would reindex it to the Series
    pairs = pairs.assign(quality_difference=margin).loc[margin >= max(config.min_margin, np.nextafter(0.0, 1.0))]
    pairs = balance(pairs.assign(pair_id=pairs["chosen_id"] + pairs["rejected_id"]), config, "pair_id", excluded)
    return pairs.drop(columns="pair_id").reset_index(drop=True), excluded


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
    side = groups[["task_key", "prompt_key", "task_type", "trajectory_id", "reward"]]
    if config.pairing == "all_pairs_with_margin":
        pairs = side.merge(side[["task_key", "trajectory_id", "reward"]], on="task_key", suffixes=("_c", "_r"))
        # each unordered pair once: the higher reward chosen; equal rewards once, as a tie
        pairs = pairs.loc[(pairs["reward_c"] > pairs["reward_r"]) | (
            (pairs["reward_c"] == pairs["reward_r"]) & (pairs["trajectory_id_c"] < pairs["trajectory_id_r"]))]
        pairs = pairs.assign(order=pairs["task_key"].map(order), margin=pairs["reward_c"] - pairs["reward_r"])
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
                                       "trajectory_id_r": "rejected_id", "reward_r": "reward_rejected"})
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
    }, columns=PAIR_COLUMNS)


class PairItem:
    """One planned pair with both payloads; the conversations are decoded and split once."""

    def __init__(self, pair, chosen_payload: tuple[str, str | None], rejected_payload: tuple[str, str | None],
                 pairing: str) -> None:
        self.pair = pair
        self.tools_json = chosen_payload[1]
        self.pairing = pairing
        self._payloads = (chosen_payload[0], rejected_payload[0])

    @cached_property
    def parts(self) -> tuple[list, list, list, dict[str, Any]]:
        """(prompt, chosen, rejected, the contract's flat pair columns)."""
        chosen_messages, rejected_messages = (orjson.loads(payload) for payload in self._payloads)
        shared, chosen_shape, rejected_shape = _split_pair(chosen_messages, rejected_messages)
        columns = _pair_columns(self.pair, shared, chosen_shape, rejected_shape)
        return chosen_messages[:shared], chosen_messages[shared:], rejected_messages[shared:], columns

    @cached_property
    def tools(self) -> list[dict[str, Any]] | None:
        return _loads_or_none(self.tools_json)

    @cached_property
    def template_parts(self) -> tuple[list, list, list, str]:
        """(prompt, chosen, rejected) as chat templates render them, and their value_types; made once."""
        prompt, chosen, rejected, _ = self.parts
        prompt, chosen, rejected = template_messages(prompt), template_messages(chosen), template_messages(rejected)
        return prompt, chosen, rejected, value_types(prompt + chosen + rejected)

    def cut(self, chosen: list[dict[str, Any]], rejected: list[dict[str, Any]]) -> "PairItem":
        """The same pair with shorter completions (each still starts with its first assistant turn)."""
        prompt = self.parts[0]
        return PairItem(self.pair, (orjson.dumps(prompt + chosen).decode(), self.tools_json),
                        (orjson.dumps(prompt + rejected).decode(), self.tools_json), self.pairing)


def iter_dpo_family(table: TrajectoryTable, config: DpoConfig, split: SplitConfig, formats: dict[str, Format],
                    budget: TokenBudget | None = None) -> Iterator[dict[str, ExportFrame]]:
    pairs, excluded = plan_dpo(table, config, budget)
    yield _exclusions(excluded, formats, split)
    if pairs.empty:
        return
    pair_rows = list(pairs.itertuples(index=False))
    # payloads arrive chunk by chunk; a pair is rendered as soon as both sides are loaded,
    # and a payload is dropped once no pair waits for it
    waiting: dict[str, list[int]] = {}
    for index, pair in enumerate(pair_rows):
        waiting.setdefault(pair.chosen_id, []).append(index)
        waiting.setdefault(pair.rejected_id, []).append(index)
    loaded: dict[str, tuple[str, str | None]] = {}
    written: set[int] = set()
    for chunk in table.scan(DPO_PAYLOAD_COLUMNS, ids=set(waiting)):
        loaded.update(zip(chunk["trajectory_id"], zip(chunk["messages"], chunk["tools"])))
        ready = sorted({
            index
            for trajectory_id in chunk["trajectory_id"]
            for index in waiting[trajectory_id]
            if pair_rows[index].chosen_id in loaded and pair_rows[index].rejected_id in loaded
        } - written)
        items = [PairItem(pair_rows[i], loaded[pair_rows[i].chosen_id], loaded[pair_rows[i].rejected_id],
                          config.pairing) for i in ready]
        written.update(ready)
        for index in ready:
            for trajectory_id in (pair_rows[index].chosen_id, pair_rows[index].rejected_id):
                if all(other in written for other in waiting[trajectory_id]):
                    loaded.pop(trajectory_id, None)
        yield _render_all(items, formats, split, None if budget is None else partial(_fit_pair, budget))


def _fit_pair(budget: TokenBudget, item: PairItem) -> tuple[PairItem, int, bool]:
    """The longer side counts, as in TRL and NeMo RL; each side is cut on its own."""
    prompt, chosen, rejected, _ = item.parts
    chosen, chosen_tokens, chosen_cut = budget.fit(prompt, chosen, item.tools)
    rejected, rejected_tokens, rejected_cut = budget.fit(prompt, rejected, item.tools)
    cut = chosen_cut or rejected_cut
    return (item.cut(chosen, rejected) if cut else item), max(chosen_tokens, rejected_tokens), cut


def _split_pair(chosen_messages: list, rejected_messages: list) -> tuple[int, str, str]:
    """Where the two conversations diverge (both continue with an assistant turn there)."""
    shared = divergence_point(chosen_messages, rejected_messages)
    if shared == 0:
        raise Unrepresentable("no_shared_prompt")
    return shared, role_shape(chosen_messages), role_shape(rejected_messages)


def _pair_columns(pair, shared: int, chosen_shape: str, rejected_shape: str) -> dict[str, Any]:
    return {
        "task_key": pair.task_key, "prompt_key": pair.prompt_key, "chosen_id": pair.chosen_id,
        "rejected_id": pair.rejected_id, "prompt_shape": chosen_shape[:shared], "chosen_shape": chosen_shape[shared:],
        "rejected_shape": rejected_shape[shared:], "reward_chosen": pair.reward_chosen,
        "reward_rejected": pair.reward_rejected, "quality_difference": pair.quality_difference,
    }


def _pair_record(item: PairItem, prompt, chosen, rejected, tools) -> dict[str, Any]:
    pair = item.pair
    return {
        "prompt": prompt, "chosen": chosen, "rejected": rejected,
        "quality_difference": pair.quality_difference,
        "reward_chosen": pair.reward_chosen, "reward_rejected": pair.reward_rejected,
        **({"tools": tools} if tools is not None else {}),
        "chosen_id": pair.chosen_id, "rejected_id": pair.rejected_id, "task_key": pair.task_key,
        "pairing": item.pairing,
    }


def dpo_record(item: PairItem) -> dict[str, Any]:
    prompt, chosen, rejected, columns = item.parts
    tools = None if item.tools_json is None else orjson.Fragment(item.tools_json)
    return {**columns, "record": _pair_record(item, prompt, chosen, rejected, tools)}


def trl_dpo_record(item: PairItem) -> dict[str, Any]:
    prompt, chosen, rejected, _ = item.template_parts
    # always present (null without tools), so the column has one type
    record = {**_pair_record(item, prompt, chosen, rejected, item.tools), "tools": item.tools}
    return _template_pair_columns(item, record)


def nemo_rl_dpo_record(item: PairItem) -> dict[str, Any]:
    """NeMo RL's preference format: ``context`` and two ranked ``completions``, chosen first."""
    prompt, chosen, rejected, _ = item.template_parts
    pair = item.pair
    record = {
        "context": prompt, "completions": completions(chosen, rejected), "tools": item.tools,
        "quality_difference": pair.quality_difference, "reward_chosen": pair.reward_chosen,
        "reward_rejected": pair.reward_rejected, "chosen_id": pair.chosen_id, "rejected_id": pair.rejected_id,
        "task_key": pair.task_key, "pairing": item.pairing,
    }
    return _template_pair_columns(item, record)


def _template_pair_columns(item: PairItem, record: dict) -> dict[str, Any]:
    return {
        **item.parts[3],
        "value_types": item.template_parts[3],
        "tools_type": type(item.tools).__name__,
        "record": record,
    }


# ------------------------------------------------------------------ GRPO family


def plan_grpo(table: TrajectoryTable, config: GrpoConfig,
              budget: TokenBudget | None = None) -> tuple[pd.DataFrame, Counter]:
    """One row per task: its first rollout (in table order) and aggregates over all of them."""
    kept, excluded = curated_trajectories(table, config, GRPO_PLAN_COLUMNS, budget)
    passed = (kept["reward"] >= config.pass_threshold).where(kept["reward"].notna())
    by_task = kept.assign(passed=passed.astype(float)).groupby("task_key", sort=False)
    aggregates = by_task.agg(
        trajectory_ids=("trajectory_id", list),
        num_rollouts=("trajectory_id", "size"),
        rewarded=("reward", "count"),
        mean_reward=("reward", "mean"),
        reward_std=("reward", lambda r: r.std(ddof=0)),
        pass_rate=("passed", "mean"),
    )
    tasks = kept.drop_duplicates("task_key").set_index("task_key", drop=False).join(aggregates)
    # no learning signal: two or more rewarded rollouts, all with the same reward
    tasks["zero_variance"] = (tasks["rewarded"] >= 2) & (tasks["reward_std"] == 0)
    agent_refs = []
    for first in tasks.itertuples(index=False):
        fallback = config.hermes_agent_ref if first.source_format == "hermes" else config.default_agent_ref
        agent_refs.append(_agent_ref(first.agent_ref, first.agent_name, fallback))
    tasks["agent_ref"] = agent_refs
    no_agent = tasks["agent_ref"].isna()
    if no_agent.any():
        excluded["no_agent_ref"] += int(no_agent.sum())
    tasks = tasks.loc[~no_agent]
    if config.zero_variance_groups == "drop" and tasks["zero_variance"].any():
        excluded["zero_variance_group"] += int(tasks["zero_variance"].sum())
        tasks = tasks.loc[~tasks["zero_variance"]]
    return balance(tasks.reset_index(drop=True), config, "task_key", excluded), excluded


def _agent_ref(agent_ref_json: str | None, agent_name: str | None, default_name: str | None) -> dict[str, Any] | None:
    """NeMo Gym routes RL rows by ``agent_ref``; ``ng_prepare_data`` writes
    ``{"type": "responses_api_agents", "name"}``, so every row gets that form."""
    if agent_ref_json is not None:
        agent_ref = orjson.loads(agent_ref_json)
        if isinstance(agent_ref, dict) and isinstance(agent_ref.get("name"), str) and agent_ref["name"]:
            return {"type": "responses_api_agents", **agent_ref}
    name = agent_name or default_name
    return {"type": "responses_api_agents", "name": name} if name else None


def _task_summary(task) -> dict[str, Any]:
    return {
        "task_key": task.task_key,
        "trajectory_ids": task.trajectory_ids,
        "num_rollouts": int(task.num_rollouts),
        "mean_reward": None if pd.isna(task.mean_reward) else float(task.mean_reward),
        "reward_std": None if pd.isna(task.reward_std) else float(task.reward_std),
        "pass_rate": None if pd.isna(task.pass_rate) else float(task.pass_rate),
        "zero_variance": bool(task.zero_variance),
    }


class TaskItem:
    """One planned task with its first rollout's payload; JSON columns decoded once."""

    def __init__(self, task, payload, index: int, split: SplitConfig) -> None:
        self.task = task
        self.payload = payload
        self.index = index  # the task's position in the export (verl's extra_info.index)
        self.split = split_of(task.prompt_key, split)

    @cached_property
    def prompt(self) -> list[dict[str, Any]]:
        return orjson.loads(self.payload.messages)[: self.payload.prompt_length]

    @cached_property
    def task_inputs(self) -> dict[str, Any]:
        """What the verifier was given (NeMo Gym's materialized inputs), when they were beside the file."""
        return orjson.loads(self.payload.task_inputs) if self.payload.task_inputs is not None else {}

    @cached_property
    def ground_truth(self) -> str | None:
        # the materialized inputs say what the verifier was given; a rollout's own keys may
        # also hold what it produced, so they come second
        return ground_truth_of(self.task_inputs) or ground_truth_of(orjson.loads(self.payload.metadata))

    @cached_property
    def tools(self) -> list[dict[str, Any]] | None:
        return _loads_or_none(self.payload.tools)


def iter_grpo_family(table: TrajectoryTable, config: GrpoConfig, split: SplitConfig, formats: dict[str, Format],
                     budget: TokenBudget | None = None) -> Iterator[dict[str, ExportFrame]]:
    tasks, excluded = plan_grpo(table, config, budget)
    yield _exclusions(excluded, formats, split)
    if tasks.empty:
        return
    by_first = {task.trajectory_id: task for task in tasks.itertuples(index=False)}
    position = {trajectory_id: index for index, trajectory_id in enumerate(by_first)}
    for chunk in table.scan(GRPO_PAYLOAD_COLUMNS, ids=set(by_first)):
        items = (TaskItem(by_first[payload.trajectory_id], payload, position[payload.trajectory_id], split)
                 for payload in chunk.itertuples(index=False))
        yield _render_all(items, formats, split, None if budget is None else partial(_fit_task, budget))


def _fit_task(budget: TokenBudget, item: TaskItem) -> tuple[TaskItem, int, bool]:
    return item, budget.prompt(item.prompt, item.tools), False


def without_token_data(request: dict[str, Any]) -> dict[str, Any]:
    """The request with no token ids or log probs on its input items: a request whose prompt
    came from the output (a conversation recorded there) holds items a model server returned
    with them, and an RL input row replays text, not a past policy's tokens (the
    on_policy_tokens export keeps them).

    >>> without_token_data({"input": [{"role": "user", "content": "q", "prompt_token_ids": [1]}]})
    {'input': [{'role': 'user', 'content': 'q'}]}
    """
    items = request.get("input")
    if not isinstance(items, list) or not any(isinstance(i, dict) and i.keys() & set(TOKEN_KEYS) for i in items):
        return request
    return {**request, "input": [{k: v for k, v in i.items() if k not in TOKEN_KEYS} if isinstance(i, dict) else i
                                 for i in items]}


def grpo_record(item: TaskItem) -> dict[str, Any]:
    task, payload = item.task, item.payload
    if payload.request is None:
        raise Unrepresentable("no_request")
    request = without_token_data(orjson.loads(payload.request))
    request_input = request.get("input")
    # the row ng_prepare_data would write: the request, the verifier's inputs, the agent
    record = {"responses_create_params": request, **item.task_inputs, "agent_ref": task.agent_ref,
              **_task_summary(task)}
    return {
        "task_key": task.task_key,
        "prompt_key": task.prompt_key,
        "agent_name": task.agent_ref["name"],
        "input_items": len(request_input) if isinstance(request_input, list) else int(bool(request_input)),
        # what the verifier was given, beside the request: its keys vary by environment, so
        # the dataset card declares the ones the export holds
        "input_keys": ",".join(item.task_inputs),
        "mean_reward": task.mean_reward,
        "record": record,
    }


def trl_grpo_record(item: TaskItem) -> dict[str, Any]:
    task = item.task
    prompt = template_messages(item.prompt)
    # every column besides prompt reaches TRL's reward functions as a keyword argument
    record = {"prompt": prompt, "tools": item.tools, "ground_truth": item.ground_truth,
              "agent_name": task.agent_ref["name"], "task_type": task.task_type, **_task_summary(task)}
    return {
        "task_key": task.task_key,
        "prompt_key": task.prompt_key,
        "prompt_shape": role_shape(prompt),
        "mean_reward": task.mean_reward,
        "value_types": value_types(prompt),
        "tools_type": type(item.tools).__name__,
        "record": record,
    }


def verl_record(item: TaskItem) -> dict[str, Any]:
    task, prompt = item.task, item.prompt
    row = verl_row(
        prompt=prompt,
        data_source=task.agent_ref["name"],  # the environment: what picks the reward function
        ability=task.task_type or "agent",
        ground_truth=item.ground_truth,
        split=item.split,
        index=item.index,
        task_key=task.task_key,
        agent_ref=task.agent_ref,
        tools=item.tools,
        num_rollouts=int(task.num_rollouts),
        mean_reward=None if pd.isna(task.mean_reward) else float(task.mean_reward),
        trajectory_ids=task.trajectory_ids,
    )
    return {
        "task_key": task.task_key,
        "prompt_key": task.prompt_key,
        "data_source": row["data_source"],
        "ability": row["ability"],
        "prompt_shape": role_shape(prompt),
        "index": item.index,
        "mean_reward": task.mean_reward,
        "value_types": value_types(row["prompt"]),
        "record": row,
    }


# family (also its config section) -> its builder
FAMILY_BUILDERS: dict[str, Callable[..., Iterator[dict[str, ExportFrame]]]] = {
    "sft": iter_sft_family,
    "dpo": iter_dpo_family,
    "grpo": iter_grpo_family,
}
