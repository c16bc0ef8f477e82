"""NeMo Gym rollout rows (``ng_collect_rollouts`` / ``gym eval run``) -> canonical trajectories.

The turn structure is NeMo Gym's own (the reading is ``chat/responses.py``, which the
``grpo`` export reads its rows back with): its model servers read a conversation with
``ResponsesConverter.responses_to_chat_completion_create_params``
(``nemo_gym/responses_converter.py``), fed the request input followed by the output items.
Everything the model produced between two items it did not produce is **one** assistant
message; the items it did not produce are a tool output (``function_call_output``, or a
chat-shaped ``role: tool`` message), a user message and a system/developer message. So
consecutive assistant ``message`` items become one message (their text joined with a
newline), every ``reasoning`` item of the turn is gathered into its ``reasoning_content``
(also one that comes after a ``function_call``), and every call of the turn is kept in order.
Where we differ from that converter, on purpose (docs/sources.md lists these too):

- reasoning goes to ``reasoning_content``, not into the text as ``<think>`` blocks;
- text pieces are joined with a newline rather than glued together;
- ``developer`` becomes ``system``, and leading system/developer messages merge into one;
  a system message after other turns is rejected (``misplaced_system_message``: chat
  templates accept a system message only first);
- item types without a Chat Completions form (web search, MCP, computer use) are kept
  whole in ``metadata["unknown_items"]`` instead of failing the rollout; one whose type
  ends in ``_output`` is an environment result, so it ends the model's turn like a tool
  output does;
- an id the agent reuses (for the first call of every turn, or for two calls of one turn)
  is made unique in the messages (``<id>_2``, ...), since a chat holds one call per id; an
  output naming that id answers the first open call that named it;
- a tool output that answers no open call of the turn before it is kept in metadata
  (``late_tool_responses`` / ``unmatched_tool_responses``, flagged) rather than written
  where no chat template can render it; one that answers a call never made is rejected
  (``orphan_tool_output``).

The prompt is the request's input when it holds a user turn. Harnesses that record the
whole conversation in ``response.output`` leave the input without one; then the prompt is
the input plus the output up to the first assistant turn after a user turn, and the
request kept for RL (GRPO) rows gets those items as its input. A rollout without any user
turn is ``no_prompt``.

Options (``ConversionConfig``): ``inline_reasoning`` reads a ``<think>…</think>`` block
at the start of assistant text (a reasoning model served without a reasoning parser) as
``reasoning_content``, as vLLM's ``deepseek_r1`` / ``qwen3`` reasoning parsers would have;
``per_step_output`` decides what an ``output`` recorded as a list of per-step transcripts
(Aviary's ``return_transitions``) becomes: its final transcript, or a rejection.

Token data (``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs``) on
output items is kept per model call, tied to the assistant message it belongs to, the way
NeMo RL reads it (items with an empty ``generation_token_ids`` carry nothing to train on).

Quality flags (``QUALITY_FLAGS``), never fatal: ``unparseable_tool_call`` when a call's
``arguments`` string is not JSON (kept as is); ``hermes_markup_in_content`` when text that
the Hermes rendering writes holds a literal Hermes tag, which would turn into spurious
structure if the conversation were rendered to Hermes and parsed again;
``late_tool_response`` / ``unmatched_tool_response`` (see above); ``malformed_token_data``
when token data is present but not lists of the right types and lengths (kept in metadata).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from trajectory_assets.chat.hermes_markup import HERMES_MARKUP_FLAG, has_hermes_markup
from trajectory_assets.chat.messages import prompt_key
from trajectory_assets.chat.responses import ResponsesChat, continues_turn, convert_tools, request_input
from trajectory_assets.chat.trajectory import Rejection, Trajectory
from trajectory_assets.config import ConversionConfig
from trajectory_assets.jsonutil import canonical, sha256_hex
from trajectory_assets.io.file_layouts import SideFile
from trajectory_assets.sources.format import InputsFile, SourceFormat, count_of

SOURCE_FORMAT = "nemo_gym"
DEFAULT_OPTIONS = ConversionConfig()

# NeMo Gym's observability record (nemo_gym/rollout_observability.py, attached by
# rollout_collection.py ``_attach_trajectory_record``): the per-rollout ``ng_trajectory``
# (TrajectoryRecord, schema_version "1.0"), the agent's ``ng_agent_observations``
# (AgentObservationBundle: invocations, tool calls, context compactions, sandboxes) and the
# ``ng_model_call_capture`` (calls, gaps). They hold every model call's full request and
# response: a second copy of the conversation, so only a summary of them is kept.
OBSERVABILITY_KEYS = ("ng_trajectory", "ng_agent_observations", "ng_model_call_capture")
# token_id_capture/delivery.py: the token capture's health (kept in metadata); its ``error`` is
# why it set mask_sample
TOKEN_CAPTURE_KEY = "_ng_token_capture"
# rollout_collection.py: a row flagged so is written nowhere (a kill-shaped failure); judge.py
# ``judge_failsafe``: the judge's error on a row of class judge_failed; a terminal failure is never retried
NO_PERSIST_KEY, TERMINAL_KEY, JUDGE_ERROR_KEY = "_ng_no_persist", "_ng_failure_terminal", "_ng_failure_judge_error"

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
        "_ng_rollout_id",
        "agent_ref",
        "mask_sample",
        "task_type",
        *OBSERVABILITY_KEYS,  # summarized (``observability_of``), never copied whole
    }
)
# the collector's keys that the materialized inputs share with the rollouts: the rest of an
# input row is what the verifier was given (expected_answer, ...)
COLLECTOR_INPUT_KEYS = frozenset({"responses_create_params", "agent_ref", "_ng_task_index", "_ng_rollout_index",
                                  "_ng_rollout_id", "_ng_attempt_index"})
FAILURE_CLASS_KEY = "_ng_failure_class"
FINISHED_STATUSES = frozenset({None, "completed"})
QUALITY_FLAGS = (
    "unparseable_tool_call",  # a call whose arguments string is not JSON
    HERMES_MARKUP_FLAG,
    "late_tool_response",  # a tool output for a call of an earlier turn (kept in metadata)
    "unmatched_tool_response",  # a second tool output for an answered call (kept in metadata)
    "malformed_token_data",  # token ids / log probs of the wrong shape (kept in metadata)
    "verification_skipped",  # the agent skipped the verifier: its reward is a placeholder (kept in metadata)
    # ng_agent_observations holds a context_compaction: the agent replaced turns with a summary
    # (as Hermes' compressor does; the events are in metadata["ng_observability"]["compactions"])
    "compressed",
    # Gym's observability record names evidence it could not capture (ObservationGap; the codes
    # are in metadata["ng_observability"]["gaps"])
    "observability_gap",
)
_REASON_UNSAFE = re.compile(r"[^a-z0-9_]+")


def looks_like_rollout(record: dict[str, Any]) -> bool:
    return "responses_create_params" in record and ("response" in record or "output" in record)


def failure_rejection(record: dict[str, Any]) -> Rejection | None:
    """A row of the collector's failures sidecar (``<stem>_failures.jsonl``): never a
    reward-0 sample. Its reason is ``ng_failure_<class>``, so the report counts each class;
    the detail says whether Gym marked it terminal (never retried) and the judge's error of a
    ``judge_failed`` row (judge.py ``judge_failsafe``). A row marked ``_ng_no_persist`` is
    one Gym writes nowhere (a kill-shaped failure, re-dispatched on resume): ``ng_no_persist``."""
    if record.get(NO_PERSIST_KEY):
        return Rejection("ng_no_persist", "NeMo Gym marks this row not to be written anywhere (a kill-shaped "
                                          "failure, re-dispatched on resume)")
    failure_class = record.get(FAILURE_CLASS_KEY)
    if failure_class is None:
        return None
    name = _REASON_UNSAFE.sub("_", str(failure_class).lower()).strip("_")[:60] or "unknown"
    detail = f"NeMo Gym recorded a failed attempt of class {failure_class!r}"
    if record.get(TERMINAL_KEY):
        detail += " (terminal: never retried)"
    if record.get(JUDGE_ERROR_KEY) is not None:
        detail += f"; judge error: {str(record[JUDGE_ERROR_KEY])[:500]}"
    return Rejection(f"ng_failure_{name}", detail)


def mask_reason(record: dict[str, Any]) -> str | None:
    """Why a masked rollout is masked, where Gym says it: the token capture's ``error``
    (token_id_capture/delivery.py writes it in ``_ng_token_capture`` when it sets mask_sample).

    >>> mask_reason({"mask_sample": True, "_ng_token_capture": {"n_calls": 0, "error": "no rollout id"}})
    'no rollout id'
    """
    capture = record.get(TOKEN_CAPTURE_KEY)
    error = capture.get("error") if isinstance(capture, dict) else None
    return str(error) if error and is_masked(record) else None


def reward_provenance_of(record: dict[str, Any]) -> dict[str, Any]:
    """What the row says of where its reward came from: the agent that had it verified
    (``agent_ref``: Gym maps each agent to its resources server, whose ``/verify`` gave the
    reward) and the judge models of a judge environment (``judge_evaluations[*]``, as
    resources_servers/equivalence_llm_judge/app.py ``JudgeEvaluation`` records them: the
    judge's response's ``model``, else its request's). Ingest adds what the source's files say
    (``reverification.source_provenance``).

    >>> reward_provenance_of({"agent_ref": {"name": "math"}, "judge_evaluations": [
    ...     {"responses_create_params": {"model": "j"}, "response": {"model": "judge-1"}}]})
    {'verifier': 'math', 'judge_models': ['judge-1']}
    """
    agent_ref = record.get("agent_ref")
    verifier = agent_ref.get("name") if isinstance(agent_ref, dict) else None
    judges: list[str] = []
    evaluations = record.get("judge_evaluations")
    for evaluation in evaluations if isinstance(evaluations, list) else []:
        if not isinstance(evaluation, dict):
            continue
        response, request = evaluation.get("response"), evaluation.get("responses_create_params")
        model = (response.get("model") if isinstance(response, dict) else None) or (
            request.get("model") if isinstance(request, dict) else None)
        if isinstance(model, str) and model and model not in judges:
            judges.append(model)
    return {"verifier": verifier if isinstance(verifier, str) else None, "judge_models": judges}


def observability_of(record: dict[str, Any]) -> dict[str, Any] | None:
    """A summary of Gym's observability record (None: the row has none): counts of what
    ``ng_trajectory`` holds (invocations, the subagents among them, turns, tool and model
    calls), every gap's code (``ObservationGap``; those of ``ng_agent_observations`` and of
    ``ng_model_call_capture`` too), every context compaction (``ContextCompactionObservation``
    without its model-call references) and every sandbox (``SandboxObservation``). The
    payloads (conversations, model calls' requests and responses) are left out.

    >>> observability_of({"ng_agent_observations": {"source": "a", "records": [
    ...     {"kind": "context_compaction", "invocation_id": "i", "trigger": "tokens", "outcome": "completed"}],
    ...     "gaps": [{"code": "turns_unavailable"}]}})["compactions"]
    [{'invocation_id': 'i', 'trigger': 'tokens', 'outcome': 'completed'}]
    """
    if not any(key in record for key in OBSERVABILITY_KEYS):
        return None
    summary: dict[str, Any] = {}
    gaps: list[str] = []
    trajectory = record.get("ng_trajectory")
    if isinstance(trajectory, dict):
        invocations = [i for i in trajectory.get("invocations") or [] if isinstance(i, dict)]
        summary["schema_version"] = trajectory.get("schema_version")
        summary["invocations"] = len(invocations)
        summary["subagents"] = sum(1 for i in invocations if i.get("parent_invocation_id") is not None)
        for key in ("turns", "tool_calls", "model_calls"):
            value = trajectory.get(key)
            summary[key] = len(value) if isinstance(value, list) else 0
    compactions, sandboxes = [], []
    for key in OBSERVABILITY_KEYS:
        value = record.get(key)
        for gap in (value.get("gaps") if isinstance(value, dict) else None) or []:
            if isinstance(gap, dict) and isinstance(gap.get("code"), str) and gap["code"] not in gaps:
                gaps.append(gap["code"])
    observations = record.get("ng_agent_observations")
    for item in (observations.get("records") if isinstance(observations, dict) else None) or []:
        if not isinstance(item, dict):
            continue
        if item.get("kind") == "context_compaction":
            compactions.append({key: value for key, value in item.items() if key != "kind" and value is not None
                                and key not in ("model_calls", "before_model_call", "after_model_call")})
        elif item.get("kind") == "sandbox":
            sandboxes.append({key: value for key, value in item.items() if key != "kind" and value is not None})
    summary["gaps"] = gaps
    if compactions:
        summary["compactions"] = compactions
    if sandboxes:
        summary["sandboxes"] = sandboxes
    return summary


def is_masked(record: dict[str, Any]) -> bool:
    """NeMo Gym's ``mask_sample``: not to be trained on (a token capture that is incomplete or
    ambiguous, a reward a timeout or an infrastructure failure made meaningless). Token
    capture and some agents write it at the top level, the SWE and simulation agents in
    ``instance_config`` (where NeMo RL reads it), so either place counts.

    >>> is_masked({"mask_sample": True}), is_masked({"instance_config": {"mask_sample": True}})
    (True, True)
    >>> is_masked({"mask_sample": None, "instance_config": {"mask_sample": False}})
    False
    """
    instance_config = record.get("instance_config")
    return record.get("mask_sample") is True or (
        isinstance(instance_config, dict) and instance_config.get("mask_sample") is True)


def task_inputs_of(input_row: dict[str, Any]) -> dict[str, Any]:
    """What a materialized input row gave the verifier: every key but the collector's own."""
    return {key: value for key, value in input_row.items() if key not in COLLECTOR_INPUT_KEYS}


