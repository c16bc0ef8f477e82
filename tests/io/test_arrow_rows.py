"""A JSON line must hold the Arrow types its dataset card declares: keys a struct lacks are
found at any depth, JSON fields hold anything, and a value of another type is named once."""

import orjson
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trajectory_assets.io import arrow_rows
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


# Values of every kind a field may meet: of its type or not, null, ints out of an int64's or a
# double's exact range, a bool where an int is declared (Arrow takes none of these three)
ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**64, max_value=2**64),
                      st.floats(allow_nan=False), st.text(max_size=2), st.just([]), st.just({}))
WIDE = pa.schema([("messages", pa.list_(pa.struct([("role", pa.string()), ("tool_calls", pa.list_(CALL)),
                                                    ("train", pa.bool_())]))),
                  ("extra", JSON), ("reward", pa.float64()), ("index", pa.int64()), ("tags", pa.list_(pa.string()))])


def maybe(strategy):
    return st.one_of(strategy, ANY_VALUE)


calls = st.lists(maybe(st.fixed_dictionaries({}, optional={
    "id": maybe(st.text(max_size=2)), "function": maybe(st.fixed_dictionaries({}, optional={
        "name": maybe(st.text(max_size=1)), "arguments": ANY_VALUE, "strict": st.booleans()}))})), max_size=2)
records = st.lists(st.fixed_dictionaries({}, optional={
    "messages": maybe(st.lists(maybe(st.fixed_dictionaries({}, optional={
        "role": maybe(st.sampled_from(["user", "assistant"])), "tool_calls": maybe(calls), "train": maybe(st.booleans()),
        "weight": st.integers()})), max_size=3)),
    "extra": ANY_VALUE, "reward": maybe(st.integers(-2**54, 2**54)), "index": maybe(st.integers(-2**64, 2**64)),
    "tags": maybe(st.lists(maybe(st.text(max_size=1)))), "own_field": ANY_VALUE}), max_size=4)


@settings(max_examples=300, deadline=None)
@given(records)
@example([{"index": 2**63}, {"index": -2**63}]).via("an int64's bounds")
@example([{"index": True}, {"reward": 2**53 + 1}, {"reward": -2**53}]).via("a bool, an int a double rounds")
@example([{"messages": [{"train": 1}]}, {"tags": ["a", 1]}, {"messages": [{"tool_calls": [{"function": {"x": 1}}]}]}])
def test_rows_plainly_of_their_types_are_passed_without_arrow_and_others_as_arrow_finds(rows):
    """Rows of nested values are first walked in Python (every value exactly of a type Arrow
    takes, no key a struct lacks); what the walk cannot vouch for is checked as before: the
    verdict is the one Arrow and the key check give alone."""
    found = schema_violations(rows, WIDE)
    conforms = arrow_rows._conformity_of(WIDE)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(arrow_rows, "_conformity_of", lambda schema: None)  # Arrow and the key check only
        assert found == schema_violations(rows, WIDE)
        for row in rows:
            if conforms(row):
                assert schema_violations([row], WIDE) == (0, [])


JSON_VALUE = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(),
                                     st.text(max_size=2)),
                           lambda inner: st.one_of(st.lists(inner, max_size=2), st.dictionaries(st.text(max_size=1), inner,
                                                                                                max_size=2)),
                           max_leaves=4)
well_typed_calls = st.one_of(st.none(), st.lists(st.one_of(st.none(), st.fixed_dictionaries({"function": st.one_of(
    st.none(), st.fixed_dictionaries({"arguments": JSON_VALUE}, optional={"name": st.text(max_size=1)}))},
    optional={"id": st.text(max_size=2)})), max_size=2))
well_typed = st.lists(st.fixed_dictionaries({}, optional={
    "messages": st.one_of(st.none(), st.lists(st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "role": st.text(max_size=1), "tool_calls": well_typed_calls, "train": st.booleans()})), max_size=3)),
    "extra": JSON_VALUE, "reward": st.one_of(st.none(), st.floats(allow_nan=False)), "index": st.integers(-9, 9),
    "tags": st.one_of(st.none(), st.lists(st.text(max_size=1)))}), max_size=4)


def plainly_encoded(value, arrow_type):
    """A value with each JSON value in it as its text, by the plain recursion over its type."""
    if value is None:
        return None
    if arrow_type == JSON:
        return orjson.dumps(value).decode()
    if pa.types.is_struct(arrow_type):
        return {**value, **{f.name: plainly_encoded(value.get(f.name), f.type) for f in arrow_type}}
    if pa.types.is_list(arrow_type):
        return [plainly_encoded(item, arrow_type.value_type) for item in value]
    return value


@settings(max_examples=300, deadline=None)
@given(well_typed)
@example([{"messages": [{"role": "a", "tool_calls": [{"function": {"arguments": "x"}}]}, {"role": "b"}, None]}])
def test_a_table_encodes_json_at_any_depth_as_the_plain_recursion_does(rows):
    """Items of a list of structs that hold no JSON value are taken as they are: the table is
    the one every value encoded one by one gives, and no record is changed."""
    before = orjson.dumps(rows, option=orjson.OPT_NON_STR_KEYS)
    storage = pa.schema([f.with_type(pa.string()) if f.type == JSON else f for f in WIDE]).remove(0).insert(
        0, pa.field("messages", arrow_rows._storage_type(WIDE.field("messages").type)))
    plain = pa.Table.from_pylist([{f.name: plainly_encoded(row.get(f.name), f.type) for f in WIDE} for row in rows],
                                 schema=storage)
    assert table_from_records(rows, WIDE).to_pylist() == plain.to_pylist()
    assert orjson.dumps(rows, option=orjson.OPT_NON_STR_KEYS) == before
