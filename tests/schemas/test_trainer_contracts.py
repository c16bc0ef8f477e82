"""The LLaMA-Factory and verl contracts accept rendered rows and reject each malformed case."""

import orjson
import pandas as pd
import pytest

from schemas.llama_factory import LlamaFactorySchema
from schemas.validation import validate
from schemas.verl import VerlSchema
from trajectory_assets.formats.chat import role_shape
from trajectory_assets.formats.llama_factory import to_llama_factory, turn_shape
from trajectory_assets.formats.verl import verl_row

ID, OTHER_ID = "a" * 32, "c" * 32
KEY, OTHER_KEY = "b" * 24, "d" * 24
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
MESSAGES = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "r"},
    {"role": "assistant", "content": "done"},
]


def failed_checks(model, frame) -> str:
    result = validate(model, frame)
    assert not result.passed
    return " ".join(result.summary())


def llama_factory_frame():
    rows = []
    for trajectory_id, messages in ((ID, MESSAGES), (OTHER_ID, MESSAGES[1:2] + MESSAGES[-1:])):
        rendered = to_llama_factory(messages, None)
        rows.append({"trajectory_id": trajectory_id, "task_key": KEY, "prompt_key": KEY, "split": "train",
                     "turn_shape": turn_shape(rendered["conversations"]), "line": orjson.dumps(rendered).decode()})
    return pd.DataFrame(rows)


def verl_frame():
    rows = []
    for index, (task_key, prompt) in enumerate(((KEY, MESSAGES[:2]), (OTHER_KEY, MESSAGES[1:4]))):
        row = verl_row(prompt=prompt, data_source="nemo_gym", ability="agent", ground_truth=None, split="validation",
                       index=index, task_key=task_key, agent_ref=None, tools=None, num_rollouts=1, mean_reward=1.0,
                       trajectory_ids=[ID])
        rows.append({"task_key": task_key, "prompt_key": task_key, "split": "validation",
                     "data_source": row["data_source"], "ability": row["ability"],
                     "prompt_shape": role_shape(prompt), "index": index, "mean_reward": 1.0,
                     "line": orjson.dumps(row).decode()})
    return pd.DataFrame(rows)


def test_llama_factory_contract_accepts_rendered_rows():
    frame = llama_factory_frame()
    assert frame["turn_shape"].tolist() == ["hfog", "hg"]
    assert validate(LlamaFactorySchema, frame).passed


@pytest.mark.parametrize(
    "column, value, check",
    [
        ("turn_shape", "hgg", "str_matches"),  # two assistant turns in a row
        ("turn_shape", "gh", "str_matches"),  # opens on the assistant
        ("turn_shape", "hgh", "str_matches"),  # odd length, ends on a human turn
        ("turn_shape", "hfo", "str_matches"),  # ends on an observation
        ("turn_shape", "og", "str_matches"),  # opens on a tool result
        ("turn_shape", "", "str_matches"),
        ("split", "test", "isin"),
        ("task_key", "not-hex", "str_matches"),
        ("line", '{"messages":[]}', "str_startswith"),
    ],
)
def test_llama_factory_contract_rejects(column, value, check):
    frame = llama_factory_frame()
    frame.loc[0, column] = value
    assert check in failed_checks(LlamaFactorySchema, frame)


def test_llama_factory_contract_rejects_duplicate_trajectory_ids():
    frame = llama_factory_frame()
    frame.loc[1, "trajectory_id"] = ID
    failures = failed_checks(LlamaFactorySchema, frame)
    assert "field_uniqueness" in failures or "unique" in failures


def test_llama_factory_contract_is_strict():
    assert "column_in_schema" in failed_checks(LlamaFactorySchema, llama_factory_frame().assign(extra="x"))


def test_verl_contract_accepts_rendered_rows():
    frame = verl_frame()
    assert frame["prompt_shape"].tolist() == ["su", "uct"]
    assert validate(VerlSchema, frame).passed


@pytest.mark.parametrize(
    "column, value, check",
    [
        ("prompt_shape", "s", "str_contains"),  # no user turn
        ("prompt_shape", "a", "str_contains"),
        ("prompt_shape", "us", "str_matches"),  # system not first
        ("prompt_shape", "ssu", "str_matches"),
        ("split", "dev", "isin"),
        ("data_source", "", "str_length"),
        ("ability", "", "str_length"),
        ("index", -1, "greater_than_or_equal_to"),
        ("line", '{"prompt":[]}', "str_startswith"),
    ],
)
def test_verl_contract_rejects(column, value, check):
    frame = verl_frame()
    frame.loc[0, column] = value
    assert check in failed_checks(VerlSchema, frame)


def test_verl_contract_rejects_duplicate_task_keys():
    frame = verl_frame()
    frame.loc[1, "task_key"] = KEY
    failures = failed_checks(VerlSchema, frame)
    assert "field_uniqueness" in failures or "unique" in failures


def test_verl_contract_is_strict():
    assert "column_in_schema" in failed_checks(VerlSchema, verl_frame().assign(line_number=1))
