"""``trl_dpo``: TRL's explicit-prompt conversational preferences ``{prompt, chosen,
rejected}`` plus ``tools``, for ``trl.DPOTrainer``: the ``dpo`` pairs in template form
(``exports/template.py``), written as Parquet so train and validation share one schema.
TRL applies the chat template to ``prompt + chosen`` and ``prompt + rejected`` with the
row's ``tools`` (``dpo_trainer.py`` also accepts a JSON string ``tools``, TRL 1.16)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from schemas.trl import TrlDpoSchema
from trajectory_assets.exports.columns import DPO_LINEAGE, DPO_MEASURES, FIELDS, PAIR_LINEAGE, PAIR_SCORES
from trajectory_assets.exports.export import FLAVORS_GROUP, Export, ReadBack
from trajectory_assets.exports.families.dpo import PairItem
from trajectory_assets.exports.template import MESSAGES_TYPE, TOOLS_TYPE, from_template, tools_from_template

SCHEMA = pa.schema([("prompt", MESSAGES_TYPE), ("chosen", MESSAGES_TYPE), ("rejected", MESSAGES_TYPE),
                    *PAIR_SCORES, ("tools", TOOLS_TYPE), *PAIR_LINEAGE])


def render(item: PairItem) -> dict[str, Any]:
    # tools always present (null without tools), so the column has one type
    return {**item.record(*item.template_parts, item.tools), "tools": item.tools}


def read_back(row: Mapping[str, Any]) -> ReadBack:
    return ReadBack(messages=from_template(row["prompt"]), tools=tools_from_template(row.get("tools")),
                    chosen=from_template(row["chosen"]), rejected=from_template(row["rejected"]))


EXPORT = Export(
    name="trl_dpo", family="dpo", render=render, read_back=read_back, contract=TrlDpoSchema, arrow_schema=SCHEMA,
    lineage=DPO_LINEAGE, fields=FIELDS,
    description="TRL explicit-prompt conversational preferences `{prompt, chosen, rejected}` plus `tools` "
                "(`trl.DPOTrainer`).",
    group=FLAVORS_GROUP, file_format="parquet", measures=DPO_MEASURES,
)
