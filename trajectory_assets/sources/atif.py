"""Harbor's ATIF (Agent Trajectory Interchange Format, ``ATIF-v1.0`` … ``ATIF-v1.8``) ->
canonical trajectories.

An ATIF trajectory is one JSON object: root metadata, ``agent`` and ordered ``steps``. A step
is a system prompt, a user message, or one agent turn (one LLM call, its tool calls and the
observation results returned for them). Harbor writes one per trial
(``<job>/<trial>/agent/trajectory.json``), beside the trial's ``result.json`` and the
verifier's reward file; discovery finds a trial as one record holding those files
(``io.file_layouts.FolderRecords``), and ingest hands it over as they were read
(``io.file_layouts.RecordFiles``). NeMo Gym's ``gym eval export atif`` folder (ATIF files
``<task>-<rollout>.json`` beside ``manifest.jsonl``) is a batch whose files are records, each
joined to its manifest line (indices, SHA-256 checked; no reward: the export writes none). A
bare trajectory object (one per JSON line) is accepted too.

The mapping (docs/sources.md has the table, and where it differs from Harbor's exporter,
NeMo Gym's harbor_agent and Data Designer, and why):

- ``system`` steps before any other -> one system message; a later system step (OpenHands
  runtime events, terminus-2's context hand-off) -> a ``user`` message, as Harbor's own
  exporter writes every system step (a chat template accepts one system message, first);
  flagged ``system_step_as_user``;
- ``user`` steps -> user messages; ``agent`` steps -> one assistant message each (never
  merged: each is one model call, and its token data belongs to it), with
  ``reasoning_content`` and ``tool_calls`` ``{id: tool_call_id, type: "function", function:
  {name, arguments: the JSON text of the arguments object}}``;
- an observation result naming ``source_call_id`` -> a ``tool`` message answering that call
  of its step (by id, never by position); a second result for an answered call is kept in
  ``metadata.unmatched_tool_responses`` (flagged ``unmatched_tool_response``); one naming a
  call its step did not make is rejected (``orphan_tool_output``: Harbor's validator refuses
  it too);
- results with no ``source_call_id`` (Harbor jobs before harbor#2087: terminus-2,
  mini-swe-agent, swe-agent; navigator): a step's one result answers the step's one call
  (a ``tool`` message, ``metadata.atif.sole_call_results``, flag ``sole_call_result``), as
  Harbor's producers link them since harbor#2087; calls sharing results (terminus-2's
  keystroke batch and its one screen) are written into the assistant's text as Harbor's
  trace exporter writes them (``<tool_call>`` blocks, ``metadata.atif.calls_as_text``, flag
  ``calls_as_text``) and the results are the next user turn; any other such result
  (parse-error feedback, a step with no call) is a ``user`` message after the step's tool
  messages, exactly the next prompt the model was sent (``metadata.atif.unlinked_results``,
  flag ``unlinked_observation``). A call no result answers stays unanswered, as in every
  source (the ``unanswered_tool_calls`` column counts it). NeMo Gym's ATIF import refuses
  such results; docs/sources.md says why we follow the producer;
- steps flagged ``is_copied_context`` and agent steps with ``llm_call_count == 0`` stay in
  the chat as context; the indices of their assistant messages are in
  ``metadata.untrained_messages`` (flags ``copied_context`` / ``non_llm_step``). Copied
  steps opening a continuation segment extend the prompt when they come first;
- token counts from ``final_metrics`` (else the steps' ``metrics``); before v1.2
  ``prompt_tokens`` excluded cached tokens, so they are added back. Token ids and log probs
  per agent step -> ``token_data`` (one model call each); a step aggregating several calls
  (``llm_call_count > 1``) keeps them in ``metadata.atif.aggregated_token_data``;
- subagents: never their own trajectory (a record is one trajectory), never dropped: each
  (file refs, embedded ``subagent_trajectories``, claude-code's interleaved
  ``extra.is_sidechain`` steps, and summarization files no ref names) is converted by the
  same rules and kept whole in ``metadata.subagents``; claude-code's sidechain steps leave the
  main chat (they were another agent's context);
- content parts (v1.6+): text parts joined with newlines, images as ``image_url`` parts (the
  path as the URL), as the NeMo Gym source writes them; audio has no canonical form and is
  rejected (``unsupported_content``);
- reward: the trial's ``result.json`` ``verifier_result.rewards`` (``reward``, else the only
  key; all keys in ``reward_components``), else ``verifier/reward.json`` /
  ``verifier/reward.txt``; none -> ``None``, never 0. A result that says its reward is not
  valid (``reward_valid: false``) gives ``None`` too, the recorded rewards kept.
- every step's fields that have no place in the chat (timestamps, ``extra``, metrics,
  tool-call and result extras, subagent refs) are kept in ``metadata.atif.steps``.
"""

from __future__ import annotations

import functools
import json
import math
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from trajectory_assets.chat.builder import ChatBuilder, assistant_message, content_from_parts, image_part, text_part
from trajectory_assets.chat.hermes_markup import HERMES_MARKUP_FLAG, has_hermes_markup, split_inline_reasoning
from trajectory_assets.chat.messages import prompt_key
from trajectory_assets.chat.responses import responses_request
from trajectory_assets.chat.training import UNTRAINED_MESSAGES
from trajectory_assets.chat.trajectory import Rejection, Trajectory
from trajectory_assets.config import ConversionConfig
from trajectory_assets.io.file_layouts import FolderRecords, RecordFiles
from trajectory_assets.jsonutil import canonical, sha256_hex
from trajectory_assets.sources.format import SourceFormat, count_of, parse_json_line

