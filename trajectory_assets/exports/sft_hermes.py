"""``sft_hermes``: the SFT conversations rendered as Hermes Agent ShareGPT (``<think>``,
``<tool_call>``, ``<tool_response>`` markup and the function-calling system prompt), as the
Hermes seed describes it (``sources/hermes.py`` renders and parses the markup). A
conversation whose text already holds such tags is left out: rendered, they would parse
back as calls the model never made."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from schemas.sft_hermes import SftHermesSchema
from trajectory_assets.exports.columns import FIELDS, LINEAGE, SHAREGPT_TURNS
from trajectory_assets.exports.export import Export, ReadBack
from trajectory_assets.exports.families.frames import lineage_of
from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.sources.hermes import read_conversations, render_hermes
from trajectory_assets.sources.nemo_gym import HERMES_MARKUP_FLAG

SCHEMA = pa.schema([("conversations", SHAREGPT_TURNS), *LINEAGE])

FROM_LETTER = {"system": "s", "human": "h", "gpt": "g", "tool": "t"}


def render(item: SftItem) -> dict[str, Any]:
    row = item.row
    if HERMES_MARKUP_FLAG in row.quality_flags.split(","):
        raise Unrepresentable(HERMES_MARKUP_FLAG)
    conversations = render_hermes(item.messages, item.tools)
    record = {"conversations": conversations, "trajectory_id": row.trajectory_id, "task_key": row.task_key}
    return {
        **lineage_of(row),
        "from_shape": "".join(FROM_LETTER[turn["from"]] for turn in conversations),
        "record": record,
    }


def read_back(row: Mapping[str, Any]) -> ReadBack:
    """The ShareGPT turns parsed back by Hermes' own rules: the tools from the system
    prompt's ``<tools>`` block, reasoning from ``<think>``, calls from ``<tool_call>``, results
    from ``<tool_response>``."""
    messages, tools = read_conversations(row["conversations"])
    return ReadBack(messages=messages, tools=tools)


EXPORT = Export(
    "sft_hermes", "sft", render, read_back, SftHermesSchema, SCHEMA,
    {"conversations": ["messages", "tools"], "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]}, FIELDS,
    "The SFT conversations rendered as Hermes Agent ShareGPT (`<think>`, `<tool_call>`, `<tool_response>` markup "
    "and the function-calling system prompt).")
