"""The export phase as shards and merges, each a step of its own (``defs/exports.py``).

1. :func:`plan_exports`: every selected family's plan (``families.FAMILIES``: the decisions
   that span the dataset, over small columns), kept in the run's staging folder, and the
   shards, contiguous bucket ranges of about ``shards.target_trajectories`` trajectories.
2. :func:`render_shard`: one shard's payloads read once (the union of what every family's
   units need) and rendered in every selected export of every family. Each export's part is
   written to staged shard files, with what its checks need of these rows
   (``writer.ExportPart``), also kept in the staging folder.
3. :func:`merge_export`: one export's parts, checked together, committed under Hub names
   with the manifest and the card; or discarded whole when a check failed.

The steps hand each other only :class:`ShardTask` (JSON). What they share lives in the
dataset's storage under ``staging/<run id>/``, so a step on another machine (a Kubernetes
pod) finds what the step before it wrote. :func:`write_exports` runs the same three in one
process. No Dagster here.
"""

from __future__ import annotations

import hashlib
import pickle
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import asdict, dataclass, field

import numpy as np
import orjson
import pandas as pd

from trajectory_assets import layout
from trajectory_assets.buckets import BUCKETS, shard_ranges
from trajectory_assets.config import Curation, PipelineConfig
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.families import FAMILIES
from trajectory_assets.exports.families.frames import (
    BucketRange,
    ExportFrame,
    Plan,
    TrajectoryTable,
    payload_columns,
    read_shard,
    scan_candidates,
)
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.exports.writer import (
    Broken,
    ExportPart,
    PartWriter,
    Written,
    discard_parts,
    dump_part,
    finish_export,
    keep_parts,
    load_part,
    reused_part,
)
from trajectory_assets.ingest.decontamination import BenchmarkIndex, manifest_block
from trajectory_assets.io.batch_summary import read_summary
from trajectory_assets.io.storage import Storage
from trajectory_assets.jsonutil import sha256_hex
from trajectory_assets.memory import chunk_memory, release_memory


@dataclass(frozen=True)
class ShardTask:
    """One shard of a run's export phase: what its step reads and where it writes."""

    run: str  # the run's id: its staging folder
    index: int
    count: int  # shards in this run
    buckets: tuple[int, int]  # (first, stop)
    trajectories: int  # in its buckets (what sized it)
    batches: dict[str, str]  # batch key -> its source, as the plan read them: every step reads the same
    families: tuple[str, ...]  # the families planned
    # export -> the fingerprint of this shard's input for it (:func:`shard_fingerprints`); an
    # export without one is always rendered
    fingerprints: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict) -> "ShardTask":
        """The task of a JSON value (a shard step's output adds its rows per export: not the task's)."""
        known = {name: value[name] for name in cls.__dataclass_fields__ if name in value}
        return cls(**{**known, "buckets": tuple(known["buckets"]), "families": tuple(known["families"])})


def plan_exports(store: Storage, table: TrajectoryTable, batches: dict[str, str], config: PipelineConfig,
                 exports: list[Export], run: str, budgets: dict[str, TokenBudget | None],
                 benchmarks: BenchmarkIndex | None = None,
                 code_versions: dict[str, str] | None = None) -> list[ShardTask]:
    """Every family of ``exports`` planned over ``table`` (the trajectories of ``batches``, key
    -> source), each plan kept in the run's staging folder, and the shards, each with the
    fingerprint of its input per export when ``code_versions`` (export -> its code version)
    are given and the table can say which batches a shard reads. Staging folders of earlier
    runs are the caller's to remove (it knows which runs are over)."""
    families = tuple(dict.fromkeys(export.family for export in exports))
    candidates = scan_candidates(table, [column for family in families for column in FAMILIES[family].plan_columns])
    plans = {}
    for family in families:
        plan = plans[family] = FAMILIES[family].plan(table, getattr(config, family), budgets.get(family), benchmarks,
                                                     candidates)
        # the manifest's decontamination block, from the plan's counts: the index stays in this step
        kept = {"plan": plan, "decontamination": None if benchmarks is None else manifest_block(benchmarks, plan.excluded)}
        store.write_bytes(layout.staging_plan(run, family), pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL))
    rows_per_bucket = plans[families[-1]].rows_per_bucket
    ranges = shard_ranges(rows_per_bucket, config.shards.target_trajectories)
    fingerprints = shard_fingerprints(table, plans, ranges, config, exports, code_versions)
    return [ShardTask(run, index, len(ranges), (first, stop), int(rows_per_bucket[first:stop].sum()), dict(batches),
                      families, fingerprints[index])
            for index, (first, stop) in enumerate(ranges)]


# The fields of a family's section that its plan alone reads (which trajectories, pairs and
# tasks; caps; samples): what they decide is in the plan's units, which a fingerprint holds.
# Every other field (a new one too) is in the fingerprint itself: the render or the checks
# may read it. max_tokens and over_token_budget make the render's token budget.
PLAN_ONLY_FIELDS = frozenset(Curation.model_fields) - {"max_tokens", "over_token_budget"}