SOURCE_FORMAT = "atif"
DEFAULT_OPTIONS = ConversionConfig()
VERSIONS = tuple(f"ATIF-v1.{minor}" for minor in range(9))
# Harbor's trial layout (harbor/models/trial/paths.py, harbor/verifier/verifier.py)
MAIN = "agent/trajectory.json"
RESULT = "result.json"
REWARD_JSON, REWARD_TXT = "verifier/reward.json", "verifier/reward.txt"  # reward.json wins, as in Harbor
CONTINUATION = re.compile(r"\.cont-(\d+)\.json$")
# NeMo Gym's `gym eval export atif` (nemo_gym/atif_export.py, export_rollouts_to_atif): ATIF-v1.7
# files `<task index>-<rollout index>.json` beside `manifest.jsonl`, one line per file
GYM_MANIFEST, GYM_EXPORTED = "manifest.jsonl", r"\d+-\d+\.json"
STEP_SOURCES = ("system", "user", "agent")
QUALITY_FLAGS = (
    "system_step_as_user",  # a system step after the conversation began, written as a user message
    "unlinked_observation",  # a result with no source_call_id, written as a user message
    "sole_call_result",  # a step's one result with no source_call_id answers its one call
    "calls_as_text",  # a step's calls share unlinked results: written as Harbor's <tool_call> text
    "unmatched_tool_response",  # a second result for an answered call (kept in metadata)
    "copied_context",  # steps replayed from an earlier segment: context, never training targets
    "non_llm_step",  # agent steps with llm_call_count 0: deterministic dispatch, never targets
    "untrained_messages",  # either: metadata.untrained_messages lists them (chat/training.py)
    "context_reset",  # the model's context was compacted or replaced mid-trajectory
    "consecutive_assistant_turns",  # agent -> agent with nothing between
    "unparseable_tool_call",  # arguments given as a string that is not JSON (kept as is)
    "malformed_token_data",  # token ids / log probs of the wrong shape (kept in metadata)
    "missing_subagent_trajectory",  # a ref to a subagent file the trial does not hold
    "invalid_subagent_trajectory",  # a subagent that does not convert (kept raw in metadata)
    "missing_continuation",  # continued_trajectory_ref names a file the trial does not hold
    "harbor_reward_invalid",  # result.json says its reward is not valid (reward left None)
    "unreadable_trial_file",  # a file of the trial other than its trajectory cannot be read (named in metadata)
    HERMES_MARKUP_FLAG,
)
TOKEN_KEYS = ("prompt_token_ids", "completion_token_ids", "logprobs")


def looks_like_atif(record: dict[str, Any]) -> bool:
    return ("steps" in record and "agent" in record) or (
        isinstance(record.get("schema_version"), str) and record["schema_version"].startswith("ATIF"))


def belongs_to_trial(main: str, path: str) -> bool:
    """Whether ``path`` (relative to the trial folder) is part of the record whose main
    trajectory is ``main``: its continuation segments and subagent files
    (``trajectory.cont-1.json``, ``trajectory.summarization-1-summary.json``: the main file's
    name with a dotted suffix, beside it), the trial's ``result.json`` and the reward file.

    >>> [belongs_to_trial(MAIN, p) for p in ("agent/trajectory.cont-1.json", "result.json",
    ...  "verifier/reward.txt", "agent/sessions/x.jsonl", "config.json")]
    [True, True, True, False, False]
    """
    if path in (RESULT, REWARD_JSON, REWARD_TXT):
        return True
    folder, name = posixpath.split(main)
    stem = name.removesuffix(".json")
    return posixpath.dirname(path) == folder and posixpath.basename(path).startswith(stem + ".") and path.endswith(".json")


@dataclass
class _Trial:
    """The files of one record, parsed."""

    main: dict[str, Any]
    main_path: str | None = None
    files: dict[str, Any] = field(default_factory=dict)  # the other trajectory files by path
    result: dict[str, Any] | None = None
    reward_file: tuple[str, Any] | None = None
    name: str | None = None
    unreadable: dict[str, str] = field(default_factory=dict)
    missing_continuations: list[str] = field(default_factory=list)
    non_finite: int = 0  # NaN / Infinity literals in its files (stored as null, counted, flagged)
    gym_entry: dict[str, Any] | None = None  # its line of NeMo Gym's export manifest


