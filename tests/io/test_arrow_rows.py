"""A JSON line must hold the Arrow types its dataset card declares: keys a struct lacks are
found at any depth, JSON fields hold anything, and a value of another type is named once."""

import pyarrow as pa
import pytest

from trajectory_assets.io.arrow_rows import JSON, schema_violations, table_from_records

CALL = pa.struct([("id", pa.string()), ("function", pa.struct([("name", pa.string()), ("arguments", JSON)]))])
SCHEMA = pa.schema([("messages", pa.list_(pa.struct([("role", pa.string()), ("tool_calls", pa.list_(CALL))]))),
                    ("extra", JSON), ("reward", pa.float64())])


def message(**extra):
    return {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"any": [1]}}}],
            **extra}


def test_rows_of_the_declared_types_pass_whatever_their_json_fields_hold():
    rows = [{"messages": [message()], "extra": {"deep": {"x": [1, "a"]}}, "reward": 1.0},
            {"messages": None, "extra": None, "reward": None, "own_field": "kept beside the schema"}]
    assert schema_violations(rows, SCHEMA) == (0, [])


def test_a_key_a_struct_lacks_is_named_with_its_path_at_any_depth():
    deep = message()
    deep["tool_calls"][0]["function"]["strict"] = True
    rows = [{"messages": [message(), message(weight=1)]}, {"messages": [message(), deep]}]
    assert schema_violations(rows, SCHEMA) == (2, [
        "row 0: messages[1] has a key the schema lacks: 'weight'",
        "row 1: messages[1].tool_calls[0].function has a key the schema lacks: 'strict'"])


def test_a_value_of_another_type_is_named_by_the_type_check_not_the_key_check():
    bad, problems = schema_violations([{"messages": ["not a message"]}, {"reward": "high"}], SCHEMA)
    assert bad == 2 and problems[0].startswith("row 0: messages:") and problems[1].startswith("row 1: reward:")


def test_a_table_holds_every_shape_of_row_with_json_fields_as_their_text():
    rows = [{"messages": [message(), {"role": "user"}, None, {"role": "assistant", "tool_calls": None}], "extra": "text",
             "reward": 1.0},
            {"messages": [{"role": "assistant", "tool_calls": [None, {"id": "c2", "function": None},
                                                              {"id": "c3", "function": {"name": "g"}}]}],
             "extra": {"é": [1, None]}, "own_field": "not in the table"},
            {"messages": None, "extra": None}, {}]
    table = table_from_records(rows, SCHEMA)
    assert table.schema == SCHEMA
    assert table.to_pylist() == [
        {"messages": [{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f",
                                                                                   "arguments": '{"any":[1]}'}}]},
                      {"role": "user", "tool_calls": None}, None, {"role": "assistant", "tool_calls": None}],
         "extra": '"text"', "reward": 1.0},
        {"messages": [{"role": "assistant", "tool_calls": [None, {"id": "c2", "function": None},
                                                           {"id": "c3", "function": {"name": "g", "arguments": None}}]}],
         "extra": '{"é":[1,null]}', "reward": None},
        {"messages": None, "extra": None, "reward": None},
        {"messages": None, "extra": None, "reward": None}]
    assert rows[1]["messages"][0]["tool_calls"][2]["function"] == {"name": "g"}  # the records are not changed


def test_a_value_of_another_type_than_a_struct_holding_json_stops_the_table():
    with pytest.raises(TypeError):
        table_from_records([{"messages": ["not a message"]}], SCHEMA)


def test_a_table_that_cannot_be_built_names_the_first_bad_value_record_by_record():
    """Fields are encoded column by column; the error raised is still the first one a record by
    record reading meets (here the first record's ``extra``, though ``messages`` comes first)."""
    rows = [{"messages": [message()], "extra": {1, 2}}, {"messages": ["not a message"], "extra": None}]
    with pytest.raises(TypeError, match="set"):
        table_from_records(rows, SCHEMA)


def test_the_type_check_reads_only_declared_non_json_fields_and_names_every_problem_of_a_row():
    """Values Arrow could not take at all pass where the schema does not look (a JSON field at
    any depth, a record's own field); a row with a key and a type problem gets both, in order."""
    nowhere = {"messages": [message()], "extra": {1, 2}, "own_field": object(), "reward": 0.5}
    nowhere["messages"][0]["tool_calls"][0]["function"]["arguments"] = {3, 4}
    both = {"messages": [message(weight=1)], "reward": "high"}
    assert schema_violations([nowhere, both], SCHEMA) == (1, [
        "row 1: messages[0] has a key the schema lacks: 'weight'",
        "row 1: reward: Could not convert 'high' with type str: tried to convert to double"])
