"""verl rows fit the one explicit Arrow schema, whatever each prompt holds, and carry the
fields verl's multi-turn agent loop reads."""

import orjson
import pytest

from trajectory_assets.io.arrow_rows import table_from_records
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.exports.families.grpo import ground_truth_of
from trajectory_assets.exports.verl import SCHEMA as VERL_SCHEMA, verl_row

TOOLS = [{"type": "function", "function": {"name": "f", "description": "", "parameters": {"type": "object"}}}]


def row(prompt, **overrides):
    arguments = dict(
        prompt=prompt, data_source="nemo_gym/math", ability="math", ground_truth="4", split="train", index=0,
        task_key="b" * 24, agent_ref={"name": "math_agent"}, tools=TOOLS, num_rollouts=2, mean_reward=0.5,
        reward_components=None, trajectory_ids=["a" * 32, "c" * 32],
    )
    arguments.update(overrides)
    return verl_row(**arguments)


def tool_prompt(arguments):
    return [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "reasoning_content": "hm",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]


def to_table(rows):
    return table_from_records(rows, VERL_SCHEMA)


def test_plain_row_converts_and_keeps_its_values():
    table = to_table([row([{"role": "user", "content": "2+2?"}])])
    [back] = table.to_pylist()
    assert back["prompt"] == [{"role": "user", "content": "2+2?", "reasoning_content": None, "tool_calls": None,
                               "tool_call_id": None}]
    assert back["reward_model"] == {"style": "rule", "ground_truth": "4"}
    assert back["extra_info"]["index"] == 0 and back["extra_info"]["trajectory_ids"] == ["a" * 32, "c" * 32]
    # JSON fields are stored as their text (datasets decodes them: tests/trainers)
    assert [orjson.loads(tool) for tool in back["extra_info"]["tools"]] == TOOLS
    assert orjson.loads(back["extra_info"]["agent_ref"]) == {"name": "math_agent"}


def test_row_without_ground_truth_tools_or_agent_converts():
    built = row([{"role": "user", "content": "q"}], ground_truth=None, tools=None, agent_ref=None, mean_reward=None)
    [back] = to_table([built]).to_pylist()
    assert back["reward_model"]["ground_truth"] is None
    assert back["extra_info"]["tools"] is None and back["extra_info"]["agent_ref"] is None


def test_tool_calling_prompt_converts_with_string_content_argument_objects_and_reasoning():
    built = row(tool_prompt('{"x": 1}'))
    assert built["prompt"][2] == {"role": "assistant", "content": "", "reasoning_content": "hm", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}
    assert built["prompt"][3]["tool_call_id"] == "c1"
    assert to_table([built]).num_rows == 1


def test_rows_with_different_argument_shapes_share_one_schema():
    rows = [row(tool_prompt('{"x": 1}')), row(tool_prompt('{"y": {"z": [1, 2]}}'), index=1),
            row([{"role": "user", "content": "q"}], index=2, ground_truth=None)]
    table = to_table(rows)
    assert table.schema == VERL_SCHEMA and table.num_rows == 3
    back = table.to_pylist()
    assert [r["prompt"][-1]["role"] for r in back] == ["tool", "tool", "user"]
    arguments = [orjson.loads(r["prompt"][2]["tool_calls"][0]["function"]["arguments"]) for r in back[:2]]
    assert arguments == [{"x": 1}, {"y": {"z": [1, 2]}}]


def test_a_task_with_tools_runs_in_the_tool_agent_with_kwargs_for_each_tool():
    built = row([{"role": "system", "content": "s"}, {"role": "user", "content": "2+2?"}])
    assert built["agent_name"] == "tool_agent"
    extra = built["extra_info"]
    # the shape of verl's examples/data_preprocess/gsm8k_tool_agent_loop.py
    assert extra["need_tools_kwargs"] is True
    assert extra["tools_kwargs"] == {"f": {"create_kwargs": {"ground_truth": "4"}}}
    assert extra["interaction_kwargs"] == {"name": "nemo_gym/math", "query": "2+2?", "ground_truth": "4"}


def test_a_task_without_tools_runs_single_turn_with_empty_tool_kwargs():
    built = row([{"role": "user", "content": "q"}], tools=None, ground_truth=None)
    assert built["agent_name"] == "single_turn_agent"
    # always an object: verl's loop calls .get on it
    assert built["extra_info"]["tools_kwargs"] == {} and built["extra_info"]["need_tools_kwargs"] is False
    assert built["extra_info"]["interaction_kwargs"] == {"name": "nemo_gym/math", "query": "q", "ground_truth": None}


def test_tools_without_a_ground_truth_get_empty_kwargs():
    built = row([{"role": "user", "content": "q"}], ground_truth=None)
    assert built["extra_info"]["tools_kwargs"] == {"f": {}}


def test_unparseable_arguments_in_a_prompt_are_unrepresentable():
    with pytest.raises(Unrepresentable) as error:
        row(tool_prompt("{not json"))
    assert error.value.reason == "unparseable_tool_arguments"


def test_row_serializes_as_a_data_source_first_json_line():
    assert orjson.dumps(row([{"role": "user", "content": "q"}])).startswith(b'{"data_source":')


def test_non_text_content_is_unrepresentable():
    parts = [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    with pytest.raises(Unrepresentable) as error:
        row([{"role": "user", "content": parts}])
    assert error.value.reason == "non_text_content"


@pytest.mark.parametrize(
    "metadata, expected",
    [
        ({"expected_answer": "42"}, "42"),
        ({"expected_answer": 42}, "42"),
        ({"expected_answer": ["a", 1]}, '["a",1]'),
        ({"ground_truth": {"k": 1}}, '{"k":1}'),
        ({"ground_truth": "x"}, "x"),
        ({"expected_answer": "first", "ground_truth": "second"}, "first"),
        ({"expected_answer": None, "ground_truth": "second"}, "second"),
        ({"other": 1}, None),
        ({}, None),
    ],
)
def test_ground_truth_of(metadata, expected):
    assert ground_truth_of(metadata) == expected
