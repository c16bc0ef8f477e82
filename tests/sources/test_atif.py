"""Harbor ATIF -> canonical trajectories: the real fixtures lose nothing, and one test per
edge case of the research notes (§5) that applies. Hand-made trajectories are checked
against NVIDIA's copy of Harbor's models (``nat.atif``, ATIF v1.0-v1.7) first, so every
case is one Harbor accepts."""

import json
import re

import pytest
from nat.atif import Trajectory as HarborTrajectory

from schemas.shapes import ROLE_SHAPE_PATTERN, role_shape
from tests.fixtures.harbor_jobs import ATIF, atif_files, built_files
from trajectory_assets.chat.messages import unanswered_tool_calls
from trajectory_assets.chat.trajectory import Rejection
from trajectory_assets.config import ConversionConfig
from trajectory_assets.io.file_layouts import RecordFiles
from trajectory_assets.sources import convert_record
from trajectory_assets.io.source_files import describe_batch
from trajectory_assets.sources.atif import VERSIONS, belongs_to_trial, convert_atif


def atif(*steps, version="ATIF-v1.7", validate=True, **root):
    """A trajectory of these steps (numbered here), valid by Harbor's models."""
    trajectory = {"schema_version": version, "session_id": "s-1", "agent": {"name": "toy", "version": "1"},
                  "steps": [{"step_id": n, **step} for n, step in enumerate(steps, start=1)], **root}
    if validate:
        HarborTrajectory.model_validate(trajectory)
    return trajectory


def user(text="Fix the bug.", **extra):
    return {"source": "user", "message": text, **extra}


def system(text="You are a coding agent.", **extra):
    return {"source": "system", "message": text, **extra}


def agent(text="", *calls, results=None, **extra):
    step = {"source": "agent", "message": text, **extra}
    if calls:
        step["tool_calls"] = list(calls)
    if results is not None:
        step["observation"] = {"results": results}
    return step


def call(call_id, name="bash", **arguments):
    return {"tool_call_id": call_id, "function_name": name, "arguments": arguments}


def result(content, call_id=None, **extra):
    return {"source_call_id": call_id, "content": content, **extra}


def convert(trajectory, **options):
    return convert_atif(trajectory, source_id="test", options=ConversionConfig(**options))


def trial(files, main="agent/trajectory.json", name="job/trial", unreadable=None):
    """A Harbor trial as ingest hands it over: each file as text."""
    return RecordFiles(name, f"/jobs/{name}", main, {path: value if isinstance(value, str) else json.dumps(value)
                                                     for path, value in files.items()}, unreadable or {})


def sole_call_result(step) -> str | None:
    """The call a step's one result answers when it names none: the step's only call."""
    results = [r for r in (step.get("observation") or {}).get("results", []) if r.get("content") is not None]
    calls = step.get("tool_calls") or []
    if len(calls) == 1 and len(results) == 1 and not results[0].get("source_call_id"):
        return calls[0]["tool_call_id"]
    return None


def rejection(record) -> Rejection:
    with pytest.raises(Rejection) as caught:
        convert(record)
    return caught.value


# ---------------------------------------------------------------- the real fixtures


def test_the_fixtures_are_real_harbor_files_of_three_agents_and_valid_atif():
    agents = set()
    for path in atif_files():
        trajectory = json.loads(path.read_text())
        HarborTrajectory.model_validate(trajectory)
        agents.add(trajectory["agent"]["name"])
    assert {"terminus-2", "claude-code", "openhands"} <= agents
    assert (ATIF / "SOURCE.md").read_text().count("Apache") >= 1


