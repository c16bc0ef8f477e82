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
pod) finds what the step before it wrote. ``writer.write_family`` runs the same three in one
process. No Dagster here.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import pandas as pd

from trajectory_assets import layout
from trajectory_assets.buckets import shard_ranges
from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.families import FAMILIES
from trajectory_assets.exports.families.frames import Plan, TrajectoryTable, payload_columns, read_shard
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.exports.writer import Broken, ExportPart, PartWriter, Written, finish_export
from trajectory_assets.ingest.decontamination import BenchmarkIndex, manifest_block
from trajectory_assets.io.batch_summary import read_summary
from trajectory_assets.io.storage import Storage
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

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict) -> "ShardTask":
        """The task of a JSON value (a shard step's output adds its rows per export: not the task's)."""
        known = {name: value[name] for name in cls.__dataclass_fields__}
        return cls(**{**known, "buckets": tuple(known["buckets"]), "families": tuple(known["families"])})


def plan_exports(store: Storage, table: TrajectoryTable, batches: dict[str, str], config: PipelineConfig,
                 exports: list[Export], run: str, budgets: dict[str, TokenBudget | None],
                 benchmarks: BenchmarkIndex | None = None) -> list[ShardTask]:
    """Every family of ``exports`` planned over ``table`` (the trajectories of ``batches``, key
    -> source), each plan kept in the run's staging folder, and the shards. Staging folders of
    earlier runs are the caller's to remove (it knows which runs are over)."""
    families = tuple(dict.fromkeys(export.family for export in exports))
    rows_per_bucket = None
    for family in families:
        plan = FAMILIES[family].plan(table, getattr(config, family), budgets.get(family), benchmarks)
        # the manifest's decontamination block, from the plan's counts: the index stays in this step
        kept = {"plan": plan, "decontamination": None if benchmarks is None else manifest_block(benchmarks, plan.excluded)}
        store.write_bytes(layout.staging_plan(run, family), pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL))
        rows_per_bucket = plan.rows_per_bucket
    ranges = shard_ranges(rows_per_bucket, config.shards.target_trajectories)
    return [ShardTask(run, index, len(ranges), (first, stop), int(rows_per_bucket[first:stop].sum()), dict(batches),
                      families)
            for index, (first, stop) in enumerate(ranges)]


def load_plan(store: Storage, run: str, family: str) -> tuple[Plan, dict | None]:
    """A family's plan and its manifest's decontamination block, as :func:`plan_exports` kept
    them for this run (our own pickle, written by a step of the same run and code version)."""
    kept = pickle.loads(store.read_bytes(layout.staging_plan(run, family)))
    return kept["plan"], kept["decontamination"]


def render_shard(store: Storage, table: TrajectoryTable, task: ShardTask, config: PipelineConfig,
                 exports: list[Export], budgets: dict[str, TokenBudget | None]) -> dict:
    """The shard's part of every export of ``exports``: its payloads read once from ``table``
    for every family, rendered, written to staged shard files; each part kept for the merges.
    Returns the task with the rows each export got (for the step's log)."""
    plans = {family: load_plan(store, task.run, family)[0] for family in task.families}
    units = {family: plan.units_in(task.buckets) for family, plan in plans.items()}
    columns = list(dict.fromkeys(column for family, plan in plans.items()
                                 for column in payload_columns(plan.columns, _of(exports, family))))
    needed = [plan.needed(units[family]) for family, plan in plans.items() if len(units[family])]
    writers = {export.name: PartWriter(store, export, config, task.run, task.index) for export in exports}
    try:
        if needed:
            payloads = read_shard(table, columns, task.buckets,
                                  pd.concat(needed, ignore_index=True).drop_duplicates("trajectory_id"))
            with chunk_memory() as release:
                for family, plan in plans.items():
                    if not len(units[family]):
                        continue
                    for frames in FAMILIES[family].render(units[family], payloads, getattr(config, family),
                                                          config.split, _of(exports, family), budgets.get(family)):
                        while frames:  # popped, so each export's rows are freed as soon as they are written
                            name, frame = frames.popitem()
                            writers[name].add(frame)
                            del frame
                        release()
            del payloads
        parts = {name: writer.close() for name, writer in writers.items()}
    except BaseException:
        for writer in writers.values():
            writer.discard()
        raise
    for name, part in parts.items():
        store.write_bytes(layout.staging_part(task.run, name, task.index), pickle.dumps(part, pickle.HIGHEST_PROTOCOL))
    release_memory()
    return {**task.to_json(), "rows": {name: part.rows for name, part in parts.items()}}


def merge_export(store: Storage, export: Export, tasks: list[ShardTask], config: PipelineConfig,
                 code_version: str, dataset: dict | None = None) -> Written | Broken:
    """The export's parts from every shard (``tasks``, in shard order), checked together and
    committed, or discarded; the plan's exclusions counted once."""
    run = tasks[0].run
    plan, decontamination = load_plan(store, run, export.family)
    parts: list[ExportPart] = [pickle.loads(store.read_bytes(layout.staging_part(run, export.name, task.index)))
                              for task in tasks]
    batches = list(tasks[0].batches)
    return finish_export(store, export, config, parts, plan.excluded, batches, read_summary(store, batches)["sources"],
                         code_version, decontamination, dataset)


def write_exports(store: Storage, table: TrajectoryTable, batches: dict[str, str], config: PipelineConfig,
                  exports: list[Export], code_versions: dict[str, str], budgets: dict[str, TokenBudget | None],
                  benchmarks: BenchmarkIndex | None = None, dataset: dict | None = None,
                  run: str | None = None) -> Iterator[Written | Broken]:
    """The three steps one after the other in this process (tests, the profiler, small
    data): every export of ``exports`` written from ``table``, one outcome each, in order."""
    run = run or uuid.uuid4().hex
    try:
        tasks = plan_exports(store, table, batches, config, exports, run, budgets, benchmarks)
        for task in tasks:
            render_shard(store, table, task, config, exports, budgets)
        for export in exports:
            yield merge_export(store, export, tasks, config, code_versions[export.name], dataset)
    finally:
        store.remove_folder(layout.staging_run(run))


def _of(exports: list[Export], family: str) -> dict[str, Export]:
    return {export.name: export for export in exports if export.family == family}
