"""Chat messages with text content only, and their one Arrow type: what text-only trainers
(TRL, verl) read.

HF ``datasets`` infers one Arrow type per column and falls back to an opaque JSON type when
rows disagree; Parquet needs one schema for all rows. So every value that varies in shape is
a string here: ``content`` is always text, tool-call ``arguments`` stay the JSON string of
Chat Completions, and the trainer exports write ``tools`` as one JSON string. The exports
are written as Parquet with :data:`MESSAGE_TYPE`, so a key absent from every row of one
split still has the same type as in the other.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from trajectory_assets.formats.unrepresentable import Unrepresentable

TOOL_CALL_TYPE = pa.struct([
    ("id", pa.string()),
    ("type", pa.string()),
    ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
])
MESSAGE_TYPE = pa.struct([
    ("role", pa.string()),
    ("content", pa.string()),
    ("reasoning_content", pa.string()),
    ("tool_calls", pa.list_(TOOL_CALL_TYPE)),
    ("tool_call_id", pa.string()),
])
MESSAGES_TYPE = pa.list_(MESSAGE_TYPE)
OPTIONAL_KEYS = ("reasoning_content", "tool_calls", "tool_call_id")


def text_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages whose content is text; a message with image or other non-text parts has no
    form for a text-only trainer and makes the whole conversation unrepresentable."""
    converted = []
    for message in messages:
        content = message.get("content")
        if content is None:
            content = ""  # an assistant turn that only calls tools
        if not isinstance(content, str):
            raise Unrepresentable("non_text_content", f"{message.get('role')} message with content parts")
        out: dict[str, Any] = {"role": message["role"], "content": content}
        for key in OPTIONAL_KEYS:
            if message.get(key) is not None:
                out[key] = message[key]
        converted.append(out)
    return converted


def value_types(messages: list[dict[str, Any]]) -> str:
    """The Python types of every ``content`` and tool-call ``arguments`` value, sorted and
    comma-joined: "str" when Arrow will see one type. The contracts check this column."""
    types = {type(message.get("content")).__name__ for message in messages}
    types |= {
        type(call.get("function", {}).get("arguments")).__name__
        for message in messages
        for call in message.get("tool_calls") or []
    }
    return ",".join(sorted(types))