@pytest.mark.parametrize("path", atif_files(), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_fixture_converts_and_loses_nothing(path):
    trajectory = json.loads(path.read_text())
    converted = convert_record(path.read_bytes(), source_id="fixtures")
    messages = converted.messages
    assert re.fullmatch(ROLE_SHAPE_PATTERN, role_shape(messages))
    steps = [step for step in trajectory["steps"] if not (step.get("extra") or {}).get("is_sidechain")]
    # every step is accounted for, in order, with the messages it became
    kept = converted.metadata["atif"]["steps"]
    assert [step["step_id"] for step in kept] == [step["step_id"] for step in steps]
    for step, record in zip(steps, kept):
        results = (step.get("observation") or {}).get("results", [])
        with_content = [r for r in results if r.get("content") is not None]
        own = 0 if step["source"] == "system" and record["messages"] == [] else 1
        assert len(record["messages"]) == own + len(with_content), step["step_id"]
        mine = [messages[i] for i in record["messages"]]
        if step["source"] == "agent":
            assistant = mine[0]
            assert assistant["role"] == "assistant"
            ids = [c["tool_call_id"] for c in step.get("tool_calls") or []]
            assert [c["id"] for c in assistant.get("tool_calls", [])] == ids  # the fixtures reuse no id
            assert [json.loads(c["function"]["arguments"]) for c in assistant.get("tool_calls", [])] == [
                c["arguments"] for c in step.get("tool_calls") or []]
            if step.get("reasoning_content"):
                assert assistant["reasoning_content"] == step["reasoning_content"]
        # every result with content is a message: a tool message answering its call by id (or
        # the step's only call, when the step's one result names none), else the user turn it was
        tools = [m for m in mine if m["role"] == "tool"]
        sole = sole_call_result(step)
        assert [m["tool_call_id"] for m in tools] == [r.get("source_call_id") or sole for r in with_content
                                                      if r.get("source_call_id") or sole]
        assert [m["content"] for m in tools] == [r["content"] for r in with_content if r.get("source_call_id") or sole]
        unlinked = [r for r in with_content if not (r.get("source_call_id") or sole)]
        assert [m["content"] for m in mine[len(mine) - len(unlinked):]] == [r["content"] for r in unlinked]
    calls = {c["tool_call_id"] for step in steps for c in step.get("tool_calls") or []}
    answered = {r.get("source_call_id") or sole_call_result(step) for step in steps
                for r in (step.get("observation") or {}).get("results", [])}
    assert unanswered_tool_calls(messages) == len(calls - answered)
    assert converted.reward is None  # a bare trajectory holds no reward: never 0


def test_terminus_token_ids_and_log_probs_are_kept_per_model_call():
    path = ATIF / "terminus-2" / "hello-world-context-summarization.trajectory.json"
    trajectory = json.loads(path.read_text())
    converted = convert(trajectory)
    with_ids = [step for step in trajectory["steps"] if (step.get("metrics") or {}).get("completion_token_ids")]
    assert len(converted.token_data) == len(with_ids) == 7
    for step, tokens in zip(with_ids, converted.token_data):
        assert converted.messages[tokens["message_index"]]["content"] == step["message"]
        assert tokens["prompt_token_ids"] == step["metrics"]["prompt_token_ids"]
        assert tokens["generation_token_ids"] == step["metrics"]["completion_token_ids"]
        assert tokens["generation_log_probs"] == step["metrics"]["logprobs"]
    assert (converted.input_tokens, converted.output_tokens) == (
        trajectory["final_metrics"]["total_prompt_tokens"], trajectory["final_metrics"]["total_completion_tokens"])


# ---------------------------------------------------------------- versions


@pytest.mark.parametrize("version", VERSIONS)
def test_every_schema_version_is_accepted(version):
    trajectory = atif(user(), agent("Done."), version=version, validate=version != "ATIF-v1.8")
    assert convert(trajectory).messages[-1] == {"role": "assistant", "content": "Done."}


@pytest.mark.parametrize("version", ["1.5", "ATIF-v2.0", "ATIF-v1.9", None])
def test_any_other_schema_version_is_rejected_with_the_accepted_ones_named(version):
    found = rejection({**atif(user(), agent("x"), validate=False), "schema_version": version})
    assert found.reason == "unsupported_atif_version" and "ATIF-v1.0" in found.detail


def test_prompt_tokens_before_v1_2_exclude_cached_tokens_so_they_are_added():
    metrics = {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 40}
    old = convert(atif(user(), agent("x", metrics=metrics), version="ATIF-v1.1"))
    new = convert(atif(user(), agent("x", metrics=metrics), version="ATIF-v1.2"))
    assert (old.input_tokens, new.input_tokens, new.output_tokens, new.total_tokens) == (140, 100, 10, 110)


# ---------------------------------------------------------------- §5 edge cases


def test_1_an_agent_step_with_calls_and_an_empty_message_is_an_assistant_turn_with_empty_content():
    converted = convert(atif(user(), agent("", call("c1", cmd="ls"), results=[result("a.txt", "c1")]), agent("ok")))
    assert converted.messages[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}]}


def test_2_parallel_results_answer_their_calls_by_id_not_by_position():
    step = agent("", call("a", cmd="1"), call("b", cmd="2"), results=[result("B out", "b"), result("A out", "a")])
    messages = convert(atif(user(), step)).messages
    assert [(m["tool_call_id"], m["content"]) for m in messages[2:]] == [("b", "B out"), ("a", "A out")]


def test_3_a_call_without_result_stays_unanswered_with_no_placeholder():
    converted = convert(atif(user(), agent("", call("finish", "finish")), agent("bye")))
    assert unanswered_tool_calls(converted.messages) == 1
    assert [m["role"] for m in converted.messages] == ["user", "assistant", "assistant"]


def test_4_a_result_without_source_call_id_is_the_next_user_turn_after_the_step_tool_messages():
    parse_error = convert(atif(user(), agent("{bad json", results=[result("Previous response had parsing errors")]),
                               agent("{}")))
    assert parse_error.messages[2] == {"role": "user", "content": "Previous response had parsing errors"}
    assert parse_error.metadata["atif"]["unlinked_results"] == [{"step_id": 2, "message_index": 2}]
    assert "unlinked_observation" in parse_error.quality_flags


