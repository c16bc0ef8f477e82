"""The frame an export contract checks is built column by column (``checked_frame``), its
shapes in one pass per conversation: the same frame, and the same verdict, as each row
checked alone, odd rows included."""

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.export_row import checked_frame
from schemas.shapes import ROLE_LETTER, role_shape, value_types
from schemas.sft import SftSchema
from schemas.trl import TrlSftSchema
from schemas.validation import ARROW_STRING, validate
from tests.exports.test_registry import built
from trajectory_assets.exports.registry import EXPORTS

ID, OTHER_ID, THIRD_ID = "a" * 32, "c" * 32, "e" * 32
KEY = "b" * 24
PROMPT = "d" * 24


def frame_of(model, records):
    return checked_frame(model, records, [PROMPT] * len(records), ["train"] * len(records))


def stacked(model, records):
    """Each record's frame built alone, stacked: what a row-by-row build gives."""
    return pd.concat([frame_of(model, [record]) for record in records], ignore_index=True)


# every export with rows in the fixture (it carries no token data)
@pytest.mark.parametrize("export", [export for export in EXPORTS if export.name != "on_policy_tokens"],
                         ids=lambda export: export.name)
def test_a_frame_of_rows_is_each_row_alone_stacked(export):
    records = built(export).records
    assert records
    frame = frame_of(export.contract, records)
    pd.testing.assert_frame_equal(frame, stacked(export.contract, records), check_exact=True)
    assert len(frame_of(export.contract, [])) == 0 and validate(export.contract, frame_of(export.contract, [])).passed


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": [1, {"y": None}]}}}
ODD_SFT_ROWS = [
    # nested tool calls, a call answered twice (the second answers nothing)
    {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [CALL]},
                  {"role": "tool", "tool_call_id": "c1", "content": "r"},
                  {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "assistant", "content": "ok"}],
     "tools": [{"type": "function"}], "reward": None, "trajectory_id": ID, "task_key": KEY},
    # no message at all, no tools, an empty list of calls
    {"messages": [], "tools": None, "reward": 1.0, "trajectory_id": OTHER_ID, "task_key": KEY},
    {"messages": [{"role": "user", "content": None}, {"role": "assistant", "content": "a", "tool_calls": []}],
     "reward": 0, "trajectory_id": THIRD_ID, "task_key": KEY},
]


def test_odd_rows_give_the_columns_each_row_gives_alone():
    frame = frame_of(TrlSftSchema, ODD_SFT_ROWS)
    pd.testing.assert_frame_equal(frame, stacked(TrlSftSchema, ODD_SFT_ROWS), check_exact=True)
    assert frame["role_shape"].tolist() == ["uctxa", "", "ua"]
    assert frame["value_types"].tolist() == ["arguments:dict,content:str", "", "content:NoneType,content:str"]
    assert frame["tools_type"].tolist() == ["list", "NoneType", "NoneType"]
    assert frame["fields"].tolist() == ["messages,tools,reward,trajectory_id,task_key"] * 2 + [
        "messages,reward,trajectory_id,task_key"]
    assert math.isnan(frame["reward"][0]) and frame["reward"].tolist()[1:] == [1.0, 0.0]
    assert all(frame[name].dtype == ARROW_STRING for name in ("role_shape", "value_types", "trajectory_id", "split"))
    result = validate(TrlSftSchema, frame)
    # the same rows fail as when each is checked alone, for the same reasons
    assert result.failures == {row: validate(TrlSftSchema, frame_of(TrlSftSchema, [record])).failures[0]
                               for row, record in enumerate(ODD_SFT_ROWS)}
    assert result.failures[0].startswith("role_shape:str_matches")  # the tool message answering nothing
    assert "role_shape:has_assistant_turn" in result.failures[1]
    assert result.failures[2].startswith("value_types:str_matches")  # a null content


def test_a_value_of_the_wrong_type_leaves_its_column_as_inferred_for_the_contract_to_report():
    records = [{"messages": [{"role": "user"}, {"role": "assistant"}], "reward": "high", "trajectory_id": ID,
                "task_key": KEY},
               {"messages": [{"role": "user"}, {"role": "assistant"}], "reward": 1.0, "trajectory_id": 7,
                "task_key": KEY}]
    frame = frame_of(SftSchema, records)
    assert frame["reward"].tolist() == ["high", 1.0] and frame["trajectory_id"].tolist() == [ID, 7]
    assert frame["task_key"].dtype == ARROW_STRING  # the other columns are cast as declared
    reported = " ".join(validate(SftSchema, frame).summary())
    assert "reward:dtype('float64')" in reported and "trajectory_id:dtype('string[pyarrow]')" in reported


def plain_role_shape(messages):
    """The role shape as the rule reads (``schemas/shapes.py``), one message at a time."""
    letters, open_calls = [], set()
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            calls = message.get("tool_calls") or []
            open_calls = {call.get("id") for call in calls}
            letters.append("c" if calls else "a")
        elif role == "tool":
            if letters and letters[-1] in "ct" and message.get("tool_call_id") in open_calls:
                open_calls.discard(message.get("tool_call_id"))
                letters.append("t")
            else:
                letters.append("x")
        else:
            open_calls = set()
            letters.append(ROLE_LETTER.get(role, "?"))
    return "".join(letters)


def plain_value_types(messages):
    types = {f"content:{type(message.get('content')).__name__}" for message in messages}
    types |= {f"arguments:{type((call.get('function') or {}).get('arguments')).__name__}"
              for message in messages for call in message.get("tool_calls") or []}
    return ",".join(sorted(types))


call_ids = st.sampled_from(["1", "2", None])
calls = st.lists(st.fixed_dictionaries({"id": call_ids}, optional={"function": st.one_of(
    st.none(), st.fixed_dictionaries({}, optional={"arguments": st.one_of(st.text(max_size=2), st.none(),
                                                                          st.integers(), st.dictionaries(st.text(max_size=1), st.integers()))})
)}), max_size=3)
messages = st.lists(st.fixed_dictionaries(
    {}, optional={"role": st.sampled_from(["system", "user", "assistant", "tool", "robot", None]),
                  "content": st.one_of(st.text(max_size=2), st.none(), st.integers(), st.lists(st.integers(), max_size=1)),
                  "tool_calls": st.one_of(st.none(), calls), "tool_call_id": call_ids}), max_size=8)


@settings(max_examples=400, deadline=None)
@given(messages)
def test_shapes_in_one_pass_are_the_plain_rules(conversation):
    assert role_shape(conversation) == plain_role_shape(conversation)
    assert value_types(conversation) == plain_value_types(conversation)
