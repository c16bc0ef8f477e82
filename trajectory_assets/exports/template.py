"""Chat messages as a chat template renders them, and their one Arrow type: what the
trainer flavors (TRL, NeMo RL, verl) hand to ``apply_chat_template``.

Two rules, both from how real templates read a message:

- ``content`` is always text (text-only trainers have no place for image parts);
- a tool call's ``arguments`` is a JSON **object**, not the JSON string of OpenAI's wire
  format. Qwen2.5's and the Llama 3.1/3.2 tool templates write ``arguments | tojson``, which
  turns a string into a quoted, escaped one: a model trained on that learns to emit
  double-encoded calls. TRL's dataset docs and the transformers docs give arguments as
  objects; Qwen3's template accepts both.

Arguments differ in shape from call to call, so their Arrow type is JSON (``pa.json_()``,
which HF ``datasets`` loads as its ``Json`` feature: the objects come back as written). Every
other field keeps one concrete type, so train and validation share one schema.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.io.arrow_rows import JSON

TOOLS_TYPE = pa.list_(JSON)  # one JSON object per tool, as TRL's docs declare them: List(Json())
TOOL_CALL_TYPE = pa.struct([
    ("id", pa.string()),
    ("type", pa.string()),
    ("function", pa.struct([("name", pa.string()), ("arguments", JSON)])),
])
MESSAGE_TYPE = pa.struct([
    ("role", pa.string()),
    ("content", pa.string()),
    ("reasoning_content", pa.string()),
    ("tool_calls", pa.list_(TOOL_CALL_TYPE)),
    ("tool_call_id", pa.string()),
])
MESSAGES_TYPE = pa.list_(MESSAGE_TYPE)


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages in the form a chat template renders right: text content, argument
    objects. A conversation with image parts, or with a call whose arguments are not a JSON
    object, has no such form and is unrepresentable as a whole."""
    converted = []
    for message in messages:
        content = message.get("content")
        if content is None:
            content = ""  # an assistant turn that only calls tools
        if not isinstance(content, str):
            raise Unrepresentable("non_text_content", f"{message.get('role')} message with content parts")
        out: dict[str, Any] = {"role": message["role"], "content": content}
        if message.get("reasoning_content") is not None:
            out["reasoning_content"] = message["reasoning_content"]
        if message.get("tool_calls"):
            out["tool_calls"] = [_template_call(call) for call in message["tool_calls"]]
        if message.get("tool_call_id") is not None:
            out["tool_call_id"] = message["tool_call_id"]
        converted.append(out)
    return converted


def arguments_object(function: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as the JSON object they encode (unrepresentable if they encode none)."""
    raw = function.get("arguments")
    if isinstance(raw, dict):
        return raw
    try:
        arguments = orjson.loads(raw) if isinstance(raw, (str, bytes)) else None
    except orjson.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        raise Unrepresentable("unparseable_tool_arguments", f"arguments of {function.get('name')!r} are not a JSON "
                                                            "object")
    return arguments


def _template_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    return {"id": call.get("id"), "type": call.get("type", "function"),
            "function": {"name": function.get("name"), "arguments": arguments_object(function)}}


def json_value(value: Any) -> Any:
    """A JSON field as a reader of the file gets it, decoded: Parquet hands a JSON-typed
    value back as its text, a JSON-lines reader as the value itself.

    >>> json_value('{"city": "Oslo"}'), json_value({"city": "Oslo"}), json_value(None)
    ({'city': 'Oslo'}, {'city': 'Oslo'}, None)
    """
    return orjson.loads(value) if isinstance(value, (str, bytes)) else value


def from_template(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Template-form messages (as written, or as Parquet reads them back with every struct
    key present) -> canonical chat: keys that hold null dropped, arguments objects as the
    JSON strings of OpenAI's wire format.

    >>> from_template([{"role": "assistant", "content": "", "reasoning_content": None, "tool_call_id": None,
    ...     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"q":1}'}}]}])
    [{'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c1', 'type': 'function', \
'function': {'name': 'w', 'arguments': '{"q":1}'}}]}]
    """
    canonical = []
    for message in messages:
        out = {key: value for key, value in message.items() if value is not None and key != "tool_calls"}
        if message.get("tool_calls"):
            out["tool_calls"] = [
                {"id": call.get("id"), "type": call.get("type") or "function",
                 "function": {"name": call["function"]["name"],
                              "arguments": orjson.dumps(json_value(call["function"]["arguments"])).decode()}}
                for call in message["tool_calls"]]
        canonical.append(out)
    return canonical


def tools_from_template(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    """A template-form ``tools`` column (each tool a JSON value) as tool objects."""
    return None if tools is None else [json_value(tool) for tool in tools]