def convert_rollout(
    record: dict[str, Any],
    *,
    source_id: str,
    options: ConversionConfig = DEFAULT_OPTIONS,
    inputs: Mapping[tuple[int, int], dict[str, Any]] | None = None,
) -> Trajectory:
    """Convert one parsed rollout row. ``source_id`` scopes ``_ng_task_index``; ``inputs``
    are the verifier inputs of the file's materialized inputs, by (``_ng_task_index``,
    ``_ng_rollout_index``)."""
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
    # simple_agent's skip_verification writes a configured constant (skip_verification_reward,
    # 0.0 by default) as the reward: no verifier scored the rollout, so it has no reward
    verification_skipped = record.get("verification_skipped") is True
    reward = None if verification_skipped else _reward(record)

    input_items, instructions = request_input(request)

    transcripts = _per_step_transcripts(output, options)
    conversation, input_length, stream = _read_conversation(instructions, input_items, output, transcripts, options)
    messages = conversation.messages
    if any(m["role"] == "user" for m in messages[:input_length]):
        prompt_length = input_length
    else:
        prompt_length = _first_model_turn_after_user(messages)
        if prompt_length is None:
            raise Rejection("no_prompt", "no user turn in the request input or in the output")
    if not any(m["role"] == "assistant" for m in messages[prompt_length:]):
        raise Rejection("no_model_output", "the model produced no assistant turn (empty output)")
    if prompt_length > input_length:
        # the prompt came from the output: the request an RL row replays must hold it
        request = {**request, "input": stream[: conversation.origins[prompt_length]]}

    tools, unconverted_tools = convert_tools(request.get("tools"))
    prompt = messages[:prompt_length]
    task_index = _optional_int(record.get("_ng_task_index"), "_ng_task_index")
    rollout_index = _optional_int(record.get("_ng_rollout_index"), "_ng_rollout_index")
    task_key = task_key_for(source_id, task_index, prompt, tools)

    metadata = {key: value for key, value in record.items() if key not in KNOWN_KEYS}
    metadata.update(conversation.kept)
    if transcripts:
        metadata["per_step_transcripts"] = len(transcripts)  # the final one is the conversation
    if conversation.unknown:
        metadata["unknown_items"] = conversation.unknown
    flags = set(conversation.flags)
    if verification_skipped:
        flags.add("verification_skipped")
        metadata["placeholder_reward"] = record.get("reward")
    if any(has_hermes_markup(message) for message in messages):
        flags.add(HERMES_MARKUP_FLAG)
    if unconverted_tools:
        metadata["unconverted_tools"] = unconverted_tools
    observed = observability_of(record)
    if observed is not None:
        metadata["ng_observability"] = observed
        if observed.get("compactions"):
            flags.add("compressed")
        if observed["gaps"]:
            flags.add("observability_gap")
    if (why_masked := mask_reason(record)) is not None:
        metadata["mask_reason"] = why_masked
    if "agent_ref" in record:
        metadata["agent_ref"] = record["agent_ref"]
    status = response.get("status") if response is not None else None
    usage = response.get("usage") if response is not None else None
    model = (response or {}).get("model") or request.get("model")
    rollout_id = record.get("_ng_rollout_id")
    given = None  # what the verifier was given for this rollout
    if inputs is not None and task_index is not None and rollout_index is not None:
        given = inputs.get((task_index, rollout_index))

    return Trajectory(
        source_format=SOURCE_FORMAT,
        messages=messages,
        prompt_length=prompt_length,
        task_key=task_key,
        tools=tools,
        reward=reward,
        reward_components=_optional_dict(record.get("reward_components"), "reward_components"),
        task_index=task_index,
        rollout_index=rollout_index,
        rollout_id=str(rollout_id) if rollout_id is not None else None,
        agent_name=agent_name(record.get("agent_ref")),
        model=model if isinstance(model, str) and model else None,
        task_type=_task_type(record),
        completed=status in FINISHED_STATUSES,
        status=status if isinstance(status, str) else None,
        mask_sample=is_masked(record),
        input_tokens=_usage(usage, "input_tokens", "prompt_tokens"),
        output_tokens=_usage(usage, "output_tokens", "completion_tokens"),
        total_tokens=_usage(usage, "total_tokens"),
        unknown_items=len(conversation.unknown),
        request=request,
        task_inputs=given,
        token_data=conversation.token_data or None,
        quality_flags=sorted(flags),
        metadata=metadata,
        reward_provenance=reward_provenance_of(record),
    )


