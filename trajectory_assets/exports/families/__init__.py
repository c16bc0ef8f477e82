"""The export families: each plans its units once and renders them, shard by shard, in every
export of the family (``frames.py`` holds what they share).

- ``sft``: one unit per curated trajectory;
- ``dpo``: one unit per pair of rollouts of a task;
- ``grpo``: one unit per task.
"""

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from trajectory_assets.config import SplitConfig
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.families import dpo, grpo, sft
from trajectory_assets.exports.families.frames import (
    EVERY_BUCKET,
    BucketRange,
    ExportFrame,
    Plan,
    TrajectoryTable,
    exclusions,
    payload_columns,
    read_shard,
)
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.ingest.decontamination import BenchmarkIndex


class Family(NamedTuple):
    # (table, its config section, budget, benchmarks) -> the plan: every decision, global and exact
    plan: Callable[..., Plan]
    # (a shard's units, its payloads, the config section, split, exports, budget) -> frames per chunk
    render: Callable[..., Iterator[dict[str, ExportFrame]]]


# family (also its config section) -> its plan and its render
FAMILIES: dict[str, Family] = {
    "sft": Family(sft.plan, sft.render),
    "dpo": Family(dpo.plan, dpo.render),
    "grpo": Family(grpo.plan, grpo.render),
}


def render_shards(family: str, plan: Plan, table: TrajectoryTable, shards: list[BucketRange], config: Any,
                  split: SplitConfig, exports: dict[str, Export],
                  budget: TokenBudget | None = None) -> Iterator[tuple[int, dict[str, ExportFrame]]]:
    """Per chunk, (the shard's index, one frame per export): the plan's units of each shard
    (contiguous bucket ranges, in order), each shard's payloads read once. A shard without
    units reads nothing and yields nothing."""
    columns = payload_columns(plan.columns, exports)
    for shard, buckets in enumerate(shards):
        units = plan.units_in(buckets)
        if units.empty:
            continue
        payloads = read_shard(table, columns, buckets, plan.needed(units))
        for frames in FAMILIES[family].render(units, payloads, config, split, exports, budget):
            yield shard, frames
        del payloads  # freed before the next shard is read: one shard's payloads at a time


def iter_family(family: str, table: TrajectoryTable, config: Any, split: SplitConfig, exports: dict[str, Export],
                budget: TokenBudget | None = None, benchmarks: BenchmarkIndex | None = None,
                shards: list[BucketRange] | None = None) -> Iterator[dict[str, ExportFrame]]:
    """The plan's exclusions, then per chunk one frame per export, in the order of the rows
    (one shard of every bucket unless ``shards`` are given: the rows are the same)."""
    plan = FAMILIES[family].plan(table, config, budget, benchmarks)
    yield exclusions(plan.excluded, exports, split)
    for _, frames in render_shards(family, plan, table, shards or [EVERY_BUCKET], config, split, exports, budget):
        yield frames
