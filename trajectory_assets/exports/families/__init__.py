"""The export families: each plans its units once, and a shard's units are rendered in every
export of the family (``shard_phase.shard_frames``; ``frames.py`` holds what they share).

- ``sft``: one unit per curated trajectory;
- ``dpo``: one unit per pair of rollouts of a task;
- ``grpo``: one unit per task.
"""

from collections.abc import Callable, Iterator
from typing import NamedTuple

from trajectory_assets.exports.families import dpo, grpo, sft
from trajectory_assets.exports.families.frames import ExportFrame, Plan


class Family(NamedTuple):
    # (table, its config section, budget, benchmarks, candidates) -> the plan: every decision,
    # global and exact
    plan: Callable[..., Plan]
    # (a shard's units, its payloads, the config section, split, exports, budget) -> frames per chunk
    render: Callable[..., Iterator[dict[str, ExportFrame]]]
    # the flat columns its plan reads: a plan step scans the union of its families' once
    # (``frames.scan_candidates``) and hands it to each plan
    plan_columns: list[str]


# family (also its config section) -> its plan and its render
FAMILIES: dict[str, Family] = {
    "sft": Family(sft.plan, sft.render, sft.PLAN_COLUMNS),
    "dpo": Family(dpo.plan, dpo.render, dpo.PLAN),
    "grpo": Family(grpo.plan, grpo.render, grpo.PLAN),
}
