"""NeMo Gym rollout rows (``ng_collect_rollouts`` / ``gym eval run``) -> canonical trajectories.

Real rows differ from the seed spec (see ``shared/FORMATS.md``); this module accepts:
output in ``response.output`` or legacy top-level ``output``; request input as a string or
a list of items with or without ``type``; Responses-API output items ``message``,
``reasoning``, ``function_call`` and ``function_call_output``. Unknown item types and
unknown content part types (e.g. ``input_file``) are kept whole in
``metadata["unknown_items"]`` (with ``where`` and ``type``) and counted in
``unknown_items``, never fatal; an unknown part is left out of the converted content (a
message left with no part at all gets empty content, like ``content: []``). Anything else
structurally wrong raises :class:`Rejection` with a reason code.

Quality flags (``QUALITY_FLAGS``), never fatal: ``unparseable_tool_call`` when a
``function_call``'s ``arguments`` string is not JSON (kept as is), and
``hermes_markup_in_content`` when text that the Hermes rendering writes (message content,
reasoning, tool-call arguments, tool output) holds a literal Hermes tag, which would turn
into spurious structure if the conversation were rendered to Hermes and parsed again.
"""

from __future__ import annotations

import json
import math
from typing import Any

from trajectory_assets.formats.chat import prompt_key
from trajectory_assets.formats.jsonutil import canonical, dumps, sha256_hex
from trajectory_assets.formats.trajectory import Rejection, Trajectory

SOURCE_FORMAT = "nemo_gym"

# Top-level keys with a meaning of their own; every other key is a verifier extra and is
# kept verbatim in the trajectory's metadata.
KNOWN_KEYS = frozenset(
    {
        "responses_create_params",
        "response",
        "output",
        "reward",
        "reward_components",
        "_ng_task_index",
        "_ng_rollout_index",
        "agent_ref",
        "mask_sample",
        "task_type",
    }
)
TEXT_PART_TYPES = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
# parts whose type is known: one without its payload is broken structure, not an unknown part
KNOWN_PART_TYPES = TEXT_PART_TYPES | {"refusal", "input_image"}
ROLE_MAP = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
FINISHED_STATUSES = frozenset({None, "completed"})
# literal <think>/<tool_call>/<tool_response> tags in the text: a Hermes rendering of it
# would parse back into calls the model never made
HERMES_MARKUP_FLAG = "hermes_markup_in_content"
QUALITY_FLAGS = (
    "unparseable_tool_call",  # a function_call whose arguments string is not JSON
    HERMES_MARKUP_FLAG,
)
HERMES_TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


def looks_like_rollout(record: dict[str, Any]) -> bool:
    return "responses_create_params" in record and ("response" in record or "output" in record)


def convert_rollout(record: dict[str, Any], *, source_id: str) -> Trajectory:
    """Convert one parsed rollout row. ``source_id`` scopes ``_ng_task_index``."""
    if not looks_like_rollout(record):
        raise Rejection(
            "not_a_rollout",
            "no responses_create_params with response.output or output; keys: "
            + ", ".join(sorted(record)[:12]),
        )
    request = _expect(record["responses_create_params"], dict, "responses_create_params")
    response = record.get("response")
    if response is not None:
        response = _expect(response, dict, "response")
        output = response.get("output")
    else:
        output = record.get("output")
    output = _expect(output, list, "output")

    reward = _reward(record)
    builder = _ChatBuilder()
    instructions = request.get("instructions")
    if instructions is not None:
        builder.system(_expect(instructions, str, "responses_create_params.instructions"))
    raw_input = request.get("input")
    if isinstance(raw_input, str):
        builder.add("user", raw_input)
    elif isinstance(raw_input, list):
        builder.add_items(raw_input, "responses_create_params.input")
    else:
        raise Rejection("invalid_structure", "responses_create_params.input is neither a string nor a list")
    builder.close_assistant()
    prompt_length = len(builder.messages)
    if not any(m["role"] == "user" for m in builder.messages):
        raise Rejection("no_prompt", "the request input holds no user message")

    builder.add_items(output, "output")
    if prompt_length == len(builder.messages) or not any(
        m["role"] == "assistant" for m in builder.messages[prompt_length:]
    ):
        raise Rejection("no_model_output", "the model produced no assistant turn (empty output)")

    tools, unconverted_tools = convert_tools(request.get("tools"))
    prompt = builder.messages[:prompt_length]
    task_index = _optional_int(record.get("_ng_task_index"), "_ng_task_index")
    task_key = task_key_for(source_id, task_index, prompt, tools)

    metadata = {key: value for key, value in record.items() if key not in KNOWN_KEYS}
    if builder.unknown:
        metadata["unknown_items"] = builder.unknown
    flags = set(builder.flags)
    if any(_has_hermes_markup(message) for message in builder.messages):
        flags.add(HERMES_MARKUP_FLAG)
    if unconverted_tools:
        metadata["unconverted_tools"] = unconverted_tools
    if "agent_ref" in record:
        metadata["agent_ref"] = record["agent_ref"]
    status = response.get("status") if response is not None else None
    usage = response.get("usage") if response is not None else None
    model = (response or {}).get("model") or request.get("model")

    return Trajectory(
        source_format=SOURCE_FORMAT,
        messages=builder.messages,
        prompt_length=prompt_length,
        task_key=task_key,
        tools=tools,
        reward=reward,
        reward_components=_optional_dict(record.get("reward_components"), "reward_components"),
        task_index=task_index,
        rollout_index=_optional_int(record.get("_ng_rollout_index"), "_ng_rollout_index"),
        agent_name=agent_name(record.get("agent_ref")),
        model=model if isinstance(model, str) and model else None,
        task_type=_task_type(record),
        completed=status in FINISHED_STATUSES,
        status=status if isinstance(status, str) else None,
        mask_sample=record.get("mask_sample") is True,
        input_tokens=_usage(usage, "input_tokens", "prompt_tokens"),
        output_tokens=_usage(usage, "output_tokens", "completion_tokens"),
        total_tokens=_usage(usage, "total_tokens"),
        unknown_items=len(builder.unknown),
        request=request,
        quality_flags=sorted(flags),
        metadata=metadata,
    )