def test_4_the_one_result_of_a_step_with_one_call_answers_it_as_harbor_links_them_since_2087():
    # harbor#2087: terminus-2 links a single command's screen to its call, swe-agent its observation
    converted = convert(atif(user(), agent("THOUGHT: list\n```bash\nls\n```", call("call_2_1", command="ls"),
                                           results=[result("a.txt")]), agent("done")))
    assert converted.messages[2] == {"role": "tool", "tool_call_id": "call_2_1", "content": "a.txt"}
    assert unanswered_tool_calls(converted.messages) == 0
    assert converted.metadata["atif"]["sole_call_results"] == [
        {"step_id": 2, "tool_call_id": "call_2_1", "message_index": 2}]
    assert "sole_call_result" in converted.quality_flags and "unlinked_observation" not in converted.quality_flags


def test_4_calls_sharing_one_result_are_written_as_harbor_s_exporter_writes_them_and_the_result_is_the_next_turn():
    step = agent("Analysis: go\nPlan: two keys", call("k1", keys="ls"), call("k2", keys="pwd"),
                 results=[result("shared terminal output")])
    converted = convert(atif(user(), step, agent("done")))
    assert [m["role"] for m in converted.messages] == ["user", "assistant", "user", "assistant"]
    assert converted.messages[1] == {"role": "assistant", "content": (
        'Analysis: go\nPlan: two keys\n<tool_call>\n{"name": "bash", "arguments": {"keys": "ls"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "bash", "arguments": {"keys": "pwd"}}\n</tool_call>')}
    assert converted.messages[2]["content"] == "shared terminal output"
    assert unanswered_tool_calls(converted.messages) == 0
    kept = converted.metadata["atif"]["calls_as_text"]
    assert kept == [{"step_id": 2, "message_index": 1, "tool_calls": step["tool_calls"]}]
    assert {"calls_as_text", "unlinked_observation", "hermes_markup_in_content"} <= set(converted.quality_flags)


def test_4_a_call_answered_by_id_leaves_the_step_s_other_results_user_turns():
    step = agent("", call("a"), call("b"), results=[result("A out", "a"), result("screen")])
    converted = convert(atif(user(), step))
    assert [(m["role"], m.get("tool_call_id")) for m in converted.messages] == [
        ("user", None), ("assistant", None), ("tool", "a"), ("user", None)]
    assert unanswered_tool_calls(converted.messages) == 1  # b: no result names it, and a result named a call


@pytest.mark.parametrize("path", built_files(), ids=lambda path: path.name)
def test_the_shapes_built_from_harbor_s_converters_answer_every_call_and_keep_every_result(path):
    trajectory = json.loads(path.read_text())
    HarborTrajectory.model_validate(trajectory)
    converted = convert_record(path.read_bytes(), source_id="built")
    assert unanswered_tool_calls(converted.messages) == 0
    texts = [m["content"] for m in converted.messages if m["role"] in ("tool", "user")]
    results = [r["content"] for step in trajectory["steps"] for r in (step.get("observation") or {}).get("results", [])]
    assert results and all(r in texts for r in results)
    agent_text = [m["content"] for m in converted.messages if m["role"] == "assistant"]
    assert all(any(step["message"] in text for text in agent_text) for step in trajectory["steps"]
               if step["source"] == "agent")  # the model's own text is the target


def test_5_a_second_result_for_one_call_is_kept_aside_and_one_for_another_step_call_is_rejected():
    step = agent("", call("c1"), results=[result("first", "c1"), result("second", "c1")])
    converted = convert(atif(user(), step))
    assert [m["content"] for m in converted.messages if m["role"] == "tool"] == ["first"]
    assert converted.metadata["unmatched_tool_responses"][0]["content"] == "second"
    assert "unmatched_tool_response" in converted.quality_flags
    cross = atif(user(), agent("", call("c1")), agent("", results=[result("late", "c1")]), validate=False)
    assert rejection(cross).reason == "orphan_tool_output"


def test_6_a_system_step_observation_keeps_its_subagent_refs_and_context_management():
    handoff = system("Performed context summarization.", observation={"results": [
        {"subagent_trajectory_ref": [{"trajectory_id": "sub-1"}]}]},
                     extra={"context_management": {"type": "compaction", "boundary": "replace"}})
    child = atif(user("Summarize."), agent("Summary."), trajectory_id="sub-1")
    converted = convert(atif(user(), agent("a"), handoff, user("Go on."), agent("b"), subagent_trajectories=[child]))
    resets = converted.metadata["atif"]["context_resets"]
    assert resets == [{"where": "trajectory.steps[2]", "step_id": 3, "message_index": 3, "type": "compaction",
                       "boundary": "replace"}]
    (subagent,) = converted.metadata["subagents"]
    assert subagent["ref"] == {"trajectory_id": "sub-1"} and subagent["step_id"] == 3
    assert subagent["messages"] == [{"role": "user", "content": "Summarize."}, {"role": "assistant", "content": "Summary."}]


def test_7_leading_system_steps_merge_and_a_later_one_is_a_user_turn():
    converted = convert(atif(system("A"), system("B"), user(), system("Added workspace context"), agent("ok")))
    assert converted.messages[0] == {"role": "system", "content": "A\n\nB"}
    assert converted.messages[2] == {"role": "user", "content": "Added workspace context"}
    assert "system_step_as_user" in converted.quality_flags