def shard_fingerprints(table: TrajectoryTable, plans: dict[str, Plan], ranges: list[BucketRange],
                       config: PipelineConfig, exports: list[Export],
                       code_versions: dict[str, str] | None) -> list[dict[str, str]]:
    """Each shard's fingerprint per export: a digest of everything its part of the export is
    made from. That is the export's code version and the configuration its render and checks
    read; the shard's bucket range and the number of shards; the plan's units in the range
    with every decision about them (each unit's columns: which trajectories, in which order,
    its pair or task); and the rows they read, by the batches that may hold them. Which rows a
    batch holds is not known without reading it, so every batch whose row groups may hold a
    bucket the units read (their own, and those of trajectories read from other buckets) is
    named with its ``Storage.checksum`` and its place in the batch order (the table keeps a
    trajectory's first occurrence): a batch written again, added or moved among them changes
    the fingerprint. None (an empty dict per shard) without ``code_versions`` or for a table
    that cannot say which batch holds which buckets (an in-memory table): every shard is then
    rendered."""
    batch_footprints = getattr(table, "batch_footprints", None)
    if code_versions is None or batch_footprints is None:
        return [{} for _ in ranges]
    batches = batch_footprints()
    # batch (in batch order) x bucket: whether the batch may hold rows of the bucket
    may_hold = np.array([buckets for _, _, buckets in batches], dtype=bool).reshape(len(batches), BUCKETS)
    # the report's sample settings too: a part holds the rows it picked for the viewer
    shared = {"shards": len(ranges), "split": config.split.model_dump(mode="json"), "tokenizer": config.tokenizer,
              "report_sample": [config.report.samples_per_export, config.report.seed]}
    fingerprints: list[dict[str, str]] = [{} for _ in ranges]
    for family, plan in plans.items():
        section = getattr(config, family).model_dump(mode="json", exclude=set(PLAN_ONLY_FIELDS))
        for index, (first, stop) in enumerate(ranges):
            units = plan.units_in((first, stop))
            read = np.zeros(BUCKETS, dtype=bool)
            read[first:stop] = True
            if len(units):
                read[plan.needed(units)["bucket"].to_numpy(dtype=np.int64)] = True
            family_input = {**shared, "family": family, "config": section, "buckets": [first, stop],
                            "units": frame_digest(units),
                            "batches": [[int(order), *batches[order][:2]]
                                        for order in np.flatnonzero(may_hold[:, read].any(axis=1))]}
            for export in exports:
                if export.family == family:
                    fingerprints[index][export.name] = sha256_hex(orjson.dumps(
                        {**family_input, "export": export.name, "code_version": code_versions[export.name],
                         "columns": payload_columns(plan.columns, {export.name: export})},
                        option=orjson.OPT_SORT_KEYS))
    return fingerprints


def frame_digest(frame: pd.DataFrame) -> str:
    """A digest of a frame's columns, their types and every value in order (lists and arrays
    in cells whole, never a shortened repr)."""
    digest = hashlib.sha256()
    for name in frame.columns:
        column = frame[name]
        digest.update(orjson.dumps([str(name), str(column.dtype)]))
        digest.update(orjson.dumps(column.tolist(), option=orjson.OPT_SERIALIZE_NUMPY, default=_plain))
    return digest.hexdigest()


def _plain(value: object) -> object:
    """What orjson cannot write itself: an array of strings (as its list), else its repr (pd.NA)."""
    return value.tolist() if isinstance(value, np.ndarray) else repr(value)


def load_plan(store: Storage, run: str, family: str) -> tuple[Plan, dict | None]:
    """A family's plan and its manifest's decontamination block, as :func:`plan_exports` kept
    them for this run (our own pickle, written by a step of the same run and code version)."""
    kept = pickle.loads(store.read_bytes(layout.staging_plan(run, family)))
    return kept["plan"], kept["decontamination"]


def render_shard(store: Storage, table: TrajectoryTable, task: ShardTask, config: PipelineConfig,
                 exports: list[Export], budgets: dict[str, TokenBudget | None]) -> dict:
    """The shard's part of every export of ``exports``: reused from the committed build where
    its input has not changed (``task.fingerprints``, ``writer.reused_part``), else rendered
    from its payloads, read once from ``table`` for every family still to render (not at all
    when none is), and written to staged shard files; each part kept for the merges. Returns
    the task with the rows each export got and the exports reused (for the step's log)."""
    reused = {}
    for export in exports:
        fingerprint = task.fingerprints.get(export.name)
        part = None if fingerprint is None else reused_part(store, export, task.run, task.index, fingerprint)
        if part is not None:
            reused[export.name] = part
    rendering = [export for export in exports if export.name not in reused]
    try:
        parts = {**reused, **_rendered_parts(store, table, task, config, rendering, budgets)}
    except BaseException:
        discard_parts(store, list(reused.values()))
        raise
    for name, part in parts.items():
        store.write_bytes(layout.staging_part(task.run, name, task.index), dump_part(part))
    release_memory()
    return {**task.to_json(), "rows": {name: part.rows for name, part in parts.items()}, "reused": sorted(reused)}


