"""Export rows -> what the report page's trajectory viewer shows (no Dagster, no HTML).

Every row is read back by its own export (``read_back`` of its module in ``exports/``) as
the canonical chat it holds, so the viewer applies each format's rules exactly as its
round-trip tests check them, and an export added later is shown without a change here:

- a conversation (SFT family): its messages and tools;
- a preference pair (DPO family): the shared prompt, then both sides side by side;
- a task (GRPO family): its prompt, with its rollouts' rewards;
- a token row (``calls`` of token data): one turn per model call with its token counts;
- a row its export cannot read back (or of an unknown export): the row itself, as JSON.

Every text is cut to a bound (a 20 MB answer shows its first characters and how many more
there are), and each sample has a budget of characters, so the page stays small whatever the
rows hold. The page escapes every text it shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from trajectory_assets.chat.messages import tool_result_failed
from trajectory_assets.exports.export import ReadBack
from trajectory_assets.exports.export_scan import margin_of, trajectory_refs
from trajectory_assets.exports.registry import EXPORTS_BY_NAME

TEXT_LIMIT = 2_000  # characters of one text (a message, reasoning, arguments, a result) shown
SAMPLE_BUDGET = 16_000  # characters of one sample's conversations shown; the rest is counted
RAW_LIMIT = 3_000  # characters of the row as stored (pretty JSON) shown
FACT_LIMIT = 160  # characters of one scalar field shown among a sample's facts
# fields the conversation view shows (not repeated among the facts)
SHOWN_FIELDS = frozenset({"messages", "conversations", "system", "tools", "prompt", "chosen", "rejected", "context",
                          "completions", "responses_create_params", "calls"})

ROLE_OF = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
def read_back(export: str, row: Mapping[str, Any]) -> tuple[str, ReadBack | None]:
    """(the row's shape, its canonical chat), read back by its export; ("raw", None) when
    the export is unknown or cannot read the row."""
    known = EXPORTS_BY_NAME.get(export)
    if known is None:
        return "raw", None
    try:
        back = known.read_back(row)
    except Exception:  # a row the export's rules cannot read: shown as it is stored
        return "raw", None
    sides = (back.messages, back.chosen or [], back.rejected or [], back.calls or [])
    if not all(isinstance(side, list) and all(isinstance(item, Mapping) for item in side) for side in sides):
        return "raw", None
    if back.calls is not None:
        return "tokens", back
    if back.chosen is not None or back.rejected is not None:
        return "preference", back
    return ("task" if known.family == "grpo" else "chat"), back


# ------------------------------------------------------------------ the view model


@dataclass
class Text:
    """Record text cut to a bound: ``shown`` and how many characters were left out."""

    shown: str
    hidden: int = 0


@dataclass
class Call:
    name: Text
    arguments: Text
    arguments_parse: bool  # False: the arguments are not JSON (shown as they are)
    call_id: str | None = None
    result: Text | None = None
    result_failed: bool = False  # the result is an error, by chat/messages.py tool_result_failed


@dataclass
class Turn:
    role: str  # system / user / assistant / tool (how it is drawn)
    label: str  # what the row calls it (human, gpt, observation, developer, ...)
    text: Text | None = None
    reasoning: Text | None = None
    calls: list[Call] = field(default_factory=list)
    result_of: str | None = None  # a tool turn that answers no call shown: the id it names
    note: str | None = None  # parts that are not text (images, unknown items)


@dataclass
class Conversation:
    turns: list[Turn] = field(default_factory=list)
    hidden_turns: int = 0  # turns past the sample's budget
    tools: list[str] = field(default_factory=list)  # names of the tools offered


@dataclass
class Rollout:
    trajectory_id: str
    reward: float | None
    turns: int | None
    source: Source


@dataclass
class Source:
    """Where a trajectory came from: its source file and line (a link for local files)."""

    role: str
    trajectory_id: str
    uri: str | None
    line: int | None
    reward: float | None
    href: str | None = None


@dataclass
class Sample:
    export: str
    split: str
    position: int  # 0-based row number within the split (its files' rows one after the other)
    shape: str
    facts: list[tuple[str, str]]  # the row's scalar fields
    sources: list[Source]
    raw: Text  # the row as stored, pretty JSON
    conversation: Conversation | None = None  # chat / sharegpt; a task's prompt; a pair's prompt
    chosen: Conversation | None = None
    rejected: Conversation | None = None
    reward_chosen: float | None = None
    reward_rejected: float | None = None
    margin: float | None = None
    rollouts: list[Rollout] = field(default_factory=list)


@dataclass(frozen=True)
class TrajectoryInfo:
    """What the viewer shows of a validated trajectory a row refers to."""

    uri: str | None
    line: int | None
    reward: float | None
    turns: int | None


# ------------------------------------------------------------------ building a sample


def view_sample(export: str, split: str, position: int, row: Mapping[str, Any],
                trajectories: Mapping[str, TrajectoryInfo]) -> Sample:
    """One export row as the viewer shows it; ``trajectories`` holds (at least) the
    trajectories the row refers to."""
    budget = _Budget(SAMPLE_BUDGET)
    shape, back = read_back(export, row)
    refs = trajectory_refs(row)
    sample = Sample(
        export=export, split=split, position=position, shape=shape, facts=_facts(row),
        sources=[_source(role, trajectory_id, trajectories.get(trajectory_id)) for role, trajectory_id in refs],
        raw=clip(_pretty(row), RAW_LIMIT),
    )
    if back is None:
        return sample
    tools = _tool_names(back.tools)
    if shape == "preference":
        _preference(sample, row, back, tools, budget)
    elif shape == "tokens":
        sample.conversation = Conversation(turns=[_token_call(number, call) for number, call in
                                                  enumerate(back.calls, start=1)])
    else:
        sample.conversation = _conversation(back.messages, tools, budget)
    if shape == "task":
        rollouts = [_rollout(trajectory_id, trajectories.get(trajectory_id))
                    for role, trajectory_id in refs if role == "rollout"]
        sample.rollouts = sorted(rollouts, key=lambda r: (r.reward is None, -(r.reward or 0.0)))
    return sample


def _token_call(number: int, call: Mapping[str, Any]) -> Turn:
    """A model call of a token row: how many tokens it was given and generated, and the
    mean log probability of what it generated (the token ids themselves are in the row)."""
    prompt, generated, log_probs = (call.get(key) or [] for key in
                                    ("prompt_token_ids", "generation_token_ids", "generation_log_probs"))
    numbers = [p for p in log_probs if isinstance(p, (int, float)) and not isinstance(p, bool)]
    mean = f", mean log prob {sum(numbers) / len(numbers):.3f}" if numbers else ""
    text = (f"model call {number} (message {call.get('message_index', '?')}): {len(prompt)} prompt tokens, "
            f"{len(generated)} generated{mean}")
    return Turn(role="assistant", label="model call", text=Text(text))


def _preference(sample: Sample, row: Mapping[str, Any], back: ReadBack, tools: list[str], budget: _Budget) -> None:
    sample.conversation = _conversation(back.messages, tools, budget) if back.messages else None
    # each side gets half of what is left, so a long chosen answer never hides the rejected one
    half = _Budget(budget.left // 2)
    sample.chosen = _conversation(back.chosen or [], [], half)
    sample.rejected = _conversation(back.rejected or [], [], _Budget(budget.left // 2))
    rewards = {source.role: source.reward for source in sample.sources}
    sample.reward_chosen = _number(row.get("reward_chosen"), rewards.get("chosen"))
    sample.reward_rejected = _number(row.get("reward_rejected"), rewards.get("rejected"))
    sample.margin = margin_of(row)
    if sample.margin is None and None not in (sample.reward_chosen, sample.reward_rejected):
        sample.margin = sample.reward_chosen - sample.reward_rejected


def _number(*values: Any) -> float | None:
    return next((float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)), None)


def _rollout(trajectory_id: str, info: TrajectoryInfo | None) -> Rollout:
    return Rollout(trajectory_id, info.reward if info else None, info.turns if info else None,
                   _source("rollout", trajectory_id, info))


def _source(role: str, trajectory_id: str, info: TrajectoryInfo | None) -> Source:
    if info is None:
        return Source(role, trajectory_id, None, None, None)
    return Source(role, trajectory_id, info.uri, info.line, info.reward, local_file_href(info.uri))


def local_file_href(uri: str | None) -> str | None:
    """A ``file://`` link for a local absolute path; nothing for object-store URIs (a
    browser cannot open them) and never any other scheme."""
    if not uri or not uri.startswith("/"):
        return None
    from urllib.parse import quote

    return "file://" + quote(uri)


def _facts(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    facts = []
    for key, value in row.items():
        if key in SHOWN_FIELDS or key.endswith("_id"):
            continue
        if isinstance(value, (str, int, float, bool)):
            text = value if isinstance(value, str) else orjson.dumps(value).decode()
            facts.append((key, text if len(text) <= FACT_LIMIT else text[:FACT_LIMIT] + "…"))
        elif isinstance(value, Mapping) and key in ("agent_ref", "reward_model"):
            facts.append((key, clip(orjson.dumps(value).decode(), FACT_LIMIT).shown))
    return facts


def _tool_names(tools: list[Any] | None) -> list[str]:
    names = []
    for tool in tools or []:
        if isinstance(tool, Mapping):
            function = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
            names.append(str(function.get("name", "?")))
    return names


# ------------------------------------------------------------------ conversations


class _Budget:
    def __init__(self, chars: int) -> None:
        self.left = chars

    def take(self, value: str, limit: int = TEXT_LIMIT) -> Text:
        shown = clip(value, min(limit, max(self.left, 0)))
        self.left -= len(shown.shown)
        return shown

    @property
    def spent(self) -> bool:
        return self.left <= 0


def clip(value: str, limit: int) -> Text:
    return Text(value, 0) if len(value) <= limit else Text(value[:limit], len(value) - limit)


def _pretty(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        return repr(value)


def _arguments(value: Any) -> tuple[str, bool]:
    """Pretty-printed arguments (an object, or a string holding JSON); else the text as is."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value, False
    return _pretty(value), True