def _read_conversation(
    instructions: str | None,
    input_items: list[Any],
    output: list[Any],
    transcripts: list[list[Any]] | None,
    options: ConversionConfig,
) -> tuple[ResponsesChat, int, list[Any]]:
    """(the conversation, how many of its messages came from the input, the item stream
    that its ``origins`` index)."""

    def with_request() -> ResponsesChat:
        chat = ResponsesChat(instructions, inline_reasoning=options.inline_reasoning)
        chat.add_items(input_items, "responses_create_params.input")
        return chat

    if transcripts is None:
        conversation = with_request()
        input_length = _close_request(conversation, output, options)
        conversation.add_items(output, "output", offset=len(input_items), tokens=True)
        conversation.end_turn()
        return conversation, input_length, [*input_items, *output]
    final = transcripts[-1]
    where = f"output[{len(transcripts) - 1}]"
    # A transcript is the model's whole context at that step, so it starts with the
    # request's own input (Aviary writes agent_state.input): then it is the conversation.
    request_only = with_request()
    input_length = request_only.end_turn()
    alone = ResponsesChat(instructions, inline_reasoning=options.inline_reasoning)
    alone.add_items(final, where, tokens=True)
    alone.end_turn()
    if alone.messages[:input_length] == request_only.messages:
        return alone, input_length, final
    conversation = with_request()
    input_length = _close_request(conversation, final, options)
    conversation.add_items(final, where, offset=len(input_items), tokens=True)
    conversation.end_turn()
    return conversation, input_length, [*input_items, *final]