def convert_atif(record: dict[str, Any] | RecordFiles, *, source_id: str,
                 options: ConversionConfig = DEFAULT_OPTIONS, **_: Any) -> Trajectory:
    """Convert one Harbor trial (its files as read) or one bare ATIF trajectory."""
    trial = _read_trial(record) if isinstance(record, RecordFiles) else _Trial(main=record)
    segments = _segments(trial)
    chat = _Chat(options)
    sidechains: dict[str, list[dict[str, Any]]] = {}
    for where, trajectory in segments:
        chat.add_trajectory(trajectory, where, sidechains)
    messages = chat.messages
    first_agent = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first_agent is None:
        raise Rejection("no_model_output", "no agent step")
    if not any(m["role"] == "user" for m in messages[:first_agent]):
        raise Rejection("no_prompt", "no user step before the first agent step")
    prompt_length = _prompt_length(messages, first_agent, chat.untrained)

    main = trial.main
    tools = _tools(main.get("agent", {}).get("tool_definitions"))
    prompt = messages[:prompt_length]
    subagents = _subagents(trial, segments, sidechains, chat, options)
    reward, components, reward_flags, reward_kept = _reward(trial)
    result = trial.result or {}
    flags = chat.flags | reward_flags
    if trial.non_finite:
        flags.add("non_finite_number")  # as sources.convert_record flags a line's
    if any(has_hermes_markup(message) for message in messages):
        flags.add(HERMES_MARKUP_FLAG)
    if any(a["role"] == b["role"] == "assistant" for a, b in zip(messages, messages[1:])):
        flags.add("consecutive_assistant_turns")
    input_tokens, output_tokens = _token_totals([trajectory for _, trajectory in segments])
    exception = result.get("exception_info") if isinstance(result.get("exception_info"), dict) else None
    task_name = result.get("task_name") if isinstance(result.get("task_name"), str) and result.get("task_name") else None

    metadata: dict[str, Any] = {"atif": chat.atif_metadata(main, segments), **chat.kept}
    if trial.missing_continuations:
        metadata["atif"]["missing_continuations"] = trial.missing_continuations
        flags.add("missing_continuation")
    if chat.untrained:
        metadata[UNTRAINED_MESSAGES] = sorted(chat.untrained)
        flags.add(UNTRAINED_MESSAGES)
    if subagents:
        metadata["subagents"] = subagents
    if trial.name is not None or trial.result is not None or reward_kept:
        metadata["harbor"] = {"record": trial.name, "result": trial.result, **reward_kept}
        if trial.unreadable:  # a result.json that cannot be read leaves the reward unknown: flagged
            metadata["harbor"]["unreadable"] = trial.unreadable
            flags.add("unreadable_trial_file")
    if trial.gym_entry is not None:
        metadata["nemo_gym_export"] = trial.gym_entry
    agent = main.get("agent") or {}
    return Trajectory(
        source_format=SOURCE_FORMAT,
        messages=messages,
        prompt_length=prompt_length,
        # a Harbor task is named across jobs within its dataset (``source``), so its rollouts
        # group by the two; without a result.json the task is the prompt's content
        task_key=sha256_hex(canonical(["harbor_task", result.get("source"), task_name]))[:24] if task_name
        else prompt_key(prompt, tools),
        tools=tools,
        reward=reward,
        reward_components=components,
        rollout_id=_rollout_id(trial),
        task_index=trial.gym_entry["_ng_task_index"] if trial.gym_entry else None,
        rollout_index=trial.gym_entry["_ng_rollout_index"] if trial.gym_entry else None,
        agent_name=agent.get("name") if isinstance(agent.get("name"), str) else None,
        model=_model(main),
        task_type=None,
        completed=exception is None,
        status=str(exception.get("exception_type")) if exception else None,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens if input_tokens is not None and output_tokens is not None else None,
        request=responses_request(prompt, tools),
        token_data=chat.token_data or None,
        non_finite_values=trial.non_finite,
        quality_flags=sorted(flags),
        metadata=metadata,
    )


# ---------------------------------------------------------------- the trial's files


def _read_trial(record: RecordFiles) -> _Trial:
    files = record.files
    unreadable = record.unreadable
    main_path = record.main
    if main_path in unreadable or main_path not in files:
        raise Rejection("unreadable_file", f"{main_path}: {unreadable.get(main_path, 'missing')}")
    gym_entry = _gym_entry(record) if GYM_MANIFEST in files or GYM_MANIFEST in unreadable else None
    parsed: dict[str, Any] = {}
    non_finite = 0
    for path, text in files.items():
        if path == GYM_MANIFEST:
            continue
        if not isinstance(text, str):
            raise Rejection("invalid_structure", f"{path} is not text")
        if path == REWARD_TXT:
            parsed[path] = text
            continue
        try:  # the rules of every source line: NaN / Infinity counted, nesting bombs refused
            parsed[path], found = parse_json_line(text.encode())
        except Rejection as rejection:
            raise Rejection(rejection.reason, f"{path}: {rejection.detail}") from None
        non_finite += found
    main = parsed.pop(main_path)
    if not isinstance(main, dict):
        raise Rejection("not_an_object", f"{main_path} is a JSON {type(main).__name__}, not an object")
    result = parsed.pop(RESULT, None)
    if result is not None and not isinstance(result, dict):
        raise Rejection("invalid_structure", f"{RESULT} is not an object")
    reward_file = next(((path, parsed.pop(path)) for path in (REWARD_JSON, REWARD_TXT) if path in parsed), None)
    parsed.pop(REWARD_TXT, None)
    return _Trial(main=main, main_path=main_path, files=parsed, result=result, reward_file=reward_file,
                  name=record.name, unreadable=dict(unreadable), non_finite=non_finite, gym_entry=gym_entry)


def _gym_entry(record: RecordFiles) -> dict[str, Any]:
    """The line of NeMo Gym's export manifest naming this file, checked as Gym's own reader
    checks it (``atif_reverification.project_atif_manifest_entry``): the file's SHA-256 is
    the one the manifest expects, and its task and rollout indices are non-negative integers."""
    if GYM_MANIFEST not in record.files:
        raise Rejection("unreadable_file", f"{GYM_MANIFEST}: {record.unreadable[GYM_MANIFEST]}")
    entry = _gym_manifest(record.files[GYM_MANIFEST]).get(record.main)
    if entry is None:
        raise Rejection("invalid_structure", f"{GYM_MANIFEST} has no line whose trajectory_path is {record.main}")
    if isinstance(entry, Rejection):
        raise entry
    for key in ("_ng_task_index", "_ng_rollout_index"):
        if isinstance(entry.get(key), bool) or not isinstance(entry.get(key), int) or entry[key] < 0:
            raise Rejection("invalid_structure", f"{GYM_MANIFEST}: {record.main}'s {key} is not a non-negative integer")
    expected = entry.get("expected_sha256")
    if expected is not None and expected != record.sha256s.get(record.main):
        raise Rejection("checksum_mismatch", f"{record.main} is not the file {GYM_MANIFEST} names: its SHA-256 is "
                                             f"{record.sha256s.get(record.main)}, not {expected}")
    return entry


