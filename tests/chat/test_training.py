"""The training rule per message (chat/training.py), rule by rule, on the shapes real runs have."""

import pytest

from trajectory_assets.chat.training import trained_messages

SUMMARY_AS_USER = {"role": "user", "content": "[CONTEXT SUMMARY]: listed /srv and read config.yaml"}
HANDOFF_AS_ASSISTANT = {"role": "assistant", "content": "[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns ..."}


def user(text="q"):
    return {"role": "user", "content": text}


def assistant(text="a", calls=0):
    message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                                 for i in range(calls)]
    return message


def tool(content, call_id="c0"):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


@pytest.mark.parametrize("rule", ["all_assistant", "final_assistant", "after_last_user", "not_after_failed_tool_call"])
def test_a_turn_the_harness_wrote_is_never_a_target(rule):
    messages = [user(), assistant("first"), SUMMARY_AS_USER, HANDOFF_AS_ASSISTANT, user("go on"), assistant("done")]
    trained = trained_messages(messages, rule)
    assert trained[3] is False and trained[5] is True
    assert not any(trained[i] for i, m in enumerate(messages) if m["role"] != "assistant")


def test_a_summary_written_as_a_user_turn_is_no_last_request():
    messages = [user(), assistant("answer"), SUMMARY_AS_USER, assistant("continues")]
    assert trained_messages(messages, "after_last_user") == [False, True, False, True]


def test_only_the_turn_right_after_a_failed_result_is_left_out():
    messages = [user(), assistant(calls=2), tool('{"error": "timeout"}', "c0"), tool("ok", "c1"),
                assistant("retrying", calls=1), tool("fine"), assistant("done")]
    assert trained_messages(messages, "not_after_failed_tool_call") == [
        False, True, False, False, False, False, True]


def test_a_source_can_name_messages_that_are_not_the_policys():
    messages = [user(), assistant("copied from an earlier segment"), user("next"), assistant("new")]
    assert trained_messages(messages, untrained={1}) == [False, False, False, True]


def test_a_conversation_without_an_assistant_trains_nothing():
    assert trained_messages([user()], "final_assistant") == [False]
