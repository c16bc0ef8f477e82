"""``llama_factory``: LLaMA-Factory ShareGPT with ``system`` and ``tools`` columns,
registered in ``dataset_info.json`` beside the splits.

LLaMA-Factory's ShareGPT converter (``src/llamafactory/data/converter.py``,
``SharegptDatasetConverter``) reads ``{"conversations": [{"from", "value"}], "system",
"tools"}`` and drops any row whose turns do not alternate: even positions ``human`` or
``observation``, odd positions ``gpt`` or ``function_call``, an even number of turns.
A dropped row is silent there, so :func:`to_llama_factory` refuses such conversations
here with :class:`Unrepresentable` and the export can count them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson
import pyarrow as pa

from schemas.llama_factory import LlamaFactorySchema
from trajectory_assets.chat.messages import results_in_call_order
from trajectory_assets.exports.columns import FIELDS, SHAREGPT_TURNS
from trajectory_assets.exports.export import FLAVORS_GROUP, Export, ReadBack
from trajectory_assets.exports.families.frames import SPLITS
from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.exports.template import arguments_object
from trajectory_assets.exports.training_switch import GlobalSwitch
from trajectory_assets.exports.unrepresentable import Unrepresentable
from schemas.shapes import LLAMA_FACTORY_LETTER, TURN_SHAPE_PATTERN, turn_shape

# the separator LLaMA-Factory's own OpenAI converter puts between parallel tool results
# (its templates wrap the whole observation in one <tool_response> block)
TOOL_RESULT_JOINER = "\n</tool_response>\n<tool_response>\n"

# what datasets loads the JSON lines as (declared in the dataset card)
SCHEMA = pa.schema([
    ("conversations", SHAREGPT_TURNS),
    ("system", pa.string()),
    ("tools", pa.string()),
    ("trajectory_id", pa.string()),
    ("task_key", pa.string()),
])

# the column mapping and role tags of every dataset registered by dataset_info()
SHAREGPT_COLUMNS = {"messages": "conversations", "system": "system", "tools": "tools"}
SHAREGPT_TAGS = {
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "observation_tag": "observation",
    "function_tag": "function_call",
    "system_tag": "system",
}


def to_llama_factory(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """One ShareGPT row: ``{"conversations", "system", "tools"}`` (both columns strings)."""
    if not results_in_call_order(messages):
        raise Unrepresentable("tool_results_out_of_order", "ShareGPT pairs results with calls by position")
    system = ""
    body = messages
    if messages and messages[0].get("role") == "system":
        system = _text(messages[0].get("content"))
        body = messages[1:]

    conversations: list[dict[str, str]] = []
    tool_results: list[str] = []
    for message in body:
        role = message.get("role")
        if role != "tool" and tool_results:
            conversations.append(_observation(tool_results))
            tool_results = []
        if role == "user":
            conversations.append({"from": "human", "value": _text(message.get("content"))})
        elif role == "assistant":
            conversations.append(_assistant_turn(message))
        elif role == "tool":
            tool_results.append(_text(message.get("content")))
        elif role == "system":
            raise Unrepresentable("misplaced_system_message", "the system column holds only a leading system message")
        else:
            raise Unrepresentable("unknown_role", f"role {role!r} has no ShareGPT tag")
    if tool_results:
        conversations.append(_observation(tool_results))

    shape = turn_shape(conversations, LLAMA_FACTORY_LETTER)
    if not re.match(TURN_SHAPE_PATTERN, shape):
        raise Unrepresentable("breaks_turn_alternation", f"turn shape {shape!r} is not human/gpt alternation")
    return {"conversations": conversations, "system": system, "tools": _tools_column(tools)}


def dataset_info(name: str, splits: tuple[str, ...]) -> dict[str, Any]:
    """``dataset_info.json`` registering one dataset per split, named ``{name}_{split}``.

    A split is several files (``train-00000-of-00004.jsonl`` ...), and LLaMA-Factory's
    ``file_name`` is one file, or a folder whose every file it loads, in ``os.listdir``
    order (``data/loader.py``, ``_load_single_dataset``, at ff6d4d1): the export folder also
    holds the card and the manifest. So each split is registered as ``script_url: "."``,
    which it loads as ``load_dataset(<dataset_dir>/., split=<split>)``: ``datasets`` reads the
    folder's card, whose ``configs`` glob the split's files, in order.
    """
    return {
        f"{name}_{split}": {
            "script_url": ".",
            "split": split,
            "formatting": "sharegpt",
            "columns": dict(SHAREGPT_COLUMNS),
            "tags": dict(SHAREGPT_TAGS),
        }
        for split in splits
    }


def _assistant_turn(message: dict[str, Any]) -> dict[str, str]:
    calls = message.get("tool_calls") or []
    content = _text(message.get("content") or "")
    reasoning = message.get("reasoning_content") or ""
    # LLaMA-Factory's reasoning templates split <think> blocks off gpt values, and its
    # FunctionFormatter strips them before parsing a function_call value as JSON
    thought = f"<think>\n{reasoning}\n</think>\n\n" if reasoning else ""
    if not calls:
        return {"from": "gpt", "value": thought + content}
    if content.strip():
        raise Unrepresentable("text_with_tool_calls", "a ShareGPT turn is either text or function calls, not both")
    return {"from": "function_call", "value": thought + orjson.dumps([_call(call) for call in calls]).decode()}


def _call(call: dict[str, Any]) -> dict[str, Any]:
    """LLaMA-Factory's function_call item: arguments as an object, not a JSON string."""
    function = call.get("function") or {}
    return {"name": function.get("name"), "arguments": arguments_object(function)}