def _close_request(conversation: ResponsesChat, output: list[Any], options: ConversionConfig) -> int:
    """Ends the request input's part of the conversation; returns how many messages it holds.

    NeMo Gym's converter reads the input followed by the output as one stream, so model items
    at the end of the input and at the start of the output are one turn (``merge``, the
    default): that message is the model's, after the prompt. Otherwise the input's model
    items are a turn of their own, in the prompt.

    >>> from trajectory_assets.config import ConversionConfig
    >>> merged = ResponsesChat()
    >>> merged.add_items([{"role": "user", "content": "q"}, {"type": "reasoning", "summary": []}], "input")
    >>> _close_request(merged, [{"type": "function_call", "name": "f", "call_id": "c"}], ConversionConfig())
    1
    """
    continues = bool(output) and isinstance(output[0], dict) and continues_turn(output[0])
    if options.request_boundary == "merge" and continues:
        return len(conversation.messages)  # the open turn goes on in the output
    return conversation.end_turn()


def _per_step_transcripts(output: list[Any], options: ConversionConfig) -> list[list[Any]] | None:
    if not output or not any(isinstance(item, list) for item in output):
        return None
    if not all(isinstance(item, list) for item in output):
        raise Rejection("invalid_structure", "output mixes items and lists of items")
    if options.per_step_output == "reject":
        raise Rejection("per_step_transcripts",
                        f"output holds {len(output)} per-step transcripts (conversion.per_step_output: reject)")
    return output


