"""``axolotl``: Axolotl's ``chat_template`` dataset rows, ``{"messages", "tools"}`` with a
``train`` flag on every message: what ``sft.train_on`` makes a training target
(``chat/training.py``), so Axolotl trains exactly those messages whatever the rule.

Axolotl (``axolotl/prompt_strategies/chat_template.py``, 0.19.0) decides per message: the
field named by ``message_field_training`` wins over ``roles_to_train``, and a trained
message's span is everything the template renders from its fields (content, reasoning, tool
calls) plus its end-of-turn token with ``train_on_eos: turn``. Tool-call arguments may be
objects or JSON strings there; they are written as objects, the form chat templates render
right (``exports/template.py``). The dataset config that reads the folder:

    datasets:
      - path: <this folder>
        type: chat_template
        field_messages: messages
        message_field_training: train

(``tests/trainers`` tokenizes the rows with Axolotl's own strategy and checks that the
trained tokens are exactly those of the flagged messages.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from schemas.axolotl import AxolotlSchema
from trajectory_assets.exports.columns import FIELDS, SFT_COLUMNS, SFT_LINEAGE
from trajectory_assets.exports.export import FLAVORS_GROUP, Export, ReadBack
from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.exports.template import MESSAGE_TYPE, TOOLS_TYPE, from_template, tools_from_template
from trajectory_assets.exports.unrepresentable import Unrepresentable

TRAINED_MESSAGES_TYPE = pa.list_(pa.struct([*MESSAGE_TYPE, ("train", pa.bool_())]))
SCHEMA = pa.schema([("messages", TRAINED_MESSAGES_TYPE), ("tools", TOOLS_TYPE), *SFT_COLUMNS])
DATASET_CONFIG = {"type": "chat_template", "field_messages": "messages", "message_field_training": "train"}


def render(item: SftItem) -> dict[str, Any]:
    if not any(item.trained):
        raise Unrepresentable("nothing_to_train")  # e.g. the only assistant turn is the harness's
    record = item.template_record
    messages = [{**message, "train": trained} for message, trained in zip(record["messages"], item.trained)]
    return {**record, "messages": messages}


def read_back(row: Mapping[str, Any]) -> ReadBack:
    messages = [{key: value for key, value in message.items() if key != "train"} for message in row["messages"]]
    return ReadBack(messages=from_template(messages), tools=tools_from_template(row.get("tools")))


def training_setting(rule: str) -> str:
    return (f"`sft.train_on: {rule}`, carried per message: `train` is true on exactly the messages the rule "
            "picks (never on a turn the harness wrote). Read the folder with Axolotl's `type: chat_template`, "
            "`field_messages: messages`, `message_field_training: train`; a row with nothing to train was left "
            "out (`nothing_to_train`).")


EXPORT = Export(
    name="axolotl", family="sft", render=render, read_back=read_back, contract=AxolotlSchema, arrow_schema=SCHEMA,
    lineage=SFT_LINEAGE,
    fields={**FIELDS, "messages": "the conversation (arguments as JSON objects), each message with `train`: "
                                  "whether it is a training target under sft.train_on"},
    description="Axolotl `chat_template` rows: `messages` with a `train` flag per message "
                "(`message_field_training: train`) plus `tools`.",
    group=FLAVORS_GROUP, file_format="jsonl", measures=("reward",), training_setting=training_setting,
)
