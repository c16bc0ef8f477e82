import pytest

from trajectory_assets.chat.messages import count_tool_calls, divergence_point, unanswered_tool_calls
from schemas.shapes import role_shape
from trajectory_assets.chat.hermes_markup import HERMES_TAGS, has_hermes_markup

SYSTEM = {"role": "system", "content": "s"}
USER = {"role": "user", "content": "u"}


def assistant(text="a", calls=()):
    message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in calls]
    return message


def tool(call_id):
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


def test_role_shape_encodes_each_role():
    messages = [SYSTEM, USER, assistant(calls=["1", "2"]), tool("1"), tool("2"), assistant()]
    assert role_shape(messages) == "suctta"


def test_tool_message_answering_no_open_call_is_marked():
    assert role_shape([USER, assistant(), tool("1")]) == "uax"
    assert role_shape([USER, assistant(calls=["1"]), tool("2")]) == "ucx"
    # the same call answered twice: the second answer answers nothing
    assert role_shape([USER, assistant(calls=["1"]), tool("1"), tool("1")]) == "uctx"
    # a user turn between the call and its answer breaks the pairing
    assert role_shape([USER, assistant(calls=["1"]), USER, tool("1")]) == "ucux"


def test_counts_of_tool_calls_and_unanswered_calls():
    messages = [USER, assistant(calls=["1", "2"]), tool("1"), assistant(calls=["3"])]
    assert count_tool_calls(messages) == 3
    assert unanswered_tool_calls(messages) == 2


def test_divergence_point_ends_where_both_continue_with_assistant():
    shared = [SYSTEM, USER]
    first = shared + [assistant("x")]
    second = shared + [assistant("y")]
    assert divergence_point(first, second) == 2


def test_divergence_point_keeps_shared_assistant_and_tool_turns():
    shared = [USER, assistant(calls=["1"]), tool("1")]
    assert divergence_point(shared + [assistant("x")], shared + [assistant("y")]) == 3


def test_divergence_point_backs_off_a_differing_user_turn():
    first = [USER, assistant("a"), {"role": "user", "content": "A"}, assistant("x")]
    second = [USER, assistant("a"), {"role": "user", "content": "B"}, assistant("y")]
    # the prompts differ at the second user turn: the shared context ends before the first assistant
    assert divergence_point(first, second) == 1


def test_divergence_point_zero_when_prompts_differ():
    assert divergence_point([USER, assistant()], [{"role": "user", "content": "other"}, assistant()]) == 0


@pytest.mark.parametrize("text, marked", [
    *((f"see {tag} here", True) for tag in HERMES_TAGS),
    ("<think", False), ("<tool_calls>", False), ("< think>", False), ("</ tool_call>", False), ("<b>bold</b>", False),
])
def test_hermes_markup_is_any_literal_hermes_tag_in_any_text_of_a_message(text, marked):
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": text}}
    for message in ({"role": "user", "content": text}, {"role": "assistant", "content": "", "reasoning_content": text},
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "user", "content": [{"type": "text", "text": text}]}):
        assert has_hermes_markup(message) is marked
