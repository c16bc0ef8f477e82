"""What every export family shares: the plan, the shard a plan's units are rendered in, the
rows a chunk of units becomes, the split, the curation of the trajectories, and the loop that
renders every unit in every export.

A family (``sft.py``, ``dpo.py``, ``grpo.py``) works in two parts, so that its decisions are
global and exact while its rows are rendered shard by shard (issue 42):

1. **plan** (``plan``): the decisions, over the small flat columns of every trajectory (ids,
   keys, rewards, counts) and never over whole rows: curation (``exports/curation.py``) picks
   the trajectories, then the family builds its units: SFT rows (one per trajectory), DPO
   pairs (two rollouts of a task), GRPO tasks (one per task), and balances them (cap per
   task_type, sample). A :class:`Plan` holds the units in the *canonical order* (below), each
   with its bucket and the trajectories it reads, and the counts of what was left out;
2. **render a shard** (``render``): for a contiguous range of buckets, the plan's units of
   that range and the payloads of that range (read once by the caller, :func:`read_shard`):
   each unit is measured with the configured tokenizer's chat template, when there is one
   (``exports/token_budget.py``: over the family's ``max_tokens`` it is left out or cut at a
   turn boundary, for every export of the family alike), then rendered in every requested
   export of the family (one module each under ``exports/``). A unit an export cannot express
   raises ``Unrepresentable`` and is counted, never written lossily.

**The canonical order** of the trajectories is bucket first (``trajectory_assets/buckets.py``:
a hash of the prompt), then the table's own order (batch order, then stored order within a
batch): a stable sort by bucket of the table's scan. Every "first" of a plan (the copy of an
exact duplicate kept, a near duplicate's survivor, a GRPO task's first rollout, the order of
tasks and pairs) is first in that order, and units follow it, so their buckets never go down.
A shard is a contiguous range of buckets, so the shards' rows, concatenated in shard order,
are the rows of one shard, in the same order, whatever the number of shards. A unit belongs
to the shard of its bucket (the bucket of its first trajectory); a trajectory it reads from
another bucket (a task whose rollouts hold different prompts) is read by id with that shard.

A family decodes each JSON payload at most once (the units cache what the renderers ask for):
reading the payloads is most of an export's cost. Rendering yields, per chunk of units, one
:class:`ExportFrame` per export: the rows to write (dicts, serialized only by a JSON-lines
writer; a Parquet writer builds Arrow columns from them), and beside them the frame its
Pandera contract checks, read from those rows (``schemas/export_row.py``); plus counts of
what was left out and why, each row's length in ``tokens`` (NaN when not measured) and the
number of rows cut to the token budget. Rows are written after every export of the chunk is
rendered, and exports share what a unit caches, so a renderer builds new containers and never
changes one it was given. The split is by ``prompt_key`` (the content of the prompt), so one
prompt never lands in both splits, even when two source files hold it under different task
indices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from schemas.export_row import checked_frame
from trajectory_assets.buckets import BUCKETS, buckets_of
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
from trajectory_assets.ingest.near_signatures import is_current, signature, stored_signatures
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.io import trajectory_table
from trajectory_assets.jsonutil import sha256_hex


SPLITS = ("train", "validation")


PLAN_COLUMNS = [*FILTER_COLUMNS, "prompt_key"]

BucketRange = tuple[int, int]  # (first, stop): the buckets first <= bucket < stop
EVERY_BUCKET: BucketRange = (0, BUCKETS)


class TrajectoryTable(Protocol):
    """The validated trajectories, readable in chunks (always in the same order: batch order,
    then stored order), each trajectory_id once (its first occurrence)."""

    def scan(self, columns: list[str], ids: set[str] | None = None,
             buckets: BucketRange | None = None) -> Iterator[pd.DataFrame]:
        """Chunks of the given columns; only rows whose trajectory_id is in ``ids`` if given,
        only rows whose bucket is in the range ``buckets`` if given."""
        ...


@dataclass
class FrameTable:
    """A TrajectoryTable over one in-memory DataFrame (tests, small data): its rows in frame
    order, each trajectory_id read where it first appears, as the stored table reads a
    record copied into two batches. A frame without a ``bucket`` column has its buckets
    computed from ``prompt_key`` (for a range, or asked for as a column), as the stored table
    does for a batch written before them."""

    frame: pd.DataFrame

    def scan(self, columns: list[str], ids: set[str] | None = None,
             buckets: BucketRange | None = None) -> Iterator[pd.DataFrame]:
        rows = self.frame
        if buckets is not None or ("bucket" in columns and "bucket" not in rows.columns):
            rows = rows.assign(bucket=bucket_column(rows))
        if buckets is not None:
            first, stop = buckets
            rows = rows.loc[(rows["bucket"] >= first) & (rows["bucket"] < stop)]
        if ids is not None:
            rows = rows.loc[rows["trajectory_id"].isin(ids)]
        yield rows.loc[~rows["trajectory_id"].duplicated(), columns]


def bucket_column(frame: pd.DataFrame) -> np.ndarray:
    """Each row's bucket: the table's ``bucket`` column where it was read, else computed from
    ``prompt_key`` once per distinct prompt (the rollouts of a prompt share it)."""
    if "bucket" in frame.columns:
        return frame["bucket"].to_numpy(dtype=np.int16)
    codes, prompt_keys = pd.factorize(frame["prompt_key"])
    return buckets_of(prompt_keys)[codes] if len(frame) else np.empty(0, dtype=np.int16)


def scan_range(table: TrajectoryTable, columns: list[str], buckets: BucketRange) -> Iterator[pd.DataFrame]:
    """The rows of a bucket range. Every bucket is the whole table: read with no range, which
    a table of batches written before buckets serves without computing any."""
    if buckets == EVERY_BUCKET:
        return table.scan(columns)
    return table.scan(columns, buckets=buckets)


@dataclass
class Plan:
    """A family's decisions, made once over the small columns of every trajectory.

    ``units``: one row per unit (SFT row, DPO pair, GRPO task) in the canonical order, with
    the unit's ``bucket`` (never going down along the frame), and for each trajectory the
    unit reads, its id and its own bucket (``reads``: pairs of those columns). ``excluded``:
    what the plan left out and why. ``rows_per_bucket``: the table's trajectories in each
    bucket, every family's alike (what a shard's range reads), from which the shards are cut.
    ``columns``: the payload columns the family's render reads for these units."""

    units: pd.DataFrame
    excluded: Counter
    rows_per_bucket: np.ndarray
    columns: list[str]
    reads: tuple[tuple[str, str], ...] = (("trajectory_id", "bucket"),)

    def units_in(self, buckets: BucketRange) -> pd.DataFrame:
        """The units of a bucket range, in plan order (a slice: the buckets are sorted)."""
        first, stop = np.searchsorted(self.units["bucket"].to_numpy(), buckets, side="left")
        return self.units.iloc[first:stop]

    def needed(self, units: pd.DataFrame) -> pd.DataFrame:
        """The trajectories ``units`` read (trajectory_id, bucket: the trajectory's own)."""
        return pd.concat([pd.DataFrame({"trajectory_id": units[ids].to_numpy(), "bucket": units[buckets].to_numpy()})
                          for ids, buckets in self.reads], ignore_index=True).drop_duplicates("trajectory_id")


