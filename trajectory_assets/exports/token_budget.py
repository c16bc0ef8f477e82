"""Token budgets measured with the user's tokenizer, by rendering its chat template.

Trainers handle an over-long row silently: TRL truncates it at ``max_length``, NeMo RL sets
its loss multiplier to 0 (``nemo_rl/data/processors.py``), verl filters prompts over
``max_prompt_length``. So the exports measure every row as the trainer will see it,
``apply_chat_template(messages, tools=tools)`` then the tokenizer, and enforce the family's
``max_tokens``: a row over budget is left out and counted (``over_token_budget``) or, with
``over_token_budget: truncate``, cut after its last assistant turn that still fits.

What is measured, per family: an SFT row's whole conversation; a DPO pair's longer side,
prompt + chosen or prompt + rejected (as TRL and NeMo RL do); a GRPO task's prompt with the
generation prompt appended (what the policy is given, and what verl filters on). A row the
template refuses to render (Llama 3.1's refuses parallel calls, for example) cannot train
with that tokenizer and is left out as ``chat_template_error``.

``transformers`` is imported only when a tokenizer is configured.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from trajectory_assets.exports.unrepresentable import Unrepresentable

OVER_BUDGET = "over_token_budget"
TEMPLATE_ERROR = "chat_template_error"


class TokenizerError(Exception):
    """The configured tokenizer cannot be used (not found, no chat template)."""


@dataclass(frozen=True)
class ChatTemplateCounter:
    """Counts the tokens of messages as the tokenizer's chat template renders them."""

    name: str
    tokenizer: Any

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              generation_prompt: bool = False) -> int:
        try:
            text = self.tokenizer.apply_chat_template(
                renderable(messages), tools=tools or None,  # `or None`: TRL's guard, [] renders tool boilerplate
                tokenize=False, add_generation_prompt=generation_prompt,
            )
        except Exception as error:  # noqa: BLE001 - a template raises whatever its author chose
            raise Unrepresentable(TEMPLATE_ERROR, f"{type(error).__name__}: {error}") from None
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


@lru_cache(maxsize=4)  # one load per process and tokenizer, whatever the number of families
def load_counter(name_or_path: str) -> ChatTemplateCounter:
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    except Exception as error:  # noqa: BLE001 - not found, offline, not a tokenizer: one clear line
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TokenizerError(f"tokenizer {name_or_path!r} cannot be loaded: {reason}") from None
    if not getattr(tokenizer, "chat_template", None):
        raise TokenizerError(f"tokenizer {name_or_path!r} has no chat template to measure rows with")
    return ChatTemplateCounter(name_or_path, tokenizer)


# load_counter in a child interpreter; its TokenizerError, if any, as its exit message
_CHECK = """import sys
from trajectory_assets.exports.token_budget import TokenizerError, load_counter
try:
    load_counter(sys.argv[1])
except TokenizerError as error:
    sys.exit(str(error))
"""


def check_tokenizer(name_or_path: str) -> None:
    """Raises :class:`TokenizerError` (one line) when ``load_counter`` would, having tried it
    in a child interpreter: a caller that only checks the tokenizer (the CLI, before it starts
    the runs that measure with it) would otherwise hold ``transformers`` and the tokenizer,
    about 250 MB, for as long as it lives."""
    done = subprocess.run([sys.executable, "-c", _CHECK, name_or_path], capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()  # the last: the exit message, or the error that ended it
        raise TokenizerError(lines[-1] if lines else f"tokenizer {name_or_path!r} cannot be loaded "
                                                      f"(its check exited with {done.returncode})")


@dataclass(frozen=True)
class TokenBudget:
    """A family's budget: rows measured with ``counter``, at most ``max_tokens`` (None: measured only)."""

    counter: ChatTemplateCounter
    max_tokens: int | None
    truncate: bool

    def fit(self, context: list[dict[str, Any]], continuation: list[dict[str, Any]],
            tools: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], int, bool]:
        """``(continuation, tokens of context + it, whether it was cut)``. Over budget, the
        continuation is cut after its last assistant message that fits (with ``truncate``),
        else :class:`Unrepresentable` (``over_token_budget``) is raised."""
        tokens = self.counter.count(context + continuation, tools)
        if self.max_tokens is None or tokens <= self.max_tokens:
            return continuation, tokens, False
        if not self.truncate:
            raise Unrepresentable(OVER_BUDGET, f"{tokens} tokens > {self.max_tokens}")
        # every shorter cut that ends on an assistant turn, longest last
        cuts = [i + 1 for i, m in enumerate(continuation[:-1]) if m.get("role") == "assistant"]
        best: tuple[int, int] | None = None
        low, high = 0, len(cuts) - 1
        while low <= high:  # longer prefixes render to more tokens: the longest that fits
            middle = (low + high) // 2
            count = self.counter.count(context + continuation[: cuts[middle]], tools)
            if count <= self.max_tokens:
                best, low = (cuts[middle], count), middle + 1
            else:
                high = middle - 1
        if best is None:
            raise Unrepresentable(OVER_BUDGET, f"{tokens} tokens > {self.max_tokens}, and so is its first turn")
        return continuation[: best[0]], best[1], True

    def prompt(self, prompt: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        """Tokens of a prompt with the generation prompt appended; over budget it is never cut."""
        tokens = self.counter.count(prompt, tools, generation_prompt=True)
        if self.max_tokens is not None and tokens > self.max_tokens:
            raise Unrepresentable(OVER_BUDGET, f"{tokens} prompt tokens > {self.max_tokens}")
        return tokens


def renderable(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a template expects them (arguments as objects where they encode one); the
    rest as stored, so the template itself decides whether it can render them."""
    rendered = []
    for message in messages:
        out = {**message, "content": "" if message.get("content") is None else message["content"]}
        if message.get("tool_calls"):
            out["tool_calls"] = [_object_arguments(call) for call in message["tool_calls"]]
        rendered.append(out)
    return rendered


def _object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return {**call, "function": {**function, "arguments": parsed}}
    return call
