"""The export families: each plans its units once and renders them in every export of the
family (``frames.py`` holds what they share).

- ``sft``: one unit per curated trajectory;
- ``dpo``: one unit per pair of rollouts of a task;
- ``grpo``: one unit per task.
"""

from collections.abc import Callable, Iterator

from trajectory_assets.exports.families import dpo, grpo, sft
from trajectory_assets.exports.families.frames import ExportFrame

# family (also its config section) -> its builder
FAMILIES: dict[str, Callable[..., Iterator[dict[str, ExportFrame]]]] = {
    "sft": sft.iter_family,
    "dpo": dpo.iter_family,
    "grpo": grpo.iter_family,
}