class Payloads:
    """The payload rows a shard's units read, found by trajectory_id."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self._positions = pd.Index(frame["trajectory_id"])

    def rows(self, ids: Iterable[str]) -> pd.DataFrame:
        """The rows of ``ids``, in that order."""
        ids = list(ids)
        positions = self._positions.get_indexer(ids)
        if (positions < 0).any():  # a plan's trajectory the shard did not read: never render without it
            missing = [trajectory_id for trajectory_id, at in zip(ids, positions) if at < 0]
            raise LookupError(f"{len(missing)} planned trajectories missing from the shard's payloads: {missing[:3]}")
        return self.frame.iloc[positions]


def read_shard(table: TrajectoryTable, columns: list[str], buckets: BucketRange, needed: pd.DataFrame) -> Payloads:
    """The payloads (``columns``) of the ``needed`` trajectories (``Plan.needed``, of one plan
    or of several concatenated) of a shard: its bucket range read once, keeping only needed
    rows, plus the few needed trajectories of other buckets, read by id only when there are
    some. A range's own copy of a trajectory is the table's (its first occurrence) exactly
    when the plan found it in that range: a copy in a later batch under another prompt can be
    in the range while the first is not, and is never used."""
    first, stop = buckets
    own = (needed["bucket"] >= first) & (needed["bucket"] < stop)
    local = set(needed.loc[own, "trajectory_id"])
    parts = [chunk.loc[chunk["trajectory_id"].isin(local)] for chunk in scan_range(table, columns, buckets)]
    foreign = set(needed.loc[~own, "trajectory_id"])
    if foreign:
        parts += list(table.scan(columns, ids=foreign))
    return Payloads(pd.concat(parts, ignore_index=True))


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


def _concat(chunks: Iterable[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(list(chunks), ignore_index=True)  # a TrajectoryTable yields at least one chunk


def split_of(prompt_key: str, config: SplitConfig) -> str:
    """Deterministic, per prompt: every rollout of a prompt lands in the same split."""
    bucket = int(sha256_hex(f"{config.seed}:{prompt_key}".encode())[:8], 16) / 2**32
    return "validation" if bucket < config.validation_fraction else "train"


def loads_or_none(value: str | None) -> Any:
    return None if value is None else orjson.loads(value)


class SharedJson:
    """The JSON texts many units of a chunk repeat (the tools of a task set: 13 distinct in
    the 1 GB benchmark corpus's 44,616 rows), each decoded once: units with equal texts share
    one value, as the exports of a unit share what it caches (no renderer changes it). Made
    per chunk, so it holds at most a chunk's distinct texts."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def __call__(self, text: str | None) -> Any:
        if text is None:
            return None
        if text not in self._values:
            self._values[text] = orjson.loads(text)
        return self._values[text]


class Candidates(NamedTuple):
    """The flat columns the families' curation reads, scanned once for every family a plan
    step plans (``scan_candidates``): in the canonical order, with their bucket."""
    frame: pd.DataFrame
    rows_per_bucket: np.ndarray  # every trajectory of the table, per bucket (Plan.rows_per_bucket)


def scan_candidates(table: TrajectoryTable, columns: Iterable[str]) -> Candidates:
    """One scan of ``columns``, of what the superseded-copy rule reads and of each row's
    bucket, in the canonical order: bucket first, then the table's order (a stable sort
    keeps it). The three families of a plan step read it once, not once each: the plan of
    the 1 GB benchmark corpus went from 1.6 to 1.0 s of CPU."""
    read = list(dict.fromkeys([*columns, *SUPERSEDED_COLUMNS, "bucket"]))
    frame = _concat(table.scan(read))
    frame["bucket"] = bucket_column(frame)
    rows_per_bucket = np.bincount(frame["bucket"], minlength=BUCKETS)
    return Candidates(frame.sort_values("bucket", kind="stable", ignore_index=True), rows_per_bucket)


class Curated(NamedTuple):
    kept: pd.DataFrame  # the trajectories an export may use, in the canonical order, with their bucket
    excluded: Counter  # why the others were left out
    rows_per_bucket: np.ndarray  # every trajectory of the table, per bucket (Plan.rows_per_bucket)


def curated_trajectories(table: TrajectoryTable, config: Curation, columns: list[str],
                         budget: TokenBudget | None = None,
                         benchmarks: BenchmarkIndex | None = None,
                         candidates: Candidates | None = None) -> Curated:
    """The trajectories an export may use (flat columns only, ``columns`` and ``bucket``, in
    the canonical order), and why the others were left out; from ``candidates`` when the
    caller scanned them for several families (they must hold ``columns``), else scanned here.

    With a tokenizer (``budget``) ``max_tokens`` is enforced on the rendered rows, not on the
    rollouts' recorded usage. With ``benchmarks`` (decontamination), the trajectories that
    passed the filters and exact de-duplication and match a benchmark are left out under
    ``contaminated:<benchmark>``: as ingest found them, or for a batch ingested without these
    benchmarks, read once more chunk by chunk."""
    if budget is not None:
        config = config.model_copy(update={"max_tokens": None})
    scanned = candidates if candidates is not None else scan_candidates(table, columns)
    # what the superseded-copy rule reads is dropped once read
    extra = [column for column in SUPERSEDED_COLUMNS if column not in columns]
    rows = scanned.frame[[*columns, *extra, "bucket"]]
    superseded = superseded_copies(rows, config.reverified_reward)
    rows = rows.drop(columns=extra)
    if superseded:  # a re-verified rollout is kept once: the other copy is counted, not filtered
        rows = rows.loc[~rows["trajectory_id"].isin(superseded)]
    kept, excluded = filter_trajectories(rows, config)
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
        # compared in the canonical order
        signatures = near_signatures(table, set(kept["trajectory_id"]))
        near = near_duplicates(((trajectory_id, signatures.pop(trajectory_id)) for trajectory_id in kept["trajectory_id"]),
                               config.near_duplicate_threshold)
        if near:
            excluded["near_duplicate"] += len(near)
            kept = kept.loc[~kept["trajectory_id"].isin(near)]
    return Curated(kept, excluded, scanned.rows_per_bucket)


def near_signatures(table: TrajectoryTable, ids: set[str]) -> dict:
    """trajectory_id -> MinHash signature (``near_signatures.signature``) of each of ``ids``.

    A table that keeps signatures beside its batches (``StoredTrajectories``) gives those
    ingest stored under today's rules, a small column read; a batch without them (ingested
    before, or when no dataset used ``dedup: near``) is signed from its messages, only the
    rows of ``ids``. Batches are visited in order, so a trajectory stored in two is signed
    from its first, as ``scan`` yields it. Any other table (``FrameTable``) is signed whole."""
    files = getattr(table, "near_signature_files", None)
    if files is None:
        return _signed(table.scan(["trajectory_id", "messages"], ids=ids))
    found: dict = {}
    remaining = set(ids)
    for key, stored in files():
        if not remaining:
            break
        if stored is not None and is_current(stored.schema):
            rows = stored.filter(pc.is_in(stored["trajectory_id"], value_set=pa.array(sorted(remaining), pa.string())))
            signed = dict(zip(rows["trajectory_id"].to_pylist(), stored_signatures(rows)))
        else:
            signed = _signed(table.batch(key).scan(["trajectory_id", "messages"], ids=remaining))
        found.update(signed)
        remaining.difference_update(signed)
    return found


def _signed(chunks: Iterable[pd.DataFrame]) -> dict:
    """trajectory_id -> the signature of its messages, over frames of those two columns."""
    return {trajectory_id: signature(messages) for chunk in chunks
            for trajectory_id, messages in zip(chunk["trajectory_id"], chunk["messages"])}


def payload_columns(family_columns: list[str], exports: dict[str, Export]) -> list[str]:
    extra = [column for export in exports.values() for column in export.columns if column not in family_columns]
    return [*family_columns, *dict.fromkeys(extra)]


# unit -> (the unit, cut if it had to be, its tokens, whether it was cut)
Fit = Callable[[Any], tuple[Any, int, bool]]


def render_all(units: Iterable, exports: dict[str, Export], split: SplitConfig,
                fit: Fit | None = None) -> dict[str, ExportFrame]:
    """Every unit in every export; a unit one export cannot express is counted for that export
    only, a unit over the token budget (``fit``) for every export of the family."""
    records: dict[str, list[dict[str, Any]]] = {name: [] for name in exports}
    prompt_keys: dict[str, list[str]] = {name: [] for name in exports}  # each record's
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
        prompt_key = unit.prompt_key
        for name, export in exports.items():
            try:
                record = export.render(unit)
            except Unrepresentable as error:
                unrepresentable[name][error.reason] += 1
                continue
            records[name].append(record)
            prompt_keys[name].append(prompt_key)
            lengths[name].append(tokens)
            truncated[name] += cut
    # each prompt's split, hashed once for every export of the chunk
    split_by_prompt = {key: split_of(key, split) for key in set().union(*prompt_keys.values())}
    return {name: ExportFrame(checked_frame(export.contract, records[name], prompt_keys[name],
                                            [split_by_prompt[key] for key in prompt_keys[name]]),
                              records[name], unrepresentable[name], truncated[name],
                              np.array(lengths[name], dtype=float))
            for name, export in exports.items()}


def unit_chunks(units: pd.DataFrame) -> Iterator[pd.DataFrame]:
    """A shard's units in plan order, a chunk at a time: what is rendered and written at once,
    so the rendered rows in memory stay bounded by a chunk."""
    size = trajectory_table.CHUNK_ROWS  # read here, as the stored table does, so a test can shrink it for a run
    for start in range(0, len(units), size):
        yield units.iloc[start:start + size]