def task_key_for(
    source_id: str, task_index: int | None, prompt: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> str:
    """Stable across processes and machines (never Python's ``hash()``).

    The collector's ``_ng_task_index`` only means something inside one collection, so it is
    scoped to its source; without it the task is the content of the prompt and tools.
    """
    if task_index is None:
        return prompt_key(prompt, tools)
    return sha256_hex(canonical(["nemo_gym_task_index", source_id, task_index]))[:24]


def agent_name(agent_ref: Any) -> str | None:
    if isinstance(agent_ref, dict):
        name = agent_ref.get("name")
        return name if isinstance(name, str) and name else None
    if isinstance(agent_ref, str) and agent_ref:
        return agent_ref
    return None


def convert_tools(tools: Any) -> tuple[list[dict[str, Any]] | None, list[Any]]:
    """Responses-shape tools -> Chat Completions tools. Returns (converted, unconverted)."""
    if tools is None:
        return None, []
    if not isinstance(tools, list):
        raise Rejection("invalid_structure", "responses_create_params.tools is not a list")
    converted: list[dict[str, Any]] = []
    unconverted: list[Any] = []
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            converted.append({"type": "function", "function": tool["function"]})
        elif isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("name"), str):
            function = {"name": tool["name"]}
            for key in ("description", "parameters", "strict"):
                if tool.get(key) is not None:
                    function[key] = tool[key]
            converted.append({"type": "function", "function": function})
        else:
            # built-in tools (web search, MCP, computer use) have no Chat Completions form
            unconverted.append(tool)
    return (converted or None), unconverted


class _ChatBuilder:
    """Folds a stream of Responses-API items into Chat Completions messages.

    Reasoning, text and function calls of one model turn become one assistant message;
    a tool result, user or system message closes it.
    """

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.unknown: list[dict[str, Any]] = []  # whole unknown items and content parts, with where/type
        self.flags: set[str] = set()
        self._open: dict[str, Any] | None = None  # the assistant message still being built
        self._calls_seen: set[str] = set()
        self._unanswered: list[str] = []

    def close_assistant(self) -> None:
        self._open = None

    def system(self, text: str) -> None:
        if any(m["role"] != "system" for m in self.messages):
            raise Rejection("misplaced_system_message", "a system/developer message follows other turns")
        if self.messages:  # several leading system/developer messages merge into one
            self.messages[0]["content"] = _join_text(self.messages[0]["content"], text)
        else:
            self.messages.append({"role": "system", "content": text})

    def add(self, role: str, content: Any) -> None:
        if role == "assistant":
            self._assistant(content=content)
            return
        self.close_assistant()
        if role == "system":
            self.system(content if isinstance(content, str) else _text_only(content))
        else:
            self.messages.append({"role": role, "content": content})

    def add_items(self, items: list[Any], where: str) -> None:
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                raise Rejection("invalid_structure", f"{where}[{position}] is not an object")
            self._add_item(item, f"{where}[{position}]")

    def _add_item(self, item: dict[str, Any], where: str) -> None:
        item_type = item.get("type")
        if item_type in (None, "message"):
            raw_role = item.get("role")
            role = ROLE_MAP.get(raw_role) if isinstance(raw_role, str) else None
            if role is None:
                raise Rejection("unknown_role", f"{where} has role {raw_role!r}")
            self.add(role, content_of(item.get("content"), where, self.unknown))
        elif item_type == "reasoning":
            text = reasoning_text(item)
            if text:
                self._assistant(reasoning=text)
        elif item_type == "function_call":
            self._tool_call(item, where)
        elif item_type == "function_call_output":
            self._tool_result(item, where)
        else:
            self.unknown.append({"where": where, "type": item_type, "item": item})

    def _assistant(self, *, content: Any = None, reasoning: str | None = None) -> dict[str, Any]:
        current = self._open
        starts_new_turn = current is None or (
            # reasoning precedes what it explains; a second text is a second message
            (reasoning is not None and (current["content"] or current.get("tool_calls")))
            or (content is not None and current["content"])
        )
        if starts_new_turn:
            current = {"role": "assistant", "content": ""}
            self.messages.append(current)
            self._open = current
        if content is not None:
            current["content"] = content
        if reasoning is not None:
            previous = current.get("reasoning_content")
            current["reasoning_content"] = f"{previous}\n\n{reasoning}" if previous else reasoning
        return current

    def _tool_call(self, item: dict[str, Any], where: str) -> None:
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise Rejection("invalid_structure", f"{where} is a function_call without a name")
        call_id = item.get("call_id") or item.get("id") or f"call_{len(self._calls_seen)}"
        if not isinstance(call_id, str):
            raise Rejection("invalid_structure", f"{where} has a non-string call_id")
        arguments = item.get("arguments")
        if arguments is None:
            arguments = "{}"
        elif not isinstance(arguments, str):
            arguments = dumps(arguments).decode()  # trainers expect one type: a JSON string
        elif not _parses_as_json(arguments):
            self.flags.add("unparseable_tool_call")  # kept as is, flagged for filters
        current = self._open or self._assistant()
        current.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )
        self._calls_seen.add(call_id)
        self._unanswered.append(call_id)

    def _tool_result(self, item: dict[str, Any], where: str) -> None:
        call_id = item.get("call_id")
        if call_id is None and self._unanswered:
            call_id = self._unanswered[0]  # no id given: answer calls in order
        if call_id not in self._calls_seen:
            raise Rejection("orphan_tool_output", f"{where} answers call {call_id!r}, which was never made")
        if call_id in self._unanswered:
            self._unanswered.remove(call_id)
        output = item.get("output")
        if isinstance(output, (dict, int, float, bool)):
            content: Any = dumps(output).decode()
        else:
            content = content_of(output, where, self.unknown)
        self.close_assistant()
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})


