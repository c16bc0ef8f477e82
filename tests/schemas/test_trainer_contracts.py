"""The LLaMA-Factory, verl, TRL and NeMo RL contracts accept rendered rows and reject each malformed case."""

import pytest

from schemas.export_row import checked_frame
from schemas.llama_factory import LlamaFactorySchema
from schemas.shapes import value_types
from schemas.validation import validate
from schemas.verl import VerlSchema
from trajectory_assets.exports.llama_factory import to_llama_factory
from trajectory_assets.exports.template import template_messages
from trajectory_assets.exports.verl import verl_row

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


def frame_of(model, records, split="train"):
    """The frame ``model`` checks for these written rows (as the export writer builds it)."""
    return checked_frame(model, records, [KEY] * len(records), [split] * len(records))


def llama_factory_frame():
    records = [{**to_llama_factory(messages, None), "trajectory_id": trajectory_id, "task_key": KEY}
               for trajectory_id, messages in ((ID, MESSAGES), (OTHER_ID, MESSAGES[1:2] + MESSAGES[-1:]))]
    return frame_of(LlamaFactorySchema, records)


def verl_frame():
    records = [verl_row(prompt=prompt, data_source="nemo_gym", ability="agent", ground_truth=None, split="validation",
                        index=index, task_key=task_key, agent_ref=None, tools=None, num_rollouts=1, mean_reward=1.0,
                        reward_components=None,
                        trajectory_ids=[ID])
               for index, (task_key, prompt) in enumerate(((KEY, MESSAGES[:2]), (OTHER_KEY, MESSAGES[1:4])))]
    return frame_of(VerlSchema, records, split="validation")


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
        ("fields", "messages,system", "fields:str_matches"),  # not the conversations first
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
        ("value_types", "arguments:str,content:str", "str_matches"),  # double-encoded under `| tojson`
        ("fields", "prompt,data_source", "fields:str_matches"),
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


# --- TRL and NeMo RL: template-ready messages ---------------------------------------------------


def sft_flavor_frame(model):
    records = [{"messages": template_messages(messages), "tools": None, "reward": 1.0, "task_type": None,
                "trajectory_id": trajectory_id, "task_key": KEY}
               for trajectory_id, messages in ((ID, MESSAGES), (OTHER_ID, MESSAGES[1:2] + MESSAGES[-1:]))]
    return frame_of(model, records)


def test_template_messages_turn_argument_strings_into_objects():
    rendered = template_messages(MESSAGES)
    assert rendered[2]["tool_calls"][0]["function"]["arguments"] == {}
    assert value_types(rendered) == "arguments:dict,content:str"
    assert value_types(MESSAGES) == "arguments:str,content:str"  # the OpenAI wire form a template double-encodes


@pytest.mark.parametrize("model_name", ["TrlSftSchema", "NemoRlSftSchema"])
def test_sft_flavor_contracts_accept_template_messages_and_reject_string_arguments(model_name):
    import schemas.nemo_rl
    import schemas.trl

    model = getattr(schemas.trl, model_name, None) or getattr(schemas.nemo_rl, model_name)
    frame = sft_flavor_frame(model)
    assert validate(model, frame).passed
    frame.loc[0, "value_types"] = "arguments:str,content:str"
    assert "str_matches" in failed_checks(model, frame)


@pytest.mark.parametrize("shape", ["ucta", "uct", "uc", "ua"])
def test_nemo_rl_sft_requires_the_assistant_to_speak_last(shape):
    from schemas.nemo_rl import NemoRlSftSchema
    from schemas.trl import TrlSftSchema

    frame = sft_flavor_frame(TrlSftSchema)
    frame.loc[0, "role_shape"] = shape
    assert validate(TrlSftSchema, frame).passed  # TRL trains on a conversation ending on a tool result
    assert validate(NemoRlSftSchema, frame).passed is shape.endswith(("a", "c"))


def nemo_rl_dpo_frame(chosen_shape="a", rejected_shape="cta"):
    from schemas.nemo_rl import NemoRlDpoSchema

    context, chosen, rejected = template_messages(MESSAGES[:2]), template_messages(MESSAGES[-1:]), \
        template_messages(MESSAGES[2:])
    record = {"context": context, "completions": [{"rank": 0, "completion": chosen}, {"rank": 1, "completion": rejected}],
              "tools": [], "quality_difference": 1.0, "reward_chosen": 1.0, "reward_rejected": 0.0, "chosen_id": ID,
              "rejected_id": OTHER_ID, "task_key": KEY, "pairing": "best_vs_worst"}
    frame = frame_of(NemoRlDpoSchema, [record])
    assert (frame.loc[0, "prompt_shape"], frame.loc[0, "chosen_shape"], frame.loc[0, "rejected_shape"]) == \
        ("su", "a", "cta")
    frame.loc[0, "chosen_shape"], frame.loc[0, "rejected_shape"] = chosen_shape, rejected_shape
    return frame


def test_nemo_rl_dpo_contract_accepts_completions_ending_with_the_assistant():
    from schemas.nemo_rl import NemoRlDpoSchema

    assert validate(NemoRlDpoSchema, nemo_rl_dpo_frame()).passed


@pytest.mark.parametrize("side", ["chosen_shape", "rejected_shape"])
def test_nemo_rl_dpo_contract_rejects_a_completion_ending_on_a_tool_result(side):
    from schemas.nemo_rl import NemoRlDpoSchema

    frame = nemo_rl_dpo_frame(**{side: "ct"})
    assert "str_contains" in failed_checks(NemoRlDpoSchema, frame)