def test_8_consecutive_same_role_steps_and_a_trajectory_ending_on_a_system_step_are_kept():
    converted = convert(atif(user("a"), user("b"), agent("1"), agent("2"), system("compacted")))
    assert role_shape(converted.messages) == "uuaau"
    assert "consecutive_assistant_turns" in converted.quality_flags


def test_9_subagents_from_files_embedded_and_sidechains_are_kept_never_dropped():
    summary = atif(user("Summarize."), agent("Summary."))
    main = atif(user(), agent("a"), system("handoff", observation={"results": [{"subagent_trajectory_ref": [
        {"session_id": "x", "trajectory_path": "trajectory.summarization-1-summary.json"},
        {"session_id": "y", "trajectory_path": "trajectory.summarization-1-gone.json"}]}]}), user("b"), agent("c"))
    unnamed = atif(user("other"), agent("other answer"))
    converted = convert(trial({"agent/trajectory.json": main,
                               "agent/trajectory.summarization-1-summary.json": summary,
                               "agent/trajectory.summarization-2-summary.json": unnamed}))
    found = {entry["where"]: entry for entry in converted.metadata["subagents"]}
    assert found["agent/trajectory.summarization-2-summary.json"]["ref"] is None  # named by no ref, still kept
    assert any(entry.get("missing") for entry in found.values())
    assert "missing_subagent_trajectory" in converted.quality_flags
    named = next(e for e in converted.metadata["subagents"] if e["ref"] and e["ref"]["session_id"] == "x")
    assert named["messages"][-1] == {"role": "assistant", "content": "Summary."}
    # claude-code interleaves a subagent's steps: they leave the main chat
    side = {"extra": {"is_sidechain": True, "agent_id": "agent-7"}}
    interleaved = convert(atif(user(), agent("", call("t1", "Agent", prompt="look")),
                               {**user("look"), **side}, {**agent("found it"), **side},
                               agent("main again")))
    assert [m["content"] for m in interleaved.messages if m["role"] == "assistant"] == ["", "main again"]
    (sidechain,) = interleaved.metadata["subagents"]
    assert sidechain["ref"] == {"agent_id": "agent-7"}
    assert [m["content"] for m in sidechain["messages"]] == ["look", "found it"]


def test_9_a_subagent_that_does_not_convert_is_kept_raw_and_flagged():
    broken = {"schema_version": "ATIF-v1.7", "agent": {"name": "x", "version": "1"}, "steps": []}
    converted = convert(trial({"agent/trajectory.json": atif(user(), agent("a")),
                               "agent/trajectory.summarization-1-summary.json": broken}))
    (entry,) = converted.metadata["subagents"]
    assert entry["raw"] == broken and entry["error"].startswith("invalid_structure")
    assert "invalid_subagent_trajectory" in converted.quality_flags


def test_10_continuations_follow_their_chain_and_copied_context_is_never_a_target():
    first = atif(user("task"), agent("step 1"), continued_trajectory_ref="trajectory.cont-1.json")
    second = atif(user("task", is_copied_context=True), agent("step 1", is_copied_context=True),
                  user("summary of before"), agent("step 2"))
    converted = convert(trial({"agent/trajectory.json": first, "agent/trajectory.cont-1.json": second}))
    assert [m["content"] for m in converted.messages] == ["task", "step 1", "task", "step 1", "summary of before",
                                                          "step 2"]
    assert converted.metadata["untrained_messages"] == [3]
    assert converted.metadata["atif"]["context_resets"][0] == {
        "where": "agent/trajectory.cont-1.json", "message_index": 2, "type": "continuation"}
    assert {"copied_context", "context_reset"} <= set(converted.quality_flags)
    # a segment read alone: its copied history is the prompt
    alone = convert(second)
    assert alone.prompt_length == 3 and alone.metadata["untrained_messages"] == [1]


def test_11_non_llm_steps_are_context_and_aggregated_token_ids_are_not_per_call():
    tokens = {"prompt_token_ids": [1, 2], "completion_token_ids": [3], "logprobs": [-0.1]}
    converted = convert(atif(user(), agent("dispatch", call("d1"), llm_call_count=0,
                                           results=[result("ran", "d1")]),
                             agent("two calls in one", llm_call_count=2, metrics=tokens), agent("final")))
    assert converted.metadata["untrained_messages"] == [1]
    assert "non_llm_step" in converted.quality_flags
    assert converted.token_data is None
    assert converted.metadata["atif"]["aggregated_token_data"][0]["message_index"] == 3


def test_12_malformed_token_data_is_kept_aside_and_flagged():
    bad = {"prompt_token_ids": [1, 2], "completion_token_ids": [3, 4], "logprobs": [-0.1]}
    converted = convert(atif(user(), agent("x", metrics=bad)))
    assert converted.token_data is None and "malformed_token_data" in converted.quality_flags
    assert converted.metadata["malformed_token_data"][0]["generation_token_ids"] == [3, 4]