def _text_of(content: Any) -> tuple[str, str | None]:
    """(text, note about what is not text) of a message content: a string, or parts."""
    if content is None:
        return "", None
    if isinstance(content, str):
        return content, None
    if isinstance(content, list):
        texts, other = [], []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, Mapping):
                other.append(str(part.get("type", "part")))
        note = f"not shown: {', '.join(other)}" if other else None
        return "\n".join(texts), note
    return _pretty(content), None


class _Builder:
    """Turns in order, tool results paired with the calls they answer: by id, else by
    name (a Hermes response names its tool), else the earliest open call."""

    def __init__(self, budget: _Budget) -> None:
        self.budget = budget
        self.conversation = Conversation()
        self.open_calls: list[Call] = []

    def add(self, turn: Turn) -> None:
        if self.budget.spent:
            self.conversation.hidden_turns += 1
        else:
            self.conversation.turns.append(turn)

    def text(self, value: str) -> Text | None:
        return self.budget.take(value) if value else None

    def assistant(self, label: str, text: str = "", reasoning: str = "", note: str | None = None) -> Turn:
        turn = Turn("assistant", label, self.text(text.strip()), self.text(reasoning.strip()), note=note)
        self.add(turn)
        return turn

    def call(self, turn: Turn, name: Any, arguments: Any, call_id: Any = None) -> None:
        shown, parsed = _arguments(arguments)
        call = Call(self.budget.take(str(name or "?"), 200), self.budget.take(shown), parsed,
                    call_id if isinstance(call_id, str) else None)
        turn.calls.append(call)
        self.open_calls.append(call)

    def result(self, label: str, content: Any, call_id: Any = None, name: Any = None) -> None:
        text, note = _text_of(content)
        call = next((c for c in self.open_calls if call_id is not None and c.call_id == call_id), None)
        if call is None and (call_id is None or all(c.call_id is None for c in self.open_calls)):
            call = next((c for c in self.open_calls if name and c.name.shown == name), None)
            call = call or (self.open_calls[0] if self.open_calls else None)
        if call is not None:
            self.open_calls.remove(call)
            call.result = self.budget.take(text)
            call.result_failed = tool_result_failed(text)
            return
        self.add(Turn("tool", label, self.text(text), note=note,
                      result_of=call_id if isinstance(call_id, str) else None))


def _conversation(messages: list[Mapping[str, Any]], tools: list[str], budget: _Budget) -> Conversation:
    """Canonical chat messages as turns, each tool result beside the call it answers."""
    builder = _Builder(budget)
    builder.conversation.tools = tools
    for message in messages:
        _message(builder, message)
    return builder.conversation


def _message(builder: _Builder, message: Mapping[str, Any]) -> None:
    label = str(message.get("role"))
    role = ROLE_OF.get(label, "system")
    text, note = _text_of(message.get("content"))
    if role == "tool":
        builder.result(label, message.get("content"), message.get("tool_call_id"))
        return
    if role == "assistant":
        reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
        turn = builder.assistant(label, text, reasoning if isinstance(reasoning, str) else "", note)
        for call in message.get("tool_calls") or []:
            if isinstance(call, Mapping):
                function = call.get("function") if isinstance(call.get("function"), Mapping) else call
                builder.call(turn, function.get("name"), function.get("arguments"), call.get("id"))
        return
    builder.add(Turn(role, label, builder.text(text), note=note))
