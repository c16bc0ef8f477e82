"""``sft_hermes``: the SFT conversations rendered as Hermes Agent ShareGPT (``<think>``,
``<tool_call>``, ``<tool_response>`` markup and the function-calling system prompt), as the
Hermes seed describes it, and read back by the rules the Hermes source parses it with: both
are the Hermes markup's codec (``chat/hermes_markup.py``); this module decides what it may write.

Left out, never written lossily: a conversation whose text already holds such tags
(rendered, they would parse back as calls the model never made), one with content parts
(images: Hermes values are text), one with tool-call arguments that are not a JSON object,
one whose tool results come in another order than the calls (Hermes pairs a response with
the open call of its tool's name, first made first answered).
Hermes' own reading strips the whitespace around its tags, and a tool's JSON result is
embedded as its value (as Hermes Agent writes it), so both read back as the same values,
not the same characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import pyarrow as pa

from schemas.sft_hermes import SftHermesSchema
from trajectory_assets.chat.hermes_markup import (
    HERMES_MARKUP_FLAG,
    function_calling_prompt,
    read_conversations,
    write_conversation,
)
from trajectory_assets.chat.messages import results_in_call_order
from trajectory_assets.exports.columns import FIELDS, LINEAGE, SHAREGPT_TURNS
from trajectory_assets.exports.export import Export, ReadBack
from trajectory_assets.exports.families.frames import loads_or_none
from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.exports.template import arguments_object

SCHEMA = pa.schema([("conversations", SHAREGPT_TURNS), *LINEAGE])


def render_hermes(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                  prompt: str | None = None) -> list[dict[str, str]]:
    """Canonical messages -> Hermes ShareGPT turns (``chat.hermes_markup``), or
    :class:`Unrepresentable` for a conversation Hermes markup cannot hold. ``prompt``: the
    tools' function-calling prompt, when the caller has it (:func:`tools_prompt`)."""
    if not results_in_call_order(messages):
        raise Unrepresentable("tool_results_out_of_order", "Hermes pairs responses with calls by position and name")
    for message in messages:  # in the order the turns are written: the first refusal is the one counted
        if message["role"] in ("user", "tool"):
            _text(message["content"])
        elif message["role"] == "assistant":
            if message.get("content"):
                _text(message["content"])
            for call in message.get("tool_calls", []):
                arguments_object(call["function"])
    return write_conversation(messages, function_calling_prompt(tools) if prompt is None else prompt)


@lru_cache(maxsize=256)
def tools_prompt(tools_json: str | None) -> str:
    """The function-calling prompt of a trajectory's tools (their stored JSON text), made once
    per tool set: a dataset offers few (13 distinct in the 1 GB benchmark corpus's 44,616 rows),
    and formatting the prompt of each row was a third of this export's CPU."""
    return function_calling_prompt(loads_or_none(tools_json))


def _text(content: Any) -> str:
    """Hermes values are text: a content with image (or other) parts has no Hermes form."""
    if isinstance(content, str):
        return content
    raise Unrepresentable("non_text_content", "a Hermes turn holds text only, not content parts")


def render(item: SftItem) -> dict[str, Any]:
    row = item.row
    if HERMES_MARKUP_FLAG in row.quality_flags.split(","):
        raise Unrepresentable(HERMES_MARKUP_FLAG)
    return {"conversations": render_hermes(item.messages, item.tools, tools_prompt(row.tools)),
            "trajectory_id": row.trajectory_id, "task_key": row.task_key}


def read_back(row: Mapping[str, Any]) -> ReadBack:
    """The ShareGPT turns parsed back by Hermes' own rules: the tools from the system
    prompt's ``<tools>`` block, reasoning from ``<think>``, calls from ``<tool_call>``, results
    from ``<tool_response>``."""
    messages, tools = read_conversations(row["conversations"])
    return ReadBack(messages=messages, tools=tools)


EXPORT = Export(
    name="sft_hermes", family="sft", render=render, read_back=read_back, contract=SftHermesSchema,
    arrow_schema=SCHEMA,
    lineage={"conversations": ["messages", "tools"], "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
    fields=FIELDS,
    description="The SFT conversations rendered as Hermes Agent ShareGPT (`<think>`, `<tool_call>`, "
                "`<tool_response>` markup and the function-calling system prompt).",
)
