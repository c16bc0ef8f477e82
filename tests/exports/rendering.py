"""Exports rendered in memory for tests that read frames rather than written files: a
family's plan, then its units rendered shard by shard by the shard phase's own render
(``shard_phase.shard_frames``, what ``render_shard`` writes), each export's chunks collected
into one frame. Tests of what a run writes go through ``shard_phase.write_exports``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from trajectory_assets.config import PipelineConfig, SplitConfig
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.families import FAMILIES
from trajectory_assets.exports.families.frames import (
    EVERY_BUCKET,
    BucketRange,
    ExportFrame,
    FrameTable,
    TrajectoryTable,
    render_all,
)
from trajectory_assets.exports.registry import EXPORTS_BY_NAME
from trajectory_assets.exports.shard_phase import shard_frames
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.ingest.decontamination import BenchmarkIndex


def render_family(family: str, table: TrajectoryTable, config: Any, split: SplitConfig, exports: list[Export],
                  budget: TokenBudget | None = None, benchmarks: BenchmarkIndex | None = None,
                  shards: Iterable[BucketRange] = (EVERY_BUCKET,)) -> dict[str, ExportFrame]:
    """Each of ``exports`` (of ``family``; ``config`` its section) as one frame: the plan's
    exclusions, then the rows of ``shards`` (bucket ranges, in order; one of every bucket
    unless given: the rows are the same)."""
    plan = FAMILIES[family].plan(table, config, budget, benchmarks)
    # the family's section and the split, unvalidated: a section that truncates needs no
    # tokenizer here, where the test gives the budget itself
    sections = PipelineConfig.model_construct(**{family: config, "split": split})
    excluded = render_all([], {export.name: export for export in exports}, split)  # no rows, each export's columns
    for frame in excluded.values():
        frame.excluded.update(plan.excluded)
    chunks = [excluded]
    for buckets in shards:
        chunks += shard_frames(table, buckets, {family: plan}, sections, exports, {family: budget})
    return {export.name: collect(frames[export.name] for frames in chunks) for export in exports}


def build(name: str, trajectories: pd.DataFrame | TrajectoryTable, config: Any, split: SplitConfig,
          budget: TokenBudget | None = None, benchmarks: BenchmarkIndex | None = None) -> ExportFrame:
    """One export alone, over an in-memory trajectory frame (or a table), as one frame.

    ``config`` is the export's family section (``SftConfig``, ``DpoConfig``, ``GrpoConfig``);
    ``benchmarks`` the decontamination index (``decontamination.build_index``), if any.
    """
    export = EXPORTS_BY_NAME[name]
    table = FrameTable(trajectories) if isinstance(trajectories, pd.DataFrame) else trajectories
    return render_family(export.family, table, config, split, [export], budget, benchmarks)[name]


def collect(frames: Iterable[ExportFrame]) -> ExportFrame:
    """One export's chunks as one frame."""
    frames = list(frames)
    excluded: Counter = Counter()
    for frame in frames:
        excluded.update(frame.excluded)
    return ExportFrame(pd.concat([f.rows for f in frames], ignore_index=True),
                       [record for f in frames for record in f.records], excluded,
                       sum(f.truncated for f in frames), np.concatenate([f.tokens for f in frames]))