def _observation(results: list[str]) -> dict[str, str]:
    return {"from": "observation", "value": TOOL_RESULT_JOINER.join(results)}


def _tools_column(tools: list[dict[str, Any]] | None) -> str:
    """LLaMA-Factory's tool format: a JSON list of bare function objects.

    Its default tool formatter reads ``description`` and ``parameters.properties``
    unguarded, so missing ones are filled with empty values.
    """
    if not tools:
        return ""
    functions = []
    for tool in tools:
        function = tool.get("function", tool)
        functions.append({
            "name": function.get("name"),
            "description": function.get("description") or "",
            "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        })
    return orjson.dumps(functions).decode()


def _text(content: Any) -> str:
    """ShareGPT values are plain strings; image parts have no place in them."""
    if isinstance(content, str):
        return content
    raise Unrepresentable("non_text_content", "only string content (no image parts) can be a ShareGPT value")


# LLaMA-Factory learns the gpt and function_call turns, or with mask_history the last one only
# (src/llamafactory/data/processor/supervised.py)
SWITCH = GlobalSwitch("LLaMA-Factory", "the default (`train_on_prompt: false`, `mask_history: false`: every "
                                       "assistant turn)", "`mask_history: true`")


def render(item: SftItem) -> dict[str, Any]:
    SWITCH.require(item)
    row = item.row
    record = to_llama_factory(item.messages, item.tools)
    record.update(trajectory_id=row.trajectory_id, task_key=row.task_key)
    return record


def read_back(row: Mapping[str, Any]) -> ReadBack:
    """The turns as chat messages: the ``system`` column first, ``function_call`` turns as
    the assistant's calls (the arguments objects as JSON strings, ids ``call_<n>`` in order:
    ShareGPT has none) and each ``observation`` split back into the results of those calls.

    >>> read_back({"system": "", "tools": "", "conversations": [
    ...     {"from": "human", "value": "Weather?"},
    ...     {"from": "function_call", "value": '[{"name": "w", "arguments": {"city": "Oslo"}}]'},
    ...     {"from": "observation", "value": "rain"}, {"from": "gpt", "value": "Rain."}]}).messages[1:3]
    [{'role': 'assistant', 'content': None, 'tool_calls': [{'id': 'call_1', 'type': 'function', \
'function': {'name': 'w', 'arguments': '{"city":"Oslo"}'}}]}, {'role': 'tool', 'tool_call_id': 'call_1', 'content': 'rain'}]
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": row["system"]}] if row.get("system") else []
    open_calls: list[str] = []
    calls = 0
    for turn in row["conversations"]:
        speaker, value = turn["from"], turn["value"]
        reasoning, value = _split_thought(value) if speaker in ("gpt", "function_call") else (None, value)
        if speaker == "human":
            messages.append({"role": "user", "content": value})
        elif speaker == "gpt":
            messages.append({"role": "assistant", "content": value, **_reasoning(reasoning)})
        elif speaker == "function_call":
            tool_calls = []
            for call in orjson.loads(value):
                calls += 1
                tool_calls.append({"id": f"call_{calls}", "type": "function",
                                   "function": {"name": call["name"], "arguments": orjson.dumps(call["arguments"]).decode()}})
            open_calls = [call["id"] for call in tool_calls]
            messages.append({"role": "assistant", "content": None, **_reasoning(reasoning), "tool_calls": tool_calls})
        elif speaker == "observation":
            results = value.split(TOOL_RESULT_JOINER)
            ids = open_calls if len(open_calls) == len(results) else [None] * len(results)
            messages += [{"role": "tool", "tool_call_id": call_id, "content": result}
                         for call_id, result in zip(ids, results)]
            open_calls = []
    tools = [{"type": "function", "function": function} for function in orjson.loads(row["tools"])] \
        if row.get("tools") else None
    return ReadBack(messages=messages, tools=tools)


def _split_thought(value: str) -> tuple[str | None, str]:
    """(the reasoning of a leading ``<think>`` block, the rest), as ``_assistant_turn`` wrote them."""
    if value.startswith("<think>\n") and "\n</think>\n\n" in value:
        thought, rest = value[len("<think>\n"):].split("\n</think>\n\n", 1)
        return thought, rest
    return None, value


def _reasoning(reasoning: str | None) -> dict[str, str]:
    return {"reasoning_content": reasoning} if reasoning else {}


def _index(export: str) -> dict[str, bytes]:
    return {"dataset_info.json": orjson.dumps(dataset_info(f"trajectory_assets_{export}", SPLITS),
                                              option=orjson.OPT_INDENT_2)}


EXPORT = Export(
    name="llama_factory", family="sft", render=render, read_back=read_back, contract=LlamaFactorySchema,
    arrow_schema=SCHEMA,
    lineage={"conversations": ["messages"], "system": ["messages"], "tools": ["tools"],
             "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]},
    fields={**FIELDS, "system": "the system prompt",
            "tools": "the tools offered to the model, as LLaMA-Factory's JSON text of bare function objects "
                     "(empty: none)"},
    description="LLaMA-Factory ShareGPT with `system` and `tools` columns, registered in `dataset_info.json`.",
    group=FLAVORS_GROUP, index_files=_index, training_setting=SWITCH.setting,
)
