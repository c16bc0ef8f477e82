"""``sft_hermes``: the SFT conversations rendered as Hermes Agent ShareGPT (``<think>``,
``<tool_call>``, ``<tool_response>`` markup and the function-calling system prompt), as the
Hermes seed describes it, and read back by the rules the Hermes source parses it with
(``sources/hermes.py``).

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

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from schemas.sft_hermes import SftHermesSchema
from trajectory_assets.chat.messages import results_in_call_order
from trajectory_assets.exports.columns import FIELDS, LINEAGE, SHAREGPT_TURNS
from trajectory_assets.exports.export import Export, ReadBack
from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.exports.template import arguments_object
from trajectory_assets.sources.hermes import SYSTEM_TEMPLATE, read_conversations
from trajectory_assets.sources.nemo_gym import HERMES_MARKUP_FLAG

SCHEMA = pa.schema([("conversations", SHAREGPT_TURNS), *LINEAGE])

def render_hermes(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, str]]:
    """Canonical messages -> Hermes ShareGPT turns, normalized as the seed describes."""
    if not results_in_call_order(messages):
        raise Unrepresentable("tool_results_out_of_order", "Hermes pairs responses with calls by position and name")
    hermes_tools = [
        {"name": t["function"]["name"], "description": t["function"].get("description", ""),
         "parameters": t["function"].get("parameters", {}), "required": None}
        for t in tools or []
    ]
    system = SYSTEM_TEMPLATE.format(tools=json.dumps(hermes_tools, ensure_ascii=False))
    turns: list[dict[str, str]] = []
    own_system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    turns.append({"from": "system", "value": f"{own_system}\n\n{system}" if own_system else system})
    call_names: dict[str, str] = {}
    pending_responses: list[str] = []
    for message in messages[1:] if own_system else messages:
        role = message["role"]
        if role != "tool" and pending_responses:
            turns.append({"from": "tool", "value": "\n".join(pending_responses)})
            pending_responses = []
        if role == "user":
            turns.append({"from": "human", "value": _text(message["content"])})
        elif role == "assistant":
            turns.append({"from": "gpt", "value": _render_assistant(message, call_names)})
        elif role == "tool":
            content = _text(message["content"])
            # a JSON result is embedded as its value, as Hermes Agent writes tool responses
            parsed = _json_or_none(content) if content.lstrip()[:1] in ("{", "[") else None
            response = {"tool_call_id": message["tool_call_id"], "name": call_names.get(message["tool_call_id"], ""),
                        "content": parsed if parsed is not None else content}
            pending_responses.append(f"<tool_response>\n{json.dumps(response, ensure_ascii=False)}\n</tool_response>")
    if pending_responses:
        turns.append({"from": "tool", "value": "\n".join(pending_responses)})
    return turns


def _render_assistant(message: dict[str, Any], call_names: dict[str, str]) -> str:
    value = f"<think>\n{message.get('reasoning_content', '')}\n</think>\n" if message.get("reasoning_content") \
        else "<think>\n</think>\n"
    parts = [_text(message.get("content") or "")] if message.get("content") else []
    for call in message.get("tool_calls", []):
        call_names[call["id"]] = call["function"]["name"]
        body = {"name": call["function"]["name"], "arguments": arguments_object(call["function"])}
        parts.append(f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>")
    return value + "\n".join(parts)


def _text(content: Any) -> str:
    """Hermes values are text: a content with image (or other) parts has no Hermes form."""
    if isinstance(content, str):
        return content
    raise Unrepresentable("non_text_content", "a Hermes turn holds text only, not content parts")


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def render(item: SftItem) -> dict[str, Any]:
    row = item.row
    if HERMES_MARKUP_FLAG in row.quality_flags.split(","):
        raise Unrepresentable(HERMES_MARKUP_FLAG)
    return {"conversations": render_hermes(item.messages, item.tools), "trajectory_id": row.trajectory_id,
            "task_key": row.task_key}


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