def _first_model_turn_after_user(messages: list[dict[str, Any]]) -> int | None:
    seen_user = False
    for index, message in enumerate(messages):
        if message["role"] == "user":
            seen_user = True
        elif message["role"] == "assistant" and seen_user:
            return index
    return len(messages) if seen_user else None


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
    counts = (count_of(usage.get(key)) for key in keys)
    return next((count for count in counts if count is not None), None)


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


# What a Gym run writes beside its rollouts, besides its inputs, failures and metrics: every one
# named from the rollouts file's path by Gym's ``nemo_gym/utils/path_utils.py`` (its documented
# API: ``aggregation_sources_path_for``, ``batch_status_path_for``, ``resolved_config_path_for``,
# ``run_summary_path_for``, and per exporter of ``nemo_gym/exporters/__init__.py``'s
# EXPORTER_REGISTRY, ``export_done_path_for`` / ``exporter_run_id_path_for``); the health
# check's two reports, one per results folder (``nemo_gym/health/types.py``
# QUALITY_SUMMARY_FILENAME, ROLLOUT_VERDICTS_FILENAME); the data processor's prepared rows
# (``train_data_utils.py`` ``_collate_samples_single_type``: ``<dataset>_prepare.jsonl``
# beside the dataset) and the collated collector input (``cli/eval.py``
# ``e2e_rollout_collection``: ``<rollouts stem>/preprocessed_datasets/``). None holds a rollout:
# listed in the batch, never read as records.
RUN_FOLDER_FILES = (
    SideFile("{stem}_sources.json"),
    SideFile("{stem}_batch_status.json"),
    SideFile("{stem}_resolved_config.yaml"),
    SideFile("{stem}_run_summary.json"),
    *(SideFile(f"{{stem}}_{exporter}_{marker}") for exporter in ("mlflow", "wandb")
      for marker in ("export_done", "run_id")),
    SideFile("quality_summary.json", in_folder=True),
    SideFile("rollout_verdicts.jsonl", in_folder=True),
    SideFile("*_prepare.jsonl", in_folder=True),
    SideFile("{stem}/preprocessed_datasets/"),
)