def content_of(value: Any, where: str, unknown: list[dict[str, Any]] | None = None) -> Any:
    """Responses content (string or parts) -> Chat content: a string, or a list of parts
    when images are present (text parts are joined with newlines).

    A part of an unknown type is left out and kept whole in ``unknown`` (rejected when no
    list is given)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise Rejection("invalid_structure", f"{where}.content is neither a string nor a list")
    parts: list[dict[str, Any]] = []
    for position, part in enumerate(value):
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
            continue
        if not isinstance(part, dict):
            raise Rejection("invalid_structure", f"{where}.content holds a {type(part).__name__}")
        part_type = part.get("type")
        if part_type in TEXT_PART_TYPES and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif part_type == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif part_type == "input_image":
            url = part.get("image_url") or part.get("file_id") or ""
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif part_type in KNOWN_PART_TYPES or unknown is None:
            raise Rejection("invalid_structure", f"{where}.content has an unsupported part {part_type!r}")
        else:
            unknown.append({"where": f"{where}.content[{position}]", "type": part_type, "part": part})
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def reasoning_text(item: dict[str, Any]) -> str:
    """Readable reasoning of a ``reasoning`` item: its summary, else its content."""
    for key in ("summary", "content"):
        pieces = item.get(key)
        if isinstance(pieces, list):
            texts = [p["text"] for p in pieces if isinstance(p, dict) and isinstance(p.get("text"), str)]
            if any(texts):
                return "\n\n".join(t for t in texts if t)
    return ""


def _parses_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _has_hermes_markup(message: dict[str, Any]) -> bool:
    texts = [message.get("content"), message.get("reasoning_content")]
    texts += [call["function"]["arguments"] for call in message.get("tool_calls") or []]
    for text in texts:
        if isinstance(text, list):  # content parts
            text = "\n".join(p["text"] for p in text if isinstance(p, dict) and isinstance(p.get("text"), str))
        if isinstance(text, str) and "<" in text and any(tag in text for tag in HERMES_TAGS):
            return True
    return False


def _text_only(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return str(content)


def _join_text(first: str, second: str) -> str:
    return f"{first}\n\n{second}" if first and second else first or second


def _reward(record: dict[str, Any]) -> float:
    if "reward" not in record or record["reward"] is None:
        raise Rejection("missing_reward", "the rollout has no reward")
    value = record["reward"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Rejection("invalid_reward", f"reward is a {type(value).__name__}, not a number")
    value = float(value)
    if not math.isfinite(value):
        raise Rejection("non_finite_reward", f"reward is {value}")
    return value


def _usage(usage: Any, *keys: str) -> int | None:
    if not isinstance(usage, dict):
        return None
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _task_type(record: dict[str, Any]) -> str | None:
    """A top-level ``task_type``, else one in the free-form ``metadata``."""
    metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    for value in (record.get("task_type"), metadata.get("task_type")):
        if isinstance(value, str) and value:
            return value
    return None


def _optional_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Rejection("invalid_structure", f"{name} is a {type(value).__name__}, not an integer")
    return value


def _optional_dict(value: Any, name: str) -> dict[str, Any] | None:
    if value is None:
        return None
    return _expect(value, dict, name)


def _expect(value: Any, kind: type, name: str) -> Any:
    if not isinstance(value, kind):
        raise Rejection("invalid_structure", f"{name} is a {type(value).__name__}, expected {kind.__name__}")
    return value