@functools.lru_cache(maxsize=2)
def _gym_manifest(text: str) -> dict[str, dict[str, Any] | Rejection]:
    """trajectory_path -> its manifest line (a line that is not an object: the rejection of
    every record it might name). One parse per manifest: every record of the export holds
    the same text."""
    entries: dict[str, dict[str, Any] | Rejection] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry, _ = parse_json_line(line.encode())
        except Rejection as rejection:
            entry = Rejection(rejection.reason, f"{GYM_MANIFEST} line {number}: {rejection.detail}")
        if isinstance(entry, dict) and isinstance(entry.get("trajectory_path"), str):
            entries.setdefault(entry["trajectory_path"], entry)
    return entries


def _segments(trial: _Trial) -> list[tuple[str, dict[str, Any]]]:
    """The main trajectory and its continuation segments, in the order
    ``continued_trajectory_ref`` chains them, up to a segment the trial lacks: Harbor's
    exporter (``collect_conversations_from_trial``) follows the same chain and stops there.
    A segment file no ref reaches is no part of the chat (another agent's, or left behind):
    it is kept with the trial's other unnamed files (``_subagents``)."""
    where = trial.main_path or "trajectory"
    segments = [(where, _checked(trial.main, where))]
    folder = posixpath.dirname(where)
    continuations = {path: value for path, value in trial.files.items() if CONTINUATION.search(path)}
    reference = trial.main.get("continued_trajectory_ref")
    while isinstance(reference, str) and reference:
        path = posixpath.normpath(posixpath.join(folder, reference))
        if path not in continuations:
            trial.missing_continuations.append(reference)
            break
        segment = continuations.pop(path)
        segments.append((path, _checked(segment, path)))
        reference = segment.get("continued_trajectory_ref") if isinstance(segment, dict) else None
    return segments


def _checked(trajectory: Any, where: str) -> dict[str, Any]:
    """A trajectory object of a version we read, with a non-empty list of steps."""
    if not isinstance(trajectory, dict):
        raise Rejection("invalid_structure", f"{where} is not an object")
    version = trajectory.get("schema_version")
    if version not in VERSIONS:
        raise Rejection("unsupported_atif_version", f"{where}: schema_version {version!r} is not one of "
                                                    f"{VERSIONS[0]} … {VERSIONS[-1]}")
    if not isinstance(trajectory.get("agent"), dict):
        raise Rejection("invalid_structure", f"{where}: agent is not an object")
    steps = trajectory.get("steps")
    if not isinstance(steps, list) or not steps:
        raise Rejection("invalid_structure", f"{where}: steps is not a non-empty list")
    return trajectory


# ---------------------------------------------------------------- steps -> messages


@dataclass
class _Step:
    """A step's calls while its observation is read: original id -> message id, answered."""

    calls: dict[str, str] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)