def test_13_reasoning_goes_to_reasoning_content_also_from_inline_think_blocks():
    converted = convert(atif(user(), agent("It is 4.", reasoning_content="2+2"), agent("<think>hm</think>Yes.")))
    assert converted.messages[1] == {"role": "assistant", "content": "It is 4.", "reasoning_content": "2+2"}
    assert converted.messages[2] == {"role": "assistant", "content": "Yes.", "reasoning_content": "hm"}
    kept = convert(atif(user(), agent("<think>hm</think>Yes.")), inline_reasoning=False)
    assert kept.messages[1]["content"] == "<think>hm</think>Yes." and HERMES_FLAG in kept.quality_flags


HERMES_FLAG = "hermes_markup_in_content"


def test_14_arguments_become_a_json_string_and_raw_arguments_stay_in_metadata():
    raw = {**call("c1", "Edit", path="a.py", text="ü"), "extra": {"raw_arguments": '{"path":"a.py","text":"ü"}'}}
    converted = convert(atif(user(), agent("", raw, results=[result("ok", "c1")])))
    assert json.loads(converted.messages[1]["tool_calls"][0]["function"]["arguments"]) == {"path": "a.py", "text": "ü"}
    assert converted.metadata["atif"]["steps"][1]["tool_call_extras"] == {"c1": raw["extra"]}
    string_args = atif(user(), agent("", {"tool_call_id": "c", "function_name": "f", "arguments": "{not json"}),
                       validate=False)
    flagged = convert(string_args)
    assert flagged.messages[1]["tool_calls"][0]["function"]["arguments"] == "{not json"
    assert "unparseable_tool_call" in flagged.quality_flags


def test_15_content_parts_text_and_images_map_to_chat_parts_and_audio_is_rejected():
    parts = [{"type": "text", "text": "What is in"}, {"type": "text", "text": "this picture?"}]
    image = {"type": "image", "source": {"media_type": "image/png", "path": "images/shot.png"}}
    converted = convert(atif(user(parts), agent("", call("s1", "screenshot"), results=[result([image], "s1")]),
                             agent("A cat.")))
    assert converted.messages[0]["content"] == "What is in\nthis picture?"
    assert converted.messages[2]["content"] == [{"type": "image_url", "image_url": {"url": "images/shot.png"}}]
    audio = {"type": "audio", "source": {"media_type": "audio/wav", "path": "a.wav"}}
    found = rejection(atif(user([audio]), agent("heard"), version="ATIF-v1.8", validate=False))
    assert found.reason == "unsupported_content" and "audio" in found.detail


def test_16_missing_optional_metadata_is_fine():
    bare = {"schema_version": "ATIF-v1.7", "agent": {"name": "a", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": "hi"},
                      {"step_id": 2, "source": "agent", "message": "hello"}]}
    HarborTrajectory.model_validate(bare)
    converted = convert(bare)
    assert (converted.model, converted.input_tokens, converted.reward) == (None, None, None)


def test_17_the_reward_comes_from_result_json_or_the_verifier_reward_file_and_none_is_never_zero():
    main = atif(user(), agent("done"))

    def reward_of(**files):
        return convert(trial({"agent/trajectory.json": main, **files}))

    assert reward_of(**{"result.json": {"verifier_result": {"rewards": {"reward": 0.75}}}}).reward == 0.75
    several = reward_of(**{"result.json": {"verifier_result": {"rewards": {"reward": 1, "style": 0.5}}}})
    assert (several.reward, several.reward_components) == (1.0, {"reward": 1, "style": 0.5})
    unnamed = reward_of(**{"result.json": {"verifier_result": {"rewards": {"pass": 1, "style": 0.5}}}})
    assert (unnamed.reward, unnamed.reward_components) == (None, {"pass": 1, "style": 0.5})  # which one? none
    assert reward_of(**{"verifier/reward.txt": "0.5\n"}).reward == 0.5
    assert reward_of(**{"verifier/reward.json": {"pass": 1}, "verifier/reward.txt": "0"}).reward == 1.0
    assert reward_of(**{"result.json": {"verifier_result": None}}).reward is None
    assert reward_of().reward is None
    invalid = reward_of(**{"result.json": {"verifier_result": {"rewards": {"reward": 0.0}}, "reward_valid": False}})
    assert invalid.reward is None and "harbor_reward_invalid" in invalid.quality_flags
    timeout = reward_of(**{"result.json": {"verifier_result": {"rewards": {"reward": 0.0}},
                                           "exception_info": {"exception_type": "AgentTimeoutError"}}})
    assert (timeout.reward, timeout.completed, timeout.status) == (0.0, False, "AgentTimeoutError")
    assert rejection(trial({"agent/trajectory.json": main, "verifier/reward.txt": "n/a"})).reason == "invalid_reward"


def test_rollouts_of_one_harbor_task_share_a_task_key_within_its_dataset():
    def task_key(name, dataset, text):
        result = {"task_name": name, "source": dataset, "trial_name": f"{name}__{text}"}
        return convert(trial({"agent/trajectory.json": atif(user(text), agent("x")), "result.json": result})).task_key

    assert task_key("hello", "d1", "one") == task_key("hello", "d1", "two")  # other prompts, one task
    assert task_key("hello", "d1", "one") != task_key("hello", "d2", "one")


