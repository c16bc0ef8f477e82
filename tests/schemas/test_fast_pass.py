"""The fast verdict on a contract (``schemas/fast_pass.py``) passes only what pandera passes:
every rule of the trajectory contract, broken, makes it say no; a contract using what it does
not evaluate is always left to pandera."""

import pandas as pd
import pandera.pandas as pandera
import pyarrow as pa
import pytest
from pandera.errors import SchemaWarning
from pandera.typing import Series

from schemas.fast_pass import passes, validate_fast
from schemas.trajectory import TrajectorySchema
from schemas.validation import contract_frame, validate
from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from trajectory_assets.buckets import BUCKETS
from trajectory_assets.ingest.conversion import CONTRACT_COLUMNS


@pytest.fixture
def trajectories():
    return trajectory_frame(
        [make_rollout([call_item("f", "{}", "c"), output_item("c", "r"), message_item("done")]), make_rollout()]
    )


def as_ingest_checks_it(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame ingest hands the contract: its columns, strings Arrow-backed."""
    return contract_frame(pa.Table.from_pandas(frame[CONTRACT_COLUMNS], preserve_index=False))


def set_value(column, value):
    def change(frame):
        frame[column] = frame[column].astype(object)
        frame.loc[0, column] = value
        return frame
    return change


def set_column(column, values):
    def change(frame):
        frame[column] = values
        return frame
    return change


# one way to break each rule of the trajectory contract, and the check validate then names
BROKEN = [
    (set_value("trajectory_id", "not-hex"), "trajectory_id:str_matches"),
    (set_column("trajectory_id", ["a" * 32] * 2), "trajectory_id:field_uniqueness"),
    (set_value("source_format", "CSV files"), "source_format:str_matches"),
    (set_value("source_uri", None), "source_uri:not_nullable"),
    (set_value("source_line", 0), "source_line:greater_than_or_equal_to"),
    (set_value("task_key", "xyz"), "task_key:str_matches"),
    (set_value("prompt_key", "b" * 23), "prompt_key:str_matches"),
    (set_value("bucket", -1), "bucket:greater_than_or_equal_to"),
    (set_value("bucket", BUCKETS), "bucket:less_than"),
    (set_column("bucket", [1, 2]), "bucket:dtype"),  # int64, not int16
    (set_value("completed", None), "completed:"),
    (set_value("messages", "{}"), "messages:str_startswith"),
    (set_value("prompt_length", 0), "prompt_length:greater_than_or_equal_to"),
    (set_value("role_shape", "usa"), "role_shape:str_matches"),
    (set_value("role_shape", "u"), "role_shape:has_assistant_turn"),
    (set_value("num_messages", 1), "num_messages:greater_than_or_equal_to"),
    (set_value("num_assistant_turns", 0), "num_assistant_turns:greater_than_or_equal_to"),
    (set_value("num_tool_calls", -1), "num_tool_calls:greater_than_or_equal_to"),
    (set_value("unanswered_tool_calls", -1), "unanswered_tool_calls:greater_than_or_equal_to"),
    (set_value("tool_results", -1), "tool_results:greater_than_or_equal_to"),
    (set_value("tool_errors", -1), "tool_errors:greater_than_or_equal_to"),
    (set_value("content_hash", "c" * 65), "content_hash:str_matches"),
    (set_value("messages_chars", 0), "messages_chars:greater_than"),
    (set_value("unknown_items", -1), "unknown_items:greater_than_or_equal_to"),
    (set_value("reward_provenance", "[]"), "reward_provenance:str_startswith"),
    (set_value("num_messages", 9), "shape_matches_message_count"),
    (set_value("prompt_length", 5), "prompt_inside_messages"),
    (set_value("tool_errors", 7), "tool_errors_within_results"),
    (set_value("reward", float("inf")), "reward_is_finite"),
    (set_value("mask_sample", "yes"), "mask_sample:dtype"),
]


def test_a_clean_block_passes_as_pandera_passes_it(trajectories):
    for frame in (as_ingest_checks_it(trajectories), trajectories):  # Arrow strings, and Python strings
        assert validate(TrajectorySchema, frame).passed
        assert passes(TrajectorySchema, frame)
        assert validate_fast(TrajectorySchema, frame) == validate(TrajectorySchema, frame)


def test_nulls_where_the_contract_allows_them_pass(trajectories):
    frame = trajectories.assign(reward=[None, 0.5], reward_provenance=[None, None])
    assert validate(TrajectorySchema, as_ingest_checks_it(frame)).passed
    assert passes(TrajectorySchema, as_ingest_checks_it(frame))


@pytest.mark.parametrize("change, check", BROKEN, ids=[check for _, check in BROKEN])
def test_every_broken_rule_of_the_trajectory_contract_is_left_to_pandera(trajectories, change, check):
    frame = change(trajectories.copy())
    arrow_frame = as_ingest_checks_it(frame) if check != "mask_sample:dtype" else frame[CONTRACT_COLUMNS]
    assert not passes(TrajectorySchema, arrow_frame)
    result = validate_fast(TrajectorySchema, arrow_frame)
    assert result == validate(TrajectorySchema, arrow_frame)
    assert not result.passed and any(check in failure for failure in result.summary())


def test_the_broken_rules_cover_every_check_of_the_contract():
    """A new check of the contract needs a case above (that passes() sees it fail)."""
    schema = TrajectorySchema.to_schema()
    rules = {f"{name}:{check.name}" for name, column in schema.columns.items() for check in column.checks}
    rules |= {check.name for check in schema.checks}
    rules |= {f"{name}:field_uniqueness" for name, column in schema.columns.items() if column.unique}
    covered = {check for _, check in BROKEN}
    assert rules <= covered, rules - covered


class Plain(pandera.DataFrameModel):
    n: Series[int] = pandera.Field(ge=0)


class Coerced(Plain):
    class Config:
        coerce = True


class Strict(Plain):
    class Config:
        strict = True


class Warned(pandera.DataFrameModel):
    n: Series[int] = pandera.Field(ge=0, raise_warning=True)


class Raising(pandera.DataFrameModel):
    n: Series[int]

    @pandera.check("n", name="raises")
    def raises(cls, n: Series[int]) -> Series[bool]:
        raise ValueError("a broken check")


def test_a_contract_using_what_passes_does_not_evaluate_is_left_to_pandera():
    frame = pd.DataFrame({"n": [1, 2]})
    assert passes(Plain, frame) and not passes(Plain, pd.DataFrame({"n": [1, -2]}))
    assert not passes(Plain, pd.DataFrame({"m": [1]}))  # a missing column
    for model in (Coerced, Strict, Warned):
        assert validate(model, frame).passed and not passes(model, frame)
        assert validate_fast(model, frame) == validate(model, frame)
    with pytest.warns(SchemaWarning):  # a check that only warns passes, as pandera says
        assert validate_fast(Warned, pd.DataFrame({"n": [-1]})) == validate(Warned, pd.DataFrame({"n": [-1]}))


def test_a_check_that_raises_is_reported_by_pandera():
    frame = pd.DataFrame({"n": [1]})
    assert not passes(Raising, frame)
    result = validate_fast(Raising, frame)
    assert not result.passed and result == validate(Raising, frame)
