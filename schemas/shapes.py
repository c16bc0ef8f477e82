"""The shapes of nested values the contracts check, kept on the contracts' side: ``schemas/``
imports nothing from ``trajectory_assets/``, which imports these.

A *shape* is a string with one letter per item of a nested list (a conversation's messages,
a ShareGPT row's turns), so a contract checks a rule over a whole conversation with one
vectorized regex. The converters apply the same patterns, so a row a converter writes and a
row the contract accepts are the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

# Role shape of chat messages: s system, u user, a assistant, c assistant with tool calls,
# t tool message answering a call of the assistant turn right before it, x any other tool
# message. System only first; every tool message answers the latest call.
ROLE_LETTER = {"system": "s", "user": "u", "assistant": "a", "tool": "t"}
ROLE_SHAPE_PATTERN = r"^s?(?:u|a|ct*)*$"
HAS_ASSISTANT_PATTERN = r"[ac]"  # at least one assistant turn

# value types of messages a chat template renders right: text content, tool-call arguments
# as JSON objects (``exports/template.py``)
TEMPLATE_VALUE_TYPES = r"^(?:arguments:dict,)?content:str$"

# LLaMA-Factory turn shape: h human, g gpt, f function_call, o observation. Its converter's
# alternation rule plus a human first turn (a conversation opening on a tool result has no prompt).
LLAMA_FACTORY_LETTER = {"human": "h", "gpt": "g", "function_call": "f", "observation": "o"}
TURN_SHAPE_PATTERN = r"^h[gf](?:[ho][gf])*$"

# Hermes ShareGPT turn shape: s system, h human, g gpt, t tool. The generated system prompt
# first, each tool turn answers the gpt turn right before it.
HERMES_LETTER = {"system": "s", "human": "h", "gpt": "g", "tool": "t"}
FROM_SHAPE_PATTERN = r"^s(?:h|gt?)*$"


def role_shape(messages: Iterable[Mapping[str, Any]]) -> str:
    """One letter per message (:data:`ROLE_LETTER`; ``c`` an assistant turn with calls, ``x`` a
    tool message that answers no open call).

    >>> role_shape([{"role": "user"}, {"role": "assistant", "tool_calls": [{"id": "1"}]},
    ...             {"role": "tool", "tool_call_id": "1"}, {"role": "tool", "tool_call_id": "9"}])
    'uctx'
    """
    # called for every written row of every export: one pass, the last letter kept aside
    letters: list[str] = []
    last = ""
    open_calls: set = _NO_CALLS
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls:
                open_calls = {call.get("id") for call in calls}
                last = "c"
            else:
                open_calls = _NO_CALLS
                last = "a"
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if (last == "c" or last == "t") and call_id in open_calls:  # inside the run of a call's answers
                open_calls.discard(call_id)
                last = "t"
            else:
                last = "x"
        else:
            open_calls = _NO_CALLS
            last = ROLE_LETTER.get(role, "?")
        letters.append(last)
    return "".join(letters)


_NO_CALLS: frozenset = frozenset()  # no open call (never changed: a set of calls is made per call turn)


def value_types(messages: Iterable[Mapping[str, Any]]) -> str:
    """The Python types of every ``content`` and tool-call ``arguments`` value, as sorted
    ``content:<type>`` / ``arguments:<type>`` tokens joined by commas.

    >>> value_types([{"content": "hi"}, {"content": "", "tool_calls": [{"function": {"arguments": "{}"}}]}])
    'arguments:str,content:str'
    """
    contents, arguments = set(), set()  # the types themselves: named once, not once per value
    for message in messages:
        contents.add(type(message.get("content")))
        calls = message.get("tool_calls")
        if calls:
            arguments.update(type((call.get("function") or {}).get("arguments")) for call in calls)
    return _type_tokens(frozenset(contents), frozenset(arguments))


@lru_cache(maxsize=256)
def _type_tokens(contents: frozenset, arguments: frozenset) -> str:
    tokens = {f"content:{kind.__name__}" for kind in contents} | {f"arguments:{kind.__name__}" for kind in arguments}
    return ",".join(sorted(tokens))


def turn_shape(turns: Iterable[Mapping[str, Any]], letters: Mapping[str, str]) -> str:
    """One letter per ShareGPT turn by its ``from``, ``?`` for a speaker ``letters`` lacks.

    >>> turn_shape([{"from": "human"}, {"from": "gpt"}, {"from": "robot"}], LLAMA_FACTORY_LETTER)
    'hg?'
    """
    return "".join([letters.get(turn.get("from"), "?") for turn in turns])


def type_name(value: Any) -> str:
    """The Python type of a value, as the contracts name it (``list``, ``dict``, ``NoneType``)."""
    return type(value).__name__