def test_a_trial_whose_file_is_not_json_or_cannot_be_read_is_rejected_naming_it():
    broken = trial({"agent/trajectory.json": atif(user(), agent("x")), "result.json": "{cut"})
    found = rejection(broken)
    assert found.reason == "invalid_json" and "result.json" in found.detail
    unreadable = trial({}, unreadable={"agent/trajectory.json": "cannot read: permission denied"})
    assert rejection(unreadable).reason == "unreadable_file"
    no_result = trial({"agent/trajectory.json": atif(user(), agent("x"))},
                      unreadable={"result.json": "cannot read: permission denied"})
    converted = convert(no_result)
    assert converted.reward is None and "unreadable_trial_file" in converted.quality_flags
    assert converted.metadata["harbor"]["unreadable"] == {"result.json": "cannot read: permission denied"}


def test_a_trajectory_with_no_agent_step_or_no_user_step_is_rejected():
    assert rejection(atif(user(), system("x"))).reason == "no_model_output"
    assert rejection(atif(system(), agent("hi"))).reason == "no_prompt"


def test_the_record_holds_the_trial_files_harbor_writes_and_nothing_else():
    assert belongs_to_trial("agent/trajectory.json", "agent/trajectory.cont-2.json")
    assert belongs_to_trial("agent/trajectory.json", "agent/trajectory.summarization-3-answers.json")
    assert belongs_to_trial("agent/trajectory.json", "verifier/reward.json")
    assert not belongs_to_trial("agent/trajectory.json", "agent/images/x.png")
    assert not belongs_to_trial("agent/trajectory.json", "config.json")
    assert not belongs_to_trial("agent/trajectory.json", "artifacts/trajectory.json")


def test_a_trial_is_converted_as_the_files_it_is_and_a_line_shaped_like_one_is_no_rollout():
    record = trial({"agent/trajectory.json": atif(user(), agent("x"))})
    assert convert_record(record, source_id="a").messages == convert(record).messages
    disguised = json.dumps({"record": "t", "main": "agent/trajectory.json", "files": dict(record.files)}).encode()
    with pytest.raises(Rejection) as caught:
        convert_record(disguised, source_id="a")
    assert caught.value.reason == "not_a_rollout"


def test_the_trial_record_s_id_is_the_same_wherever_the_job_folder_lies():
    files = {"agent/trajectory.json": json.dumps(atif(user(), agent("x")))}
    assert RecordFiles("t", "/a/t", "agent/trajectory.json", files).digest() == RecordFiles(
        "t", "s3://b/t", "agent/trajectory.json", files).digest()
    assert RecordFiles("t", "/a/t", "agent/trajectory.json", files).digest() != RecordFiles(
        "t", "/a/t", "agent/trajectory.json", {"agent/trajectory.json": files["agent/trajectory.json"] + " "}).digest()


def test_a_nan_in_a_trial_file_is_counted_and_flagged_as_in_any_source_line():
    main = json.dumps(atif(user(), agent("a")))
    result = '{"task_name": "t", "verifier_result": {"rewards": {"reward": 1.0}}, "extra": {"score": NaN}}'
    converted = convert(trial({"agent/trajectory.json": main, "result.json": result}))
    assert converted.non_finite_values == 1 and "non_finite_number" in converted.quality_flags
    assert converted.reward == 1.0


def test_unnamed_embedded_subagents_of_two_segments_are_both_kept():
    first = atif(user("task"), agent("a"), continued_trajectory_ref="trajectory.cont-1.json",
                 subagent_trajectories=[atif(user("first child"), agent("A"), validate=False)], validate=False)
    second = atif(user("more"), agent("b"),
                  subagent_trajectories=[atif(user("second child"), agent("B"), validate=False)], validate=False)
    converted = convert(trial({"agent/trajectory.json": first, "agent/trajectory.cont-1.json": second}))
    children = [entry["messages"][-1]["content"] for entry in converted.metadata["subagents"]]
    assert sorted(children) == ["A", "B"]