class _Chat(ChatBuilder):
    """The chat of ATIF steps; ``kept``: unmatched results, malformed token data."""

    def __init__(self, options: ConversionConfig) -> None:
        super().__init__()
        self.options = options
        self.untrained: set[int] = set()
        self.steps: list[dict[str, Any]] = []  # what each step keeps that has no place in the chat
        self.unlinked: list[dict[str, Any]] = []
        self.sole_call_links: list[dict[str, Any]] = []  # results a step's only call took (no source_call_id)
        self.calls_as_text: list[dict[str, Any]] = []  # steps whose calls share results: written as text
        self.resets: list[dict[str, Any]] = []
        self.aggregated_tokens: list[dict[str, Any]] = []
        self.refs: list[dict[str, Any]] = []  # subagent refs, where they were

    def add_trajectory(self, trajectory: dict[str, Any], where: str,
                       sidechains: dict[str, list[dict[str, Any]]] | None = None) -> None:
        if self.messages:
            # a continuation segment: the model's context restarted with its (copied) steps
            self.resets.append({"where": where, "message_index": len(self.messages), "type": "continuation"})
            self.flags.add("context_reset")
        version = trajectory["schema_version"]
        for position, step in enumerate(trajectory["steps"]):
            label = f"{where}.steps[{position}]"
            if not isinstance(step, dict):
                raise Rejection("invalid_structure", f"{label} is not an object")
            extra = step.get("extra") if isinstance(step.get("extra"), dict) else {}
            if sidechains is not None and extra.get("is_sidechain") is True:
                # claude-code's subagent steps, interleaved by time: another agent's context
                sidechains.setdefault(str(extra.get("agent_id") or "sidechain"), []).append(step)
                continue
            self.add_step(step, label, version)

    def add_step(self, step: dict[str, Any], where: str, version: str) -> None:
        source = step.get("source")
        if source not in STEP_SOURCES:
            raise Rejection("unknown_role", f"{where} has source {source!r}")
        if "message" not in step:
            raise Rejection("invalid_structure", f"{where} has no message")
        content = _content(step["message"], f"{where}.message")
        first = len(self.messages)
        calls = _Step()
        if source == "system":
            self._system(content, step, where)
        elif source == "user":
            self.append({"role": "user", "content": content})
        else:
            self._agent(step, content, where, calls)
        self._observation(step, where, calls, first if source == "agent" else None)
        self._keep_step(step, where, version, range(first, len(self.messages)))

    def _system(self, content: Any, step: dict[str, Any], where: str) -> None:
        extra = step.get("extra") if isinstance(step.get("extra"), dict) else {}
        if isinstance(extra.get("context_management"), dict):
            self.resets.append({"where": where, "step_id": step.get("step_id"), "message_index": len(self.messages) + 1,
                                **extra["context_management"]})
            self.flags.add("context_reset")
        if self.add_system(content if isinstance(content, str) else _text_of(content)):
            return  # several leading system steps: one system message
        self.flags.add("system_step_as_user")
        self.append({"role": "user", "content": content})

    def _agent(self, step: dict[str, Any], content: Any, where: str, calls: _Step) -> None:
        reasoning = step.get("reasoning_content")
        if reasoning is None and isinstance(content, str) and self.options.inline_reasoning:
            inline, visible = split_inline_reasoning(content)
            if inline is not None:
                reasoning, content = inline, visible
        tool_calls = step.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            raise Rejection("invalid_structure", f"{where}.tool_calls is not a list")
        entries = [self._call(call, f"{where}.tool_calls[{n}]", calls) for n, call in enumerate(tool_calls or [])]
        index = len(self.messages)
        self.append(assistant_message(content, reasoning if isinstance(reasoning, str) else None, entries))
        if step.get("is_copied_context") is True:
            self.untrained.add(index)
            self.flags.add("copied_context")
        if step.get("llm_call_count") == 0:
            self.untrained.add(index)
            self.flags.add("non_llm_step")
        self._tokens(step, where, index)

    def _call(self, call: Any, where: str, calls: _Step) -> dict[str, Any]:
        if not isinstance(call, dict) or not isinstance(call.get("function_name"), str) or not call["function_name"]:
            raise Rejection("invalid_structure", f"{where} is not a tool call with a function_name")
        call_id = call.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise Rejection("invalid_structure", f"{where} has no tool_call_id")
        if call_id in calls.calls:
            raise Rejection("invalid_structure", f"{where}: tool_call_id {call_id!r} twice in one step")
        # a chat holds one call per id: an id an earlier step used gets a suffix
        calls.calls[call_id] = self.unique_call_id(call_id)
        # arguments given as a string (not ATIF, which writes an object, but seen) are kept as written
        return self.function_call(calls.calls[call_id], call["function_name"], call.get("arguments", {}))

    def _observation(self, step: dict[str, Any], where: str, calls: _Step, assistant: int | None) -> None:
        """``assistant``: the index of the step's assistant message (None: not an agent step)."""
        observation = step.get("observation")
        if observation is None:
            return
        results = observation.get("results") if isinstance(observation, dict) else None
        if not isinstance(results, list):
            raise Rejection("invalid_structure", f"{where}.observation has no list of results")
        unlinked: list[dict[str, Any]] = []
        for number, result in enumerate(results):
            label = f"{where}.observation.results[{number}]"
            if not isinstance(result, dict):
                raise Rejection("invalid_structure", f"{label} is not an object")
            refs = result.get("subagent_trajectory_ref")
            if refs is not None:
                refs = refs if isinstance(refs, list) else [refs]  # an object in v1.0 / v1.1
                self.refs.extend({"where": label, "step_id": step.get("step_id"), "ref": ref} for ref in refs)
            has_content = result.get("content") is not None
            content = _content(result["content"], f"{label}.content") if has_content else None
            call_id = result.get("source_call_id")
            if call_id is None:
                if has_content:
                    unlinked.append({"role": "user", "content": content})
                continue
            if call_id not in calls.calls:
                raise Rejection("orphan_tool_output", f"{label} answers call {call_id!r}, which its step did not make")
            if call_id in calls.answered:
                self.keep("unmatched_tool_response", "unmatched_tool_responses",
                          {"where": label, "tool_call_id": calls.calls[call_id], "content": content})
                continue
            calls.answered.add(call_id)
            self.append({"role": "tool", "tool_call_id": calls.calls[call_id],
                         "content": content if has_content else ""})
        if unlinked and calls.calls and not calls.answered and assistant is not None:
            unlinked = self._unlinked_results(step, calls, assistant, unlinked)
        for message in unlinked:  # after the step's tool messages: the next prompt the model got
            self.unlinked.append({"step_id": step.get("step_id"), "message_index": len(self.messages)})
            self.flags.add("unlinked_observation")
            self.append(message)

    def _unlinked_results(self, step: dict[str, Any], calls: _Step, assistant: int,
                          unlinked: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """An agent step whose results name none of its calls (terminus-2 before harbor#2087,
        mini-swe-agent, swe-agent, any converter that drops the ids). One call and one result:
        the result answers that call, as Harbor's producers link them since harbor#2087
        (terminus-2's ``_terminal_observation_source_call_id``, swe-agent). Several calls
        sharing one result (terminus-2's keystroke batch and its one terminal screen): no
        result answers one call rather than another, so the step is written as Harbor's trace
        exporter writes every step (``traces_utils._extract_single_episode_conversation``):
        the calls as ``<tool_call>`` text after the model's message, not as chat calls (kept in
        ``metadata.atif.calls_as_text``), and the results as the next user turn. Returns the
        results left for the user turn."""
        if len(calls.calls) == 1 and len(unlinked) == 1:
            (call_id, message_id), = calls.calls.items()
            calls.answered.add(call_id)
            self.flags.add("sole_call_result")
            self.sole_call_links.append({"step_id": step.get("step_id"), "tool_call_id": message_id,
                                         "message_index": len(self.messages)})
            self.append({"role": "tool", "tool_call_id": message_id, "content": unlinked[0]["content"]})
            return []
        written = [harbor_tool_call_text(call) for call in step["tool_calls"]]
        message = self.messages[assistant]
        content = message["content"]
        if isinstance(content, list):
            message["content"] = [*content, {"type": "text", "text": "\n".join(written)}]
        else:
            message["content"] = "\n".join([content, *written] if content else written)
        del message["tool_calls"]
        self.flags.add("calls_as_text")
        self.calls_as_text.append({"step_id": step.get("step_id"), "message_index": assistant,
                                   "tool_calls": step["tool_calls"]})
        return unlinked

    def _tokens(self, step: dict[str, Any], where: str, index: int) -> None:
        metrics = step.get("metrics")
        if not isinstance(metrics, dict) or not any(metrics.get(key) is not None for key in TOKEN_KEYS):
            return
        prompt, generation, log_probs = (metrics.get(key) for key in TOKEN_KEYS)
        entry = {"prompt_token_ids": prompt, "generation_token_ids": generation, "generation_log_probs": log_probs}
        if isinstance(step.get("llm_call_count"), int) and step["llm_call_count"] > 1:
            # several calls' ids in one list: no call can be trained from them alone
            self.aggregated_tokens.append({"where": where, "message_index": index, **entry})
        elif (call := self.checked_tokens(where, prompt, generation, log_probs)) is not None:
            self.token_data.append({"message_index": index, **call})

    def _keep_step(self, step: dict[str, Any], where: str, version: str, messages: range) -> None:
        """Everything of a step the chat does not hold, so nothing is lost."""
        kept: dict[str, Any] = {"step_id": step.get("step_id"), "source": step.get("source"), "where": where,
                                "messages": list(messages)}
        for key in ("timestamp", "model_name", "reasoning_effort", "llm_call_count", "is_copied_context", "extra"):
            if step.get(key) is not None:
                kept[key] = step[key]
        if isinstance(step.get("reasoning_content"), str) and step.get("source") != "agent":
            kept["reasoning_content"] = step["reasoning_content"]
        metrics = step.get("metrics")
        if isinstance(metrics, dict):
            kept["metrics"] = {key: value for key, value in metrics.items() if key not in TOKEN_KEYS}
        call_extras = {call.get("tool_call_id"): call["extra"] for call in step.get("tool_calls") or []
                       if isinstance(call, dict) and call.get("extra") is not None}
        if call_extras:
            kept["tool_call_extras"] = call_extras
        observation = step.get("observation") if isinstance(step.get("observation"), dict) else {}
        result_extras = [{"result": number, **{key: result[key] for key in ("extra", "subagent_trajectory_ref")
                                               if result.get(key) is not None}}
                         for number, result in enumerate(observation.get("results") or [])
                         if isinstance(result, dict) and (result.get("extra") is not None
                                                          or result.get("subagent_trajectory_ref") is not None)]
        if result_extras:
            kept["result_extras"] = result_extras
        if step.get("source") != "agent" and step.get("tool_calls"):
            kept["tool_calls"] = step["tool_calls"]
        self.steps.append(kept)

    def atif_metadata(self, main: dict[str, Any], segments: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        agent = {key: value for key, value in (main.get("agent") or {}).items() if key != "tool_definitions"}
        meta: dict[str, Any] = {
            "schema_version": main.get("schema_version"),
            "agent": agent,
            "segments": [{"where": where, **{key: trajectory[key] for key in
                                             ("schema_version", "session_id", "trajectory_id", "notes",
                                              "final_metrics", "continued_trajectory_ref", "extra")
                                             if trajectory.get(key) is not None},
                          **({"agent": trajectory["agent"]} if trajectory is not main else {})}
                         for where, trajectory in segments],
            "steps": self.steps,
        }
        for key in ("session_id", "trajectory_id"):
            if main.get(key) is not None:
                meta[key] = main[key]
        if self.unlinked:
            meta["unlinked_results"] = self.unlinked
        if self.sole_call_links:
            meta["sole_call_results"] = self.sole_call_links
        if self.calls_as_text:
            meta["calls_as_text"] = self.calls_as_text
        if self.resets:
            meta["context_resets"] = self.resets
        if self.aggregated_tokens:
            meta["aggregated_token_data"] = self.aggregated_tokens
        return meta


def harbor_tool_call_text(call: dict[str, Any]) -> str:
    """An ATIF tool call as Harbor's trace exporter writes it into an assistant's text
    (``traces_utils._extract_single_episode_conversation``).

    >>> harbor_tool_call_text({"tool_call_id": "c", "function_name": "bash_command", "arguments": {"keystrokes": "ls"}})
    '<tool_call>\\n{"name": "bash_command", "arguments": {"keystrokes": "ls"}}\\n</tool_call>'
    """
    written = json.dumps({"name": call.get("function_name"), "arguments": call.get("arguments", {})}, ensure_ascii=False)
    return f"<tool_call>\n{written}\n</tool_call>"


def _prompt_length(messages: list[dict[str, Any]], first_agent: int, untrained: set[int]) -> int:
    """Up to the first assistant message; assistant messages that are context only (copied
    from an earlier segment, non-LLM dispatch) extend it while a trainable one follows."""
    if all(i in untrained for i, m in enumerate(messages) if m["role"] == "assistant"):
        return first_agent
    length = first_agent
    while length in untrained:
        length = next(i for i in range(length + 1, len(messages)) if messages[i]["role"] == "assistant")
    return length


def _content(value: Any, where: str) -> Any:
    """A message or result content (a string, or v1.6 content parts) -> Chat content: text
    parts joined with newlines, or a list of parts when images are present (their path as
    the URL, as the NeMo Gym source writes input images). Audio has no Chat form."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise Rejection("invalid_structure", f"{where} is neither a string nor a list of content parts")
    parts: list[dict[str, Any]] = []
    for number, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(text_part(part["text"]))
        elif kind == "image" and isinstance(part.get("source"), dict) and isinstance(part["source"].get("path"), str):
            parts.append(image_part(part["source"]["path"]))
        elif kind == "audio":
            raise Rejection("unsupported_content", f"{where}[{number}] is an audio part: trajectories hold text and "
                                                   "images only")
        else:
            raise Rejection("invalid_structure", f"{where}[{number}] is not a text or image content part")
    return content_from_parts(parts)


def _text_of(content: list[dict[str, Any]]) -> str:
    return "\n".join(part["text"] if part["type"] == "text" else part["image_url"]["url"] for part in content)



# ---------------------------------------------------------------- subagents


def _subagents(trial: _Trial, segments: list[tuple[str, dict[str, Any]]],
               sidechains: dict[str, list[dict[str, Any]]], chat: _Chat,
               options: ConversionConfig) -> list[dict[str, Any]]:
    """Every subagent of the trial, converted by the same rules, with where it was named.

    Resolved like Harbor: a ref's ``trajectory_path`` is relative to the referring file's
    folder, its ``trajectory_id`` names an embedded trajectory. Subagent files and embedded
    trajectories no ref names are kept too (``"ref": None``)."""
    used_paths = {path for path, _ in segments}
    embedded = {}
    for where, trajectory in segments:
        for number, child in enumerate(trajectory.get("subagent_trajectories") or []):
            key = child.get("trajectory_id") if isinstance(child, dict) else None
            if not isinstance(key, str) or key in embedded:  # unnamed, or a second child of that id
                key = f"{where}#{number}"
            embedded[key] = child
    subagents: list[dict[str, Any]] = []
    folder = posixpath.dirname(trial.main_path or "")
    for named in chat.refs:
        ref = named["ref"] if isinstance(named["ref"], dict) else {}
        entry = {"where": named["where"], "step_id": named["step_id"], "ref": named["ref"]}
        path = ref.get("trajectory_path")
        if isinstance(ref.get("trajectory_id"), str) and ref["trajectory_id"] in embedded:
            entry.update(_subagent(embedded.pop(ref["trajectory_id"]), "embedded", options, chat))
        elif isinstance(path, str) and posixpath.normpath(posixpath.join(folder, path)) in trial.files:
            resolved = posixpath.normpath(posixpath.join(folder, path))
            used_paths.add(resolved)
            entry.update(_subagent(trial.files[resolved], resolved, options, chat))
        elif (found := _by_session_id(ref, trial, used_paths, embedded)) is not None:
            kind, key = found
            if kind == "file":
                used_paths.add(key)
            entry.update(_subagent(trial.files[key] if kind == "file" else embedded.pop(key),
                                   key if kind == "file" else "embedded", options, chat))
        else:
            entry["missing"] = True
            chat.flags.add("missing_subagent_trajectory")
        subagents.append(entry)
    for key, child in embedded.items():
        subagents.append({"where": "subagent_trajectories", "ref": None, **_subagent(child, key, options, chat)})
    for path in sorted(set(trial.files) - used_paths):
        subagents.append({"where": path, "ref": None, **_subagent(trial.files[path], path, options, chat)})
    for agent_id, steps in sidechains.items():
        subagents.append({"where": "is_sidechain", "ref": {"agent_id": agent_id},
                          **_sidechain(steps, agent_id, trial.main["schema_version"], options, chat)})
    return subagents


def _by_session_id(ref: dict[str, Any], trial: _Trial, used_paths: set[str],
                   embedded: dict[str, Any]) -> tuple[str, str] | None:
    """Before v1.7 a ref's ``session_id`` was its resolution key (``{"session_id"}`` alone
    was a valid ref): for a ref naming no trajectory id or path, the one trial file (not yet
    resolved) or embedded trajectory whose ``session_id`` it is, as ("file", path) or
    ("embedded", key); None when none or several have it (v1.7 lets sibling subagents share
    one, so it decides nothing then). A ref whose path or id names nothing stays missing, and
    so does a session-id ref in a v1.7 or later trajectory, which Harbor's models refuse."""
    session_id = ref.get("session_id")
    if (not isinstance(session_id, str) or not session_id or trial.main["schema_version"] not in VERSIONS[:7]
            or ref.get("trajectory_path") is not None or ref.get("trajectory_id") is not None):
        return None
    found = [("file", path) for path, child in trial.files.items()
             if path not in used_paths and isinstance(child, dict) and child.get("session_id") == session_id]
    found += [("embedded", key) for key, child in embedded.items()
              if isinstance(child, dict) and child.get("session_id") == session_id]
    return found[0] if len(found) == 1 else None


def _subagent(trajectory: Any, where: str, options: ConversionConfig, parent: _Chat) -> dict[str, Any]:
    try:
        checked = _checked(trajectory, where)
        chat = _Chat(options)
        chat.add_trajectory(checked, where)
    except Rejection as rejection:
        parent.flags.add("invalid_subagent_trajectory")
        return {"error": f"{rejection.reason}: {rejection.detail}", "raw": trajectory}
    return _subagent_entry(chat, checked, where)


def _sidechain(steps: list[dict[str, Any]], agent_id: str, version: str, options: ConversionConfig,
               parent: _Chat) -> dict[str, Any]:
    chat = _Chat(options)
    try:
        for position, step in enumerate(steps):
            chat.add_step(step, f"is_sidechain[{agent_id}][{position}]", version)
    except Rejection as rejection:
        parent.flags.add("invalid_subagent_trajectory")
        return {"error": f"{rejection.reason}: {rejection.detail}", "raw": steps}
    return _subagent_entry(chat, {"agent": {}, "schema_version": version}, f"is_sidechain[{agent_id}]")


def _subagent_entry(chat: _Chat, trajectory: dict[str, Any], where: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "messages": chat.messages,
        "tools": _tools((trajectory.get("agent") or {}).get("tool_definitions")),
        "quality_flags": sorted(chat.flags),
        "atif": chat.atif_metadata(trajectory, [(where, trajectory)]),
    }
    if chat.untrained:
        entry["untrained_messages"] = sorted(chat.untrained)
    if chat.token_data:
        entry["token_data"] = chat.token_data
    if chat.kept:
        entry.update(chat.kept)
    if trajectory.get("subagent_trajectories"):  # a subagent's own subagents: kept as written, not converted
        entry["subagent_trajectories"] = trajectory["subagent_trajectories"]
    return entry


# ---------------------------------------------------------------- trial fields


def _reward(trial: _Trial) -> tuple[float | None, dict[str, Any] | None, set[str], dict[str, Any]]:
    """(reward, reward components, flags, what to keep in metadata) of the trial: the
    verifier's rewards in ``result.json``, else its reward file. Never 0 for none."""
    result = trial.result or {}
    verifier = result.get("verifier_result") if isinstance(result.get("verifier_result"), dict) else None
    rewards = verifier.get("rewards") if verifier else None
    kept: dict[str, Any] = {}
    if rewards is None and trial.reward_file is not None:
        path, value = trial.reward_file
        kept["reward_file"] = path
        if path == REWARD_TXT:
            try:
                rewards = {"reward": float(value.strip())}
            except ValueError:
                raise Rejection("invalid_reward", f"{REWARD_TXT} holds {value.strip()[:40]!r}, not a number") from None
        else:
            rewards = value
    if rewards is None:
        return None, None, set(), kept
    if not isinstance(rewards, dict) or not rewards:
        raise Rejection("invalid_reward", f"the verifier's rewards are {type(rewards).__name__}, not a map of numbers")
    for key, value in rewards.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Rejection("invalid_reward", f"reward {key!r} is a {type(value).__name__}, not a number")
        if not math.isfinite(value):
            raise Rejection("non_finite_reward", f"reward {key!r} is {value}")
    components = rewards if len(rewards) > 1 else None
    # "reward" is Harbor's own key; with other names, only a single one is unambiguous
    reward = rewards.get("reward", next(iter(rewards.values())) if len(rewards) == 1 else None)
    if result.get("reward_valid") is False:
        return None, components or dict(rewards), {"harbor_reward_invalid"}, kept
    return (None if reward is None else float(reward)), components, set(), kept


def _token_totals(trajectories: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    """(input tokens, output tokens) over the segments: their ``final_metrics``, else the
    sum of their steps' metrics. Before v1.2 ``prompt_tokens`` excluded cached tokens."""
    inputs = outputs = 0
    known_inputs = known_outputs = False
    for trajectory in trajectories:
        final = trajectory.get("final_metrics") if isinstance(trajectory.get("final_metrics"), dict) else {}
        steps = [s.get("metrics") for s in trajectory["steps"] if isinstance(s, dict) and isinstance(s.get("metrics"), dict)
                 and not s.get("is_copied_context")]

        def total(final_key: str, step_key: str) -> int | None:
            if count_of(final.get(final_key)) is not None:
                return final[final_key]
            values = [count_of(metrics.get(step_key)) for metrics in steps]
            return sum(v for v in values if v is not None) if any(v is not None for v in values) else None

        prompt, completion = total("total_prompt_tokens", "prompt_tokens"), total("total_completion_tokens",
                                                                                  "completion_tokens")
        if prompt is not None and trajectory["schema_version"] in ("ATIF-v1.0", "ATIF-v1.1"):
            prompt += total("total_cached_tokens", "cached_tokens") or 0
        if prompt is not None:
            inputs, known_inputs = inputs + prompt, True
        if completion is not None:
            outputs, known_outputs = outputs + completion, True
    return (inputs if known_inputs else None), (outputs if known_outputs else None)


def _tools(definitions: Any) -> list[dict[str, Any]] | None:
    """``agent.tool_definitions`` (OpenAI function-calling shape) as Chat Completions tools."""
    if definitions is None:
        return None
    if not isinstance(definitions, list):
        raise Rejection("invalid_structure", "agent.tool_definitions is not a list")
    tools = []
    for number, tool in enumerate(definitions):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise Rejection("invalid_structure", f"agent.tool_definitions[{number}] is not a function definition")
        tools.append({"type": "function", "function": function})
    return tools or None


def _model(trajectory: dict[str, Any]) -> str | None:
    agent = trajectory.get("agent") or {}
    if isinstance(agent.get("model_name"), str) and agent["model_name"]:
        return agent["model_name"]
    return next((step["model_name"] for step in trajectory["steps"]
                 if isinstance(step, dict) and isinstance(step.get("model_name"), str) and step["model_name"]), None)


def _rollout_id(trial: _Trial) -> str | None:
    if trial.gym_entry is not None and isinstance(trial.main.get("trajectory_id"), str):
        return trial.main["trajectory_id"]  # Gym's export: "<session>:<task index>:<rollout index>"
    result = trial.result or {}
    # the trial names the rollout; a session id may be shared by a run's subagents and segments
    for value in (result.get("trial_name"), result.get("id"), trial.name, trial.main.get("trajectory_id"),
                  trial.main.get("session_id")):
        if isinstance(value, str) and value:
            return value
    return None


FORMAT = SourceFormat(
    name=SOURCE_FORMAT,
    shape="a Harbor ATIF trajectory (schema_version, agent, steps)",
    detect=looks_like_atif,
    convert=convert_atif,
    # Harbor's agents (terminus-2, claude-code, ...) are harnesses, no NeMo Gym agent servers:
    # a task goes to the agent the config names, none by default
    agent_ref_setting="atif_agent_ref",
    # a Harbor job folder: <job>/<trial>/agent/trajectory.json beside <trial>/result.json
    folder_records=FolderRecords(main=MAIN, belongs=belongs_to_trial, manifest=GYM_MANIFEST,
                                 manifest_member=GYM_EXPORTED),
)