def input_row(row: Any) -> tuple[tuple[int, int], dict[str, Any]] | None:
    """A row of the materialized inputs: its (``_ng_task_index``, ``_ng_rollout_index``) and
    what it gave the verifier; None for a line that is no input row."""
    key = (row.get("_ng_task_index"), row.get("_ng_rollout_index")) if isinstance(row, dict) else None
    if key is None or not all(isinstance(index, int) and not isinstance(index, bool) for index in key):
        return None
    return key, task_inputs_of(row)


FORMAT = SourceFormat(
    name=SOURCE_FORMAT,
    shape="a NeMo Gym rollout (responses_create_params with response.output or output)",
    detect=looks_like_rollout,
    convert=convert_rollout,
    refuse=failure_rejection,
    # a rollout names the NeMo Gym agent that ran it (agent_ref, else its agent's name); a task
    # whose rollout names none goes to grpo.default_agent_ref
    agent_ref_setting="default_agent_ref", agent_ref_from_record=True,
    # the collector writes <stem>_materialized_inputs.jsonl beside <stem>.jsonl: the input rows,
    # with what the verifier was given (expected_answer, ...)
    inputs_file=InputsFile("_materialized_inputs", input_row),
    # what the collector and the reward profiler write beside <stem>.jsonl: per-agent metrics
    # (rollout_collection.py ``_call_aggregate_metrics``; ``_agent_metrics.json`` is the older
    # name, still written by reward_profile.py ``write_to_disk``) and per-task reward profiles
    side_files=(SideFile("{stem}_aggregate_metrics.json"), SideFile("{stem}_reward_profiling.jsonl"),
                SideFile("{stem}_agent_metrics.json"), *RUN_FOLDER_FILES),
)