def _rendered_parts(store: Storage, table: TrajectoryTable, task: ShardTask, config: PipelineConfig,
                    exports: list[Export], budgets: dict[str, TokenBudget | None]) -> dict[str, ExportPart]:
    """The shard's part of each of ``exports``, rendered from its payloads read once."""
    plans = {family: load_plan(store, task.run, family)[0] for family in task.families if _of(exports, family)}
    writers = {export.name: PartWriter(store, export, config, task.run, task.index) for export in exports}
    try:
        with closing(shard_frames(table, task.buckets, plans, config, exports, budgets)) as chunks:
            for frames in chunks:
                while frames:  # popped, so each export's rows are freed as soon as they are written
                    name, frame = frames.popitem()
                    writers[name].add(frame)
                    del frame
        parts = {name: writer.close() for name, writer in writers.items()}
    except BaseException:
        for writer in writers.values():
            writer.discard()
        raise
    for name, part in parts.items():
        part.fingerprint = task.fingerprints.get(name)
    return parts


def shard_frames(table: TrajectoryTable, buckets: BucketRange, plans: dict[str, Plan], config: PipelineConfig,
                 exports: list[Export], budgets: dict[str, TokenBudget | None]) -> Iterator[dict[str, ExportFrame]]:
    """Per chunk, one frame per export of a family: each family's units in ``buckets`` (the
    families in ``plans``' order), rendered from the shard's payloads, read once for every
    family (not at all when none has units there). The caller writes a chunk's frames before
    asking for the next: what the chunks left behind is freed in between (``chunk_memory``)."""
    units = {family: plan.units_in(buckets) for family, plan in plans.items()}
    columns = list(dict.fromkeys(column for family, plan in plans.items()
                                 for column in payload_columns(plan.columns, _of(exports, family))))
    needed = [plan.needed(units[family]) for family, plan in plans.items() if len(units[family])]
    if not needed:
        return
    payloads = read_shard(table, columns, buckets, pd.concat(needed, ignore_index=True).drop_duplicates("trajectory_id"))
    with chunk_memory() as release:
        for family, plan in plans.items():
            if not len(units[family]):
                continue
            for frames in FAMILIES[family].render(units[family], payloads, getattr(config, family), config.split,
                                                  _of(exports, family), budgets.get(family)):
                yield frames
                release()


def merge_export(store: Storage, export: Export, tasks: list[ShardTask], config: PipelineConfig,
                 code_version: str, dataset: dict | None = None) -> Written | Broken:
    """The export's parts from every shard (``tasks``, in shard order), checked together and
    committed, or discarded; the plan's exclusions counted once."""
    run = tasks[0].run
    plan, decontamination = load_plan(store, run, export.family)
    parts: list[ExportPart] = [load_part(store.read_bytes(layout.staging_part(run, export.name, task.index)))
                              for task in tasks]
    batches = list(tasks[0].batches)
    outcome = finish_export(store, export, config, parts, plan.excluded, batches,
                            read_summary(store, batches)["sources"], code_version, decontamination, dataset)
    if isinstance(outcome, Written):
        keep_parts(store, export.name, [layout.staging_part(run, export.name, task.index) for task in tasks])
    return outcome


def write_exports(store: Storage, table: TrajectoryTable, batches: dict[str, str], config: PipelineConfig,
                  exports: list[Export], code_versions: dict[str, str], budgets: dict[str, TokenBudget | None],
                  benchmarks: BenchmarkIndex | None = None, dataset: dict | None = None,
                  run: str | None = None,
                  on_shard: Callable[[dict], None] | None = None) -> Iterator[Written | Broken]:
    """The three steps one after the other in this process (tests, the profiler, small
    data): every export of ``exports`` written from ``table``, one outcome each, in order.
    ``on_shard``: given each shard step's result (what the Dagster step logs)."""
    run = run or uuid.uuid4().hex
    try:
        tasks = plan_exports(store, table, batches, config, exports, run, budgets, benchmarks, code_versions)
        for task in tasks:
            rendered = render_shard(store, table, task, config, exports, budgets)
            if on_shard is not None:
                on_shard(rendered)
        for export in exports:
            yield merge_export(store, export, tasks, config, code_versions[export.name], dataset)
    finally:
        store.remove_folder(layout.staging_run(run))


def _of(exports: list[Export], family: str) -> dict[str, Export]:
    return {export.name: export for export in exports if export.family == family}