def test_a_ref_by_session_id_alone_resolves_as_before_v1_7_and_an_object_ref_as_in_v1_0():
    """Before v1.7 ``{"session_id"}`` was a valid ref, resolved by that id, and v1.0 / v1.1
    wrote one ref as an object, not a list. A session id two subagents share resolves nothing
    (v1.7 allows that): both are still kept, the ref flagged missing."""
    summary = atif(user("Summarize."), agent("Summary."), version="ATIF-v1.6", session_id="sub-1")
    main = atif(user(), agent("a"), system("handoff", observation={"results": [
        {"subagent_trajectory_ref": {"session_id": "sub-1"}}]}), user("b"), agent("c"), version="ATIF-v1.6",
        validate=False)
    converted = convert(trial({"agent/trajectory.json": main, "agent/trajectory.summarization-1-summary.json": summary}))
    (entry,) = converted.metadata["subagents"]  # the file is the ref's, not listed again unnamed
    assert entry["ref"] == {"session_id": "sub-1"} and entry["step_id"] == 3
    assert entry["messages"][-1] == {"role": "assistant", "content": "Summary."} and not entry.get("missing")
    assert "missing_subagent_trajectory" not in converted.quality_flags
    embedded = atif(user(), agent("a"), system("handoff", observation={"results": [
        {"subagent_trajectory_ref": [{"session_id": "sub-2"}]}]}), version="ATIF-v1.6", validate=False,
        subagent_trajectories=[atif(user("child"), agent("done"), session_id="sub-2", validate=False)])
    (child,) = convert(embedded).metadata["subagents"]
    assert child["ref"] == {"session_id": "sub-2"} and child["messages"][-1]["content"] == "done"
    newer = {**main, "schema_version": "ATIF-v1.7"}  # no longer a resolution key: Harbor's models refuse it
    assert "missing_subagent_trajectory" in convert(trial({"agent/trajectory.json": newer,
                                                           "agent/trajectory.summarization-1-summary.json": summary})
                                                    ).quality_flags
    gone = atif(user(), agent("a"), system("handoff", observation={"results": [{"subagent_trajectory_ref": {
        "session_id": "sub-1", "trajectory_path": "trajectory.summarization-9-gone.json"}}]}), version="ATIF-v1.6",
        validate=False)  # a path that names nothing: missing, whatever file shares the session id
    assert "missing_subagent_trajectory" in convert(trial({"agent/trajectory.json": gone,
                                                           "agent/trajectory.summarization-1-summary.json": summary})
                                                    ).quality_flags
    twins = convert(trial({"agent/trajectory.json": main, "agent/trajectory.summarization-1-a.json": summary,
                           "agent/trajectory.summarization-2-b.json": summary}))
    assert "missing_subagent_trajectory" in twins.quality_flags
    assert sorted(e["where"] for e in twins.metadata["subagents"] if e["ref"] is None) == [
        "agent/trajectory.summarization-1-a.json", "agent/trajectory.summarization-2-b.json"]


def test_an_observation_on_a_user_step_follows_it_as_the_user_turns_it_was():
    """Harbor's models allow an observation on any step: on a user step its unlinked results
    are what the model was shown next, each a user message after the step's own; a result
    naming a call is refused, since a user step makes none."""
    pasted = user("Here is the log:", observation={"results": [result("ERROR at line 3")]})
    converted = convert(atif(pasted, agent("Line 3 divides by zero.")))
    assert [(m["role"], m["content"]) for m in converted.messages] == [
        ("user", "Here is the log:"), ("user", "ERROR at line 3"), ("assistant", "Line 3 divides by zero.")]
    assert "unlinked_observation" in converted.quality_flags
    assert converted.metadata["atif"]["unlinked_results"] == [{"step_id": 1, "message_index": 1}]
    answered = user("q", observation={"results": [result("out", call_id="call-9")]})
    assert rejection(atif(answered, agent("a"), validate=False)).reason == "orphan_tool_output"  # as Harbor refuses it


def test_only_the_chain_of_continued_trajectory_refs_is_the_chat():
    """As Harbor's exporter: segments follow ``continued_trajectory_ref`` up to a file the trial
    lacks (flagged ``missing_continuation``). A segment no ref reaches, a stale one or a
    subagent's own, is kept as an unnamed file of the trial, never added to the main chat."""
    main = atif(user(), agent("main answer"), continued_trajectory_ref="trajectory.cont-1.json", validate=False)
    stale = atif(user("stale"), agent("STALE"), validate=False)
    converted = convert(trial({"agent/trajectory.json": main, "agent/trajectory.cont-2.json": stale,
                               "agent/trajectory.summarization-1-summary.cont-1.json": stale}))
    assert [m["content"] for m in converted.messages] == ["Fix the bug.", "main answer"]
    assert "missing_continuation" in converted.quality_flags
    assert sorted(entry["where"] for entry in converted.metadata["subagents"] if entry["ref"] is None) == [
        "agent/trajectory.cont-2.json", "agent/trajectory.summarization-1-summary.cont-1.json"]


def test_a_subagents_own_subagents_are_kept_as_written():
    grandchild = atif(user("deeper"), agent("deepest"), validate=False)
    child = atif(user("child"), agent("done"), validate=False, subagent_trajectories=[grandchild])
    (entry,) = convert(atif(user(), agent("a"), validate=False, subagent_trajectories=[child])).metadata["subagents"]
    assert entry["messages"][-1]["content"] == "done" and entry["subagent_trajectories"] == [grandchild]


