"""What every export family shares: the rows a chunk of units becomes, the split, the
curation of the trajectories, and the loop that renders every unit in every export.

A family (``sft.py``, ``dpo.py``, ``grpo.py``) works the same way, so memory stays bounded
by a chunk:

1. **plan** on the small flat columns of every trajectory (ids, keys, rewards, counts):
   curation (``exports/curation.py``) picks the trajectories, then the family builds its
   units: SFT rows (one per trajectory), DPO pairs (two rollouts of a task), GRPO tasks
   (one per task), and balances them (cap per task_type, sample);
2. **fetch** the message payloads of only the planned trajectories, chunk by chunk;
3. **measure** each unit with the configured tokenizer's chat template, when there is one
   (``exports/token_budget.py``): over the family's ``max_tokens`` it is left out or cut at a
   turn boundary, for every export of the family alike;
4. **render** each unit in every requested export of the family (one module each under
   ``exports/``). A unit an export cannot express raises ``Unrepresentable`` and is counted,
   never written lossily.

A family plans and reads its payloads once for all its exports, and decodes each JSON
payload at most once (the units cache what the renderers ask for): reading the payloads is
most of an export's cost. A family's iterator yields, per chunk, one :class:`ExportFrame`
per export: the rows to write (dicts, serialized only by a JSON-lines writer; a Parquet
writer builds Arrow columns from them), and beside them the frame its Pandera contract
checks, read from those rows (``schemas/export_row.py``); plus counts of what was left out
and why, each row's length in ``tokens`` (NaN when not measured) and the number of rows cut
to the token budget. Rows are written after every export of the chunk is rendered, and
exports share what a unit caches, so a renderer builds new containers and never changes
one it was given. The split is by
``prompt_key`` (the content of the prompt), so one prompt never lands in both splits, even
when two source files hold it under different task indices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import orjson
import pandas as pd

from schemas.export_row import checked_frame
from trajectory_assets.config import Curation, SplitConfig
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.curation import (
    FILTER_COLUMNS,
    SUPERSEDED,
    SUPERSEDED_COLUMNS,
    balance,
    drop_exact_duplicates,
    filter_trajectories,
    near_duplicates,
    superseded_copies,
)
from trajectory_assets.ingest.decontamination import BenchmarkIndex, contaminated_trajectories, reason
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.jsonutil import sha256_hex


SPLITS = ("train", "validation")


PLAN_COLUMNS = [*FILTER_COLUMNS, "prompt_key"]


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
    rows: pd.DataFrame  # the columns the contract checks, one row per record
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


def _frame(rendered: list[tuple[str, dict[str, Any]]], export: Export,
           split: SplitConfig) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Rendered rows ((prompt_key, record) each) as the frame their contract checks and the
    records to write."""
    records = [record for _, record in rendered]
    prompt_keys = [prompt_key for prompt_key, _ in rendered]
    split_by_prompt = {key: split_of(key, split) for key in set(prompt_keys)}
    splits = [split_by_prompt[key] for key in prompt_keys]
    return checked_frame(export.contract, records, prompt_keys, splits), records


def loads_or_none(value: str | None) -> Any:
    return None if value is None else orjson.loads(value)


def curated_trajectories(table: TrajectoryTable, config: Curation, columns: list[str],
                         budget: TokenBudget | None = None,
                         benchmarks: BenchmarkIndex | None = None) -> tuple[pd.DataFrame, Counter]:
    """The trajectories an export may use (flat columns only), and why the others were left out.

    With a tokenizer (``budget``) ``max_tokens`` is enforced on the rendered rows, not on the
    rollouts' recorded usage. With ``benchmarks`` (decontamination), the trajectories that
    passed the filters and exact de-duplication and match a benchmark are left out under
    ``contaminated:<benchmark>``: as ingest found them, or for a batch ingested without these
    benchmarks, read once more chunk by chunk."""
    if budget is not None:
        config = config.model_copy(update={"max_tokens": None})
    # one scan of the flat columns, with what the superseded-copy rule reads, dropped once read
    extra = [column for column in SUPERSEDED_COLUMNS if column not in columns]
    candidates = _concat(table.scan([*columns, *extra]))
    superseded = superseded_copies(candidates, config.reverified_reward)
    candidates = candidates.drop(columns=extra)
    if superseded:  # a re-verified rollout is kept once: the other copy is counted, not filtered
        candidates = candidates.loc[~candidates["trajectory_id"].isin(superseded)]
    kept, excluded = filter_trajectories(candidates, config)
    if superseded:
        excluded[SUPERSEDED] += len(superseded)
    if config.dedup != "none":
        kept = drop_exact_duplicates(kept, excluded)
    if benchmarks is not None and len(kept):
        matched = contaminated_trajectories(table, benchmarks, set(kept["trajectory_id"]))
        if matched:
            excluded.update(Counter(reason(name) for name in matched.values()))
            kept = kept.loc[~kept["trajectory_id"].isin(matched)]
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


def payload_columns(family_columns: list[str], exports: dict[str, Export]) -> list[str]:
    extra = [column for export in exports.values() for column in export.columns if column not in family_columns]
    return [*family_columns, *dict.fromkeys(extra)]


# unit -> (the unit, cut if it had to be, its tokens, whether it was cut)
Fit = Callable[[Any], tuple[Any, int, bool]]


def render_all(units: Iterable, exports: dict[str, Export], split: SplitConfig,
                fit: Fit | None = None) -> dict[str, ExportFrame]:
    """Every unit in every export; a unit one export cannot express is counted for that export
    only, a unit over the token budget (``fit``) for every export of the family."""
    rendered: dict[str, list[tuple[str, dict[str, Any]]]] = {name: [] for name in exports}
    lengths: dict[str, list[float]] = {name: [] for name in exports}
    unrepresentable: dict[str, Counter] = {name: Counter() for name in exports}
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
        for name, export in exports.items():
            try:
                rendered[name].append((unit.prompt_key, export.render(unit)))
            except Unrepresentable as error:
                unrepresentable[name][error.reason] += 1
                continue
            lengths[name].append(tokens)
            truncated[name] += cut
    return {name: ExportFrame(*_frame(rendered[name], export, split), unrepresentable[name], truncated[name],
                              np.array(lengths[name], dtype=float))
            for name, export in exports.items()}


def exclusions(excluded: Counter, exports: dict[str, Export], split: SplitConfig) -> dict[str, ExportFrame]:
    """The plan's exclusions, the same for every export of the family."""
    return {name: ExportFrame(*_frame([], export, split), Counter(excluded)) for name, export in exports.items()}
