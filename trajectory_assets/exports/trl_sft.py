"""``trl_sft``: TRL conversational SFT, ``messages`` (tool-call arguments as JSON objects)
plus ``tools``, for ``trl.SFTTrainer``. Written as Parquet, so train and validation share one
schema.

TRL applies the tokenizer's chat template to ``messages`` with the row's ``tools``. Messages
carry tool-call arguments as JSON objects and ``tools`` is a list of JSON objects, both of
Arrow type JSON: ``datasets`` loads them as its ``Json`` feature, as TRL's dataset docs
declare them (``docs/source/dataset_formats.md``, "Tool Calling"), and TRL passes them to the
template as they are (``sft_trainer.py`` also accepts a JSON string ``tools``, TRL 1.16).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from schemas.trl import TrlSftSchema
from trajectory_assets.exports.columns import FIELDS, SFT_COLUMNS, SFT_LINEAGE
from trajectory_assets.exports.export import FLAVORS_GROUP, Export, ReadBack
from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.exports.training_switch import GlobalSwitch
from trajectory_assets.exports.template import MESSAGES_TYPE, TOOLS_TYPE, from_template, tools_from_template

SCHEMA = pa.schema([("messages", MESSAGES_TYPE), ("tools", TOOLS_TYPE), *SFT_COLUMNS])


SWITCH = GlobalSwitch("TRL", "`SFTConfig(assistant_only_loss=True)` (with a chat template that marks the "
                                "assistant's turns with `{% generation %}`, or one TRL can patch)")


def render(item: SftItem) -> dict[str, Any]:
    SWITCH.require(item)
    return item.template_record


def read_back(row: Mapping[str, Any]) -> ReadBack:
    return ReadBack(messages=from_template(row["messages"]), tools=tools_from_template(row.get("tools")))


EXPORT = Export(
    name="trl_sft", family="sft", render=render, read_back=read_back, contract=TrlSftSchema, arrow_schema=SCHEMA,
    lineage=SFT_LINEAGE, fields=FIELDS,
    description="TRL conversational SFT: `messages` (tool-call arguments as JSON objects) plus `tools` "
                "(`trl.SFTTrainer`).",
    group=FLAVORS_GROUP, file_format="parquet", measures=("reward",), training_setting=SWITCH.setting,
)