def test_a_trial_that_does_not_convert_is_quarantined_naming_its_folder_and_error_not_its_whole_text(tmp_path):
    import pyarrow as pa

    from tests.fixtures.harbor_jobs import write_trial
    from trajectory_assets.ingest.conversion import ingest
    from trajectory_assets.redaction.redactor import Redactor
    from trajectory_assets.sources import discover_sources

    job = tmp_path / "job"
    good = write_trial(job, "good", {"trajectory.json": ATIF / "terminus-2" / "hello-world-timeout.trajectory.json"})
    bad = write_trial(job, "bad", {"trajectory.json": ATIF / "claude-code" / "trajectory_fail.json"})
    (bad / "result.json").write_text("{cut")
    (good / "result.json").write_text('{"task_name": "t", "note": "key ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"}')
    tables, rejected = [], []
    summary = ingest(discover_sources([str(job)]), tables.append, rejected.extend, redactor=Redactor())
    assert (summary.records_read, summary.records_valid, summary.records_rejected) == (2, 1, 1)
    (entry,) = rejected
    assert (entry["reason"], entry["line"], entry["source"]) == ("invalid_json", 1, str(job))
    assert "result.json" in entry["detail"]
    assert entry["raw"].startswith(f"{bad}\nfiles: agent/trajectory.json, result.json\nagent/trajectory.json:\n")
    assert len(entry["raw"]) < 2500 < (ATIF / "claude-code" / "trajectory_fail.json").stat().st_size
    row = pa.concat_tables(tables).to_pylist()[0]
    assert "ghp_" not in row["metadata"] and summary.redactions_by_type == {"github_token": 1}  # files scrubbed
    assert summary.sources[0].sha256 == describe_batch(discover_sources([str(job)])[0])["sha256"]


def gym_export(folder, rollouts):
    """A folder as NeMo Gym's `gym eval export atif` writes it (nemo_gym/atif_export.py,
    export_rollouts_to_atif, NVIDIA-NeMo/Gym at 16bd3a42 and later): `<task>-<rollout>.json`,
    each an ATIF-v1.7 trajectory as `gym_rollout_to_atif` builds it (`model_dump_json(indent=2,
    exclude_none=True)` and a newline), and `manifest.jsonl`, one line per file in the rollouts'
    order with its indices and SHA-256 (`json.dumps(sort_keys=True, separators=(",", ":"))`)."""
    import hashlib

    folder.mkdir(parents=True)
    lines = []
    for task, rollout, answer in rollouts:
        trajectory = atif(user("What is 2 + 2?"),
                          agent("", call(f"fc_{task}_{rollout}", "calculator", expression="2+2"),
                                results=[result("4", f"fc_{task}_{rollout}")], llm_call_count=1),
                          agent(answer, llm_call_count=1),
                          session_id="eval-1", trajectory_id=f"eval-1:{task}:{rollout}",
                          final_metrics={"total_steps": 3},
                          extra={"nemo_gym": {"exporter": {"name": "nemo-gym", "version": "0.7.0"},
                                              "source": {"format": "ng_trajectory", "schema_version": "1.0",
                                                         "task_id": f"t{task}", "rollout_id": f"r{rollout}",
                                                         "task_index": task, "rollout_index": rollout},
                                              "conversion": {"profile": "ng-trajectory-to-atif-v1",
                                                             "status": "complete"}}})
        trajectory["agent"]["model_name"] = "policy"
        encoded = (json.dumps(trajectory, indent=2, ensure_ascii=False) + "\n").encode()
        (folder / f"{task}-{rollout}.json").write_bytes(encoded)
        lines.append(json.dumps({"trajectory_path": f"{task}-{rollout}.json", "_ng_task_index": task,
                                 "_ng_rollout_index": rollout, "expected_sha256": hashlib.sha256(encoded).hexdigest()},
                                sort_keys=True, separators=(",", ":")))
    (folder / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_a_gym_atif_export_is_one_batch_whose_files_are_records_joined_to_the_manifest(tmp_path):
    import pyarrow as pa

    from trajectory_assets.ingest.conversion import ingest
    from trajectory_assets.sources import discover_sources

    export = gym_export(tmp_path / "runs" / "atif", [(0, 0, "4"), (0, 1, "It is 4."), (1, 0, "5")])
    (tmp_path / "runs" / "atif" / "1-0.json").write_text((export / "1-0.json").read_text().replace('"5"', '"6"'))
    (source,) = discover_sources([str(tmp_path / "runs")])
    assert source.uri == str(export) and [record.name for record in source.records] == ["0-0.json", "0-1.json", "1-0.json"]
    assert all(record.files[1].endswith("manifest.jsonl") for record in source.records)  # never a source of its own
    tables, rejected = [], []
    summary = ingest([source], tables.append, rejected.extend)
    assert (summary.records_read, summary.records_valid, summary.records_rejected) == (3, 2, 1)
    rows = pa.concat_tables(tables).to_pylist()
    assert [(row["task_index"], row["rollout_index"], row["rollout_id"]) for row in rows] == [
        (0, 0, "eval-1:0:0"), (0, 1, "eval-1:0:1")]
    # the export writes no reward (Gym re-verifies the files against their task: gym eval reverify)
    assert all(row["reward"] is None for row in rows)
    assert rows[0]["task_key"] == rows[1]["task_key"]  # one task: one prompt
    assert json.loads(rows[0]["metadata"])["nemo_gym_export"]["trajectory_path"] == "0-0.json"
    (entry,) = rejected
    assert entry["reason"] == "checksum_mismatch" and "1-0.json" in entry["detail"]
    assert entry["raw"].startswith(f"{export}\nfiles: 1-0.json, manifest.jsonl\n")
    assert summary.sources[0].sha256 == describe_batch(source)["sha256"]
    assert describe_batch(source)["bytes"] == sum(path.stat().st_size for path in export.iterdir())
