"""The parts every source builds its chat from, so each rule is written once.

A source reads its own records (ShareGPT turns, Responses items, ATIF steps) and hands the
pieces to a :class:`ChatBuilder`, which holds the canonical messages, the quality flags, what
is kept in metadata and the token data. The rules it applies are the ones every source
shares:

- **flag and keep**: a shape with no place in the chat is kept in metadata under a key and
  the trajectory is flagged, never dropped and never fatal (:meth:`ChatBuilder.keep`);
- **the system message**: leading system messages merge into one, paragraphs apart; a
  system message after other turns is the source's call (:meth:`ChatBuilder.add_system`);
- **calls**: one id per call in a chat (a reused id gets a suffix), arguments as a JSON
  string (text that is not JSON is kept as written and flagged);
- **content parts**: text parts joined with newlines, or the list of parts when an image
  is among them (:func:`content_from_parts`);
- **token data**: one model call's token ids and log probs, checked (:func:`token_call`).

>>> chat = ChatBuilder()
>>> chat.add_system("Be brief."), chat.add_system("Answer in French.")
(True, True)
>>> chat.append({"role": "user", "content": "2+2?"})
>>> call = chat.function_call(chat.unique_call_id("c1"), "add", {"a": 2, "b": 2})
>>> chat.append(assistant_message("", paragraphs(["add them", ""]), [call]))
>>> chat.add_system("late"), chat.messages[0]
(False, {'role': 'system', 'content': 'Be brief.\\n\\nAnswer in French.'})
>>> chat.messages[2]
{'role': 'assistant', 'content': '', 'reasoning_content': 'add them', 'tool_calls': [{'id': 'c1', 'type': 'function', 'function': {'name': 'add', 'arguments': '{"a":2,"b":2}'}}]}
>>> chat.unique_call_id("c1"), chat.arguments_text("{oops"), sorted(chat.flags)
('c1_2', '{oops', ['unparseable_tool_call'])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trajectory_assets.chat.token_data import are_log_probs, are_token_ids
from trajectory_assets.jsonutil import dumps, parses_as_json


class ChatBuilder:
    """The chat a source builds: messages, quality flags, what is kept in metadata, token data.

    ``origins`` holds, per message, where in the source it began, for a source that asks
    (``None`` otherwise)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.origins: list[Any] = []
        self.flags: set[str] = set()
        self.kept: dict[str, list[dict[str, Any]]] = {}  # what has no place in the chat, by metadata key
        self.token_data: list[dict[str, Any]] = []  # per model call, with the index of its message
        self._call_ids: set[str] = set()  # every call id the messages hold

    def append(self, message: dict[str, Any], origin: Any = None) -> None:
        self.messages.append(message)
        self.origins.append(origin)

    def keep(self, flag: str, key: str, entry: dict[str, Any]) -> None:
        """Flag the trajectory and keep what has no place in the chat in its metadata.

        >>> chat = ChatBuilder()
        >>> chat.keep("late_tool_response", "late_tool_responses", {"tool_call_id": "c1"})
        >>> chat.flags, chat.kept
        ({'late_tool_response'}, {'late_tool_responses': [{'tool_call_id': 'c1'}]})
        """
        self.flags.add(flag)
        self.kept.setdefault(key, []).append(entry)

    def add_system(self, text: str, origin: Any = None) -> bool:
        """Adds a system message's text: leading system messages merge into one (their texts
        paragraphs apart, as chat templates accept one system message, first). Returns False,
        adding nothing, when other turns came first: the source decides what that is."""
        if any(message["role"] != "system" for message in self.messages):
            return False
        if self.messages:
            self.messages[0]["content"] = paragraphs([self.messages[0]["content"], text])
        else:
            self.append({"role": "system", "content": text}, origin)
        return True

    def unique_call_id(self, call_id: str) -> str:
        """The id a call gets in the messages: its own, or with a suffix (``_2``, ``_3``, ...)
        when an earlier call holds it (agents reuse ids: a chat holds one call per id)."""
        if call_id in self._call_ids:
            call_id = next(f"{call_id}_{n}" for n in range(2, len(self._call_ids) + 3)
                           if f"{call_id}_{n}" not in self._call_ids)
        self._call_ids.add(call_id)
        return call_id

    def arguments_text(self, arguments: Any) -> str:
        """A call's arguments as the JSON string trainers expect; a string that is not JSON is
        kept as written and flagged ``unparseable_tool_call``."""
        if not isinstance(arguments, str):
            return dumps(arguments).decode()
        if not parses_as_json(arguments):
            self.flags.add("unparseable_tool_call")
        return arguments

    def function_call(self, call_id: str, name: str, arguments: Any) -> dict[str, Any]:
        """A canonical tool call (``arguments`` through :meth:`arguments_text`)."""
        return {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": self.arguments_text(arguments)}}

    def checked_tokens(self, where: str, prompt: Any, generation: Any, log_probs: Any) -> dict[str, Any] | None:
        """A model call's token data as :func:`token_call` checks it; when it is malformed,
        None, and what was recorded is kept (``malformed_token_data``, flagged).

        >>> chat = ChatBuilder()
        >>> chat.checked_tokens("output[1]", [1], [2], [-0.5])
        {'prompt_token_ids': [1], 'generation_token_ids': [2], 'generation_log_probs': [-0.5]}
        >>> chat.checked_tokens("output[3]", [1], [2], None), chat.kept["malformed_token_data"][0]["where"]
        (None, 'output[3]')
        """
        call = token_call(prompt, generation, log_probs)
        if call is None:
            self.keep("malformed_token_data", "malformed_token_data",
                      {"where": where, "prompt_token_ids": prompt, "generation_token_ids": generation,
                       "generation_log_probs": log_probs})
        return call

def paragraphs(texts: Iterable[str]) -> str:
    """The non-empty texts, a blank line apart (reasoning pieces, merged system messages).

    >>> paragraphs(["a", "", "b"]), paragraphs(["", ""])
    ('a\\n\\nb', '')
    """
    return "\n\n".join(text for text in texts if text)


def assistant_message(content: Any, reasoning: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A canonical assistant message: ``reasoning_content`` and ``tool_calls`` only when there are any.

    >>> assistant_message("Hi", "", [])
    {'role': 'assistant', 'content': 'Hi'}
    """
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def content_from_parts(parts: list[dict[str, Any]]) -> Any:
    """Chat content from canonical parts: their texts joined with newlines, or the parts
    themselves when an image is among them.

    >>> content_from_parts([text_part("a"), text_part("b")])
    'a\\nb'
    >>> content_from_parts([text_part("a"), image_part("x.png")])
    [{'type': 'text', 'text': 'a'}, {'type': 'image_url', 'image_url': {'url': 'x.png'}}]
    """
    if all(part["type"] == "text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def token_call(prompt: Any, generation: Any, log_probs: Any) -> dict[str, Any] | None:
    """One model call's token data in the table's shape (``chat.token_data.TOKEN_DATA_TYPE``),
    or None when it is malformed: token ids in int32 range, a non-empty generation, one finite
    log probability per generated token.

    >>> token_call([1, 2], [3], [0])
    {'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': [0.0]}
    >>> token_call([1, 2], [3], [-0.1, -0.2]) is None, token_call([1], [], []) is None
    (True, True)
    """
    if are_token_ids(prompt) and are_token_ids(generation) and generation and are_log_probs(log_probs, len(generation)):
        return {"prompt_token_ids": prompt, "generation_token_ids": generation,
                "generation_log_probs": list(map(float, log_probs))}
    return None
