"""``dpo``: preference pairs ``{prompt, chosen, rejected}`` from rollouts of the same task,
the seed DPO format: the shared prompt up to where the two conversations diverge, and each
side's messages after it (canonical chat, arguments as JSON strings), with both rewards and
their margin."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from schemas.dpo import DpoSchema
from trajectory_assets.exports.columns import DPO_LINEAGE, DPO_MEASURES, FIELDS, PAIR_LINEAGE, PAIR_SCORES
from trajectory_assets.exports.export import Export, ReadBack
from trajectory_assets.exports.families.dpo import PairItem
from trajectory_assets.io.arrow_rows import JSON

SCHEMA = pa.schema([("prompt", JSON), ("chosen", JSON), ("rejected", JSON), *PAIR_SCORES, ("tools", JSON),
                    *PAIR_LINEAGE])


def render(item: PairItem) -> dict[str, Any]:
    return item.record(*item.parts, item.tools)


def read_back(row: Mapping[str, Any]) -> ReadBack:
    """The prompt, and each side as written.

    >>> pair = read_back({"prompt": [{"role": "user", "content": "2+2?"}],
    ...                   "chosen": [{"role": "assistant", "content": "4"}],
    ...                   "rejected": [{"role": "assistant", "content": "5"}]})
    >>> pair.messages[0]["content"], pair.chosen[0]["content"], pair.rejected[0]["content"]
    ('2+2?', '4', '5')
    """
    return ReadBack(messages=list(row["prompt"]), tools=row.get("tools"), chosen=list(row["chosen"]),
                    rejected=list(row["rejected"]))


EXPORT = Export(
    name="dpo", family="dpo", render=render, read_back=read_back, contract=DpoSchema, arrow_schema=SCHEMA,
    lineage=DPO_LINEAGE, fields=FIELDS,
    description="Preference pairs `{prompt, chosen, rejected}` from rollouts of the same task (the seed DPO format).",
    measures=DPO_MEASURES,
)
