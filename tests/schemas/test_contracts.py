"""Each Pandera contract accepts good rows and rejects the malformed cases it exists for."""

import json
import pandas as pd
import pyarrow as pa
import pytest

from schemas.dpo import DpoSchema
from schemas.grpo import GrpoSchema
from schemas.quarantine import QuarantineSchema
from schemas.sft import SftSchema
from schemas.trajectory import BUCKETS as CONTRACT_BUCKETS
from schemas.trajectory import TrajectorySchema
from schemas.validation import ARROW_STRING, cast_columns, contract_frame, declared_dtypes, validate
from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
from tests.exports.rendering import build
from trajectory_assets.buckets import BUCKETS, bucket_of
from trajectory_assets.config import DpoConfig, GrpoConfig, SftConfig, SplitConfig

ID = "a" * 32
KEY = "b" * 24


def failed_checks(model, frame) -> str:
    result = validate(model, frame)
    assert not result.passed
    return " ".join(result.summary())


@pytest.fixture
def trajectories():
    return trajectory_frame(
        [make_rollout([call_item("f", "{}", "c"), output_item("c", "r"), message_item("done")]), make_rollout()]
    )


def test_trajectory_contract_accepts_converted_rows(trajectories):
    assert validate(TrajectorySchema, trajectories).passed


@pytest.mark.parametrize(
    "column, value, check",
    [
        ("role_shape", "sux", "str_matches"),  # tool message answering nothing
        ("role_shape", "usa", "str_matches"),  # system not first
        ("role_shape", "u", "has_assistant_turn"),  # no assistant turn
        ("reward", float("inf"), "reward_is_finite"),
        ("trajectory_id", "not-hex", "str_matches"),
        ("source_line", 0, "greater_than_or_equal_to"),
        ("messages", "{}", "str_startswith"),
        ("source_format", "CSV files", "str_matches"),
        ("bucket", -1, "greater_than_or_equal_to"),
        ("bucket", BUCKETS, "less_than"),
    ],
)
def test_trajectory_contract_rejects(trajectories, column, value, check):
    trajectories.loc[0, column] = value
    assert check in failed_checks(TrajectorySchema, trajectories)


def test_the_contract_bounds_buckets_by_the_package_count_and_ingest_puts_each_row_in_its_prompts():
    """The contracts import nothing of the package, so they repeat the bucket count; the
    rule itself (the prompt_key's hash) stays in the package, which fills the column."""
    assert TrajectorySchema.to_schema().columns["bucket"].checks[1].statistics == {"max_value": BUCKETS}
    assert CONTRACT_BUCKETS == BUCKETS
    rows = trajectory_frame([make_rollout(request_input=f"prompt {index}") for index in range(5)])
    assert rows["bucket"].tolist() == [bucket_of(key) for key in rows["prompt_key"]]


def test_a_bucket_of_another_integer_type_is_reported(trajectories):
    trajectories["bucket"] = trajectories["bucket"].astype("int64")
    assert "bucket:dtype" in failed_checks(TrajectorySchema, trajectories)


def test_ingest_checks_arrow_backed_strings_and_a_wrong_type_is_still_reported(trajectories):
    table = pa.Table.from_pandas(trajectories, preserve_index=False)
    frame = contract_frame(table)
    strings = [name for name, column in TrajectorySchema.to_schema().columns.items()
               if column.dtype.type == ARROW_STRING]
    assert "messages" in strings and all(frame[name].dtype == ARROW_STRING for name in strings)
    assert validate(TrajectorySchema, frame).passed
    # a column of numbers where strings are declared fails the dtype check; it is not cast
    wrong = table.set_column(table.schema.get_field_index("role_shape"), "role_shape", pa.array([1, 2]))
    assert "role_shape:dtype" in failed_checks(TrajectorySchema, contract_frame(wrong))


def test_cast_columns_casts_strings_to_arrow_but_never_makes_a_value_a_string():
    dtypes = declared_dtypes(QuarantineSchema)
    empty = cast_columns(pd.DataFrame([], columns=list(dtypes)), dtypes)
    assert validate(QuarantineSchema, empty).passed  # an empty object column has no dtype to infer
    good = cast_columns(pd.DataFrame([{"source": "f", "line": 3, "reason": "invalid_json", "detail": "x", "raw": "{"}]),
                        dtypes)
    assert good["raw"].dtype == ARROW_STRING and str(good["line"].dtype) == "Int64"
    bad = cast_columns(good.assign(detail=pd.array([7], dtype=object)), dtypes)
    assert bad["detail"].tolist() == [7]  # astype would have written "7"
    assert "detail" in failed_checks(QuarantineSchema, bad)


def test_trajectory_contract_rejects_duplicate_ids_and_shape_count_mismatch(trajectories):
    trajectories.loc[1, "trajectory_id"] = trajectories.loc[0, "trajectory_id"]
    trajectories.loc[0, "num_messages"] = 9
    failures = failed_checks(TrajectorySchema, trajectories)
    assert "field_uniqueness" in failures or "unique" in failures
    assert "shape_matches_message_count" in failures


def test_quarantine_contract():
    good = pd.DataFrame(
        {"source": ["f"], "line": pd.array([3], dtype="Int64"), "reason": ["invalid_json"], "detail": ["x"], "raw": ["{"]}
    )
    assert validate(QuarantineSchema, good).passed
    source_failure = good.assign(line=pd.array([None], dtype="Int64"), raw=[""])
    assert validate(QuarantineSchema, source_failure).passed
    assert "record_rows_have_raw_text" in failed_checks(QuarantineSchema, good.assign(raw=[""]))
    assert "str_matches" in failed_checks(QuarantineSchema, good.assign(reason=["Bad Reason"]))


def sft_rows(**overrides):
    row = {"trajectory_id": ID, "task_key": KEY, "split": "train", "role_shape": "ucta",
           "reward": 1.0, "fields": "messages,tools"}
    row.update(overrides)
    return pd.DataFrame([row])


def test_sft_contract_on_built_rows(trajectories):
    rows = build("sft", trajectories, SftConfig(), SplitConfig()).rows
    assert len(rows) == 2 and validate(SftSchema, rows).passed


@pytest.mark.parametrize(
    "overrides, check",
    [
        ({"role_shape": "ucx"}, "str_matches"),
        ({"role_shape": "su"}, "has_assistant_turn"),
        ({"split": "test"}, "isin"),
        ({"fields": "prompt,messages"}, "fields:str_matches"),
        ({"fields": "messagesx"}, "fields:str_matches"),
    ],
)
def test_sft_contract_rejects(overrides, check):
    assert check in failed_checks(SftSchema, sft_rows(**overrides))


def dpo_frame():
    rows = [make_rollout([message_item(text)], request_input="q", reward=reward, _ng_task_index=0)
            for text, reward in (("good", 1.0), ("bad", 0.0))]
    return build("dpo", trajectory_frame(rows), DpoConfig(), SplitConfig()).rows


def test_dpo_contract_on_built_rows():
    rows = dpo_frame()
    assert len(rows) == 1 and validate(DpoSchema, rows).passed


@pytest.mark.parametrize(
    "overrides, check",
    [
        ({"quality_difference": 0.5}, "difference_is_reward_gap"),
        ({"quality_difference": 0.0, "reward_chosen": 0.0}, "greater_than"),
        ({"chosen_shape": "ua"}, "str_matches"),  # chosen must start with the assistant
        ({"prompt_shape": "s"}, "str_contains"),  # a prompt needs a user turn
        ({"rejected_shape": "ax"}, "prompt_plus_rejected_follows_role_rules"),
    ],
)
def test_dpo_contract_rejects(overrides, check):
    rows = dpo_frame()
    for column, value in overrides.items():
        rows[column] = value
    assert check in failed_checks(DpoSchema, rows)


def test_dpo_contract_rejects_pairing_a_trajectory_with_itself():
    rows = dpo_frame()
    rows["rejected_id"] = rows["chosen_id"]
    assert "chosen_is_not_rejected" in failed_checks(DpoSchema, rows)


def test_grpo_contract():
    rows = build("grpo", trajectory_frame([make_rollout(agent_ref="a")]), GrpoConfig(), SplitConfig()).rows
    assert validate(GrpoSchema, rows).passed
    assert "greater_than_or_equal_to" in failed_checks(GrpoSchema, rows.assign(input_items=0))
    assert "str_length" in failed_checks(GrpoSchema, rows.assign(agent_name=""))
    doubled = pd.concat([rows, rows], ignore_index=True)
    assert "unique" in failed_checks(GrpoSchema, doubled)


def test_sft_hermes_contract():
    from schemas.sft_hermes import SftHermesSchema
    from tests.fixtures import hermes_rows


    frame = trajectory_frame([hermes_rows.tool_run(), make_rollout()])
    rows = build("sft_hermes", frame, SftConfig(), SplitConfig()).rows
    assert sorted(rows["from_shape"]) == ["shg", "shgtg"]
    assert validate(SftHermesSchema, rows).passed
    assert "str_matches" in failed_checks(SftHermesSchema, rows.assign(from_shape="hsg"))  # system not first
    assert "str_matches" in failed_checks(SftHermesSchema, rows.assign(from_shape="sht"))  # tool without a call
    assert "has_gpt_turn" in failed_checks(SftHermesSchema, rows.assign(from_shape="sh"))


def test_validation_leaves_no_copy_of_the_frame_alive():
    """Pandera's cached accessor made a reference cycle with its copy of the frame; large export
    lines then waited for a full garbage collection."""
    import gc

    import pandas as pd

    from schemas.sft import SftSchema
    from schemas.validation import validate

    frame = pd.DataFrame({"trajectory_id": ["a" * 32], "task_key": ["b" * 24], "prompt_key": ["c" * 24],
                          "split": ["train"], "role_shape": ["ua"], "reward": [1.0], "fields": ["messages"]})
    for split in ("train", "nope"):  # a passing and a failing validation
        frame.loc[0, "split"] = split
        gc.collect()
        before = {id(o) for o in gc.get_objects()}
        validate(SftSchema, frame)
        assert not [o for o in gc.get_objects() if id(o) not in before and isinstance(o, pd.DataFrame)]


def test_a_contract_checked_in_chunks_numbers_rows_across_them_and_finds_duplicates_between_them(trajectories):
    from schemas.validation import ChunkedContract

    second = trajectories.copy()
    second.loc[1, "messages"] = "{}"  # row 3 of the whole table
    contract = ChunkedContract(TrajectorySchema)
    for chunk in (trajectories, second):  # the first chunk's ids again: a duplicate of each
        contract.check(chunk.reset_index(drop=True))
    result = contract.result()
    assert not result.passed and result.rows_checked == 4
    assert list(result.failures) == [3] and "str_startswith" in result.failures[3]
    assert result.table_errors == ["2 duplicate value(s) of [('trajectory_id',)] across chunks"]


def test_duplicates_across_chunks_count_every_row_whose_value_an_earlier_chunk_held():
    """A value repeated inside a later chunk counts each time; inside its first chunk it is the
    contract's own unique check, not a duplicate across chunks."""
    import pandera.pandas as pandera
    from pandera.typing import Series

    from schemas.validation import ChunkedContract

    class Ids(pandera.DataFrameModel):
        trajectory_id: Series[str] = pandera.Field(unique=True)

    contract = ChunkedContract(Ids)
    for ids in (["a", "b", "b"], ["a", "a", "c"], ["c", "b", "d"]):
        contract.check(pd.DataFrame({"trajectory_id": ids}))
    assert contract.duplicates() == 4  # a, a (chunk 2); c, b (chunk 3)
    assert "4 duplicate value(s) of [('trajectory_id',)] across chunks" in contract.result().table_errors


def test_contracts_checked_shard_by_shard_and_absorbed_find_what_one_contract_finds(trajectories):
    """Each shard of an export is checked in its own step; the merge absorbs them in shard
    order: rows are numbered across shards and a unique key is compared across them, as if one
    contract had checked every chunk (a block a shard checked stays a block of its own)."""
    from schemas.validation import ChunkedContract

    broken = trajectories.copy()
    broken.loc[1, "messages"] = "{}"
    chunks = [trajectories, broken.assign(trajectory_id=["c" * 32, "d" * 32]),
              trajectories.assign(trajectory_id=["e" * 32, "f" * 32]), trajectories]  # the last: the first's ids
    whole = ChunkedContract(TrajectorySchema, block_rows=4)
    for chunk in chunks:
        whole.check(chunk.reset_index(drop=True))
    # the second shard fills a block and checks it; the others hold their chunk back
    shards = [ChunkedContract(TrajectorySchema, block_rows=4) for _ in range(3)]
    for shard, chunk in zip([0, 1, 1, 2], chunks):
        shards[shard].check(chunk.reset_index(drop=True))
    assert [shard.rows_checked for shard in shards] == [0, 4, 0]
    merged = shards[0]
    for later in shards[1:]:
        merged.absorb(later)
    result = merged.result()
    assert result == whole.result()
    assert result.rows_checked == 8 and list(result.failures) == [3]
    assert result.table_errors == ["2 duplicate value(s) of [('trajectory_id',)] across chunks"]


def _validate_calls(monkeypatch) -> list[int]:
    """The rows of each pandera call the chunked contracts make from now on."""
    import schemas.validation

    calls = []
    real_validate = schemas.validation.validate
    monkeypatch.setattr(schemas.validation, "validate", lambda model, frame: calls.append(len(frame)) or
                        real_validate(model, frame))
    return calls


def _three_chunks_the_second_broken(trajectories) -> list[pd.DataFrame]:
    """Three chunks of two rows, ids unique across them; row 3 of the three fails a check."""
    broken = trajectories.copy()
    broken.loc[1, "messages"] = "{}"
    return [chunk.assign(trajectory_id=[f"{i}{c}" * 16 for c in "ab"]).reset_index(drop=True)
            for i, chunk in enumerate((trajectories, broken, trajectories))]


def test_a_merge_checks_the_chunks_shards_held_back_in_blocks_across_shards(trajectories, monkeypatch):
    """A shard's rows seldom fill a block: the merge holds its chunks back with the next
    shard's, so an export pays a pandera call per block of rows, not one per shard."""
    from schemas.validation import ChunkedContract

    calls = _validate_calls(monkeypatch)
    shards = []
    for chunk in _three_chunks_the_second_broken(trajectories):
        shard = ChunkedContract(TrajectorySchema, block_rows=4)
        shard.check(chunk)
        shards.append(shard)
    merged = shards[0]
    for later in shards[1:]:
        merged.absorb(later)
    result = merged.result()
    assert calls == [4, 2] and not any(later.pending for later in shards[1:])  # held by the merged one only
    assert not result.passed and result.rows_checked == 6 and list(result.failures) == [3]


def test_a_contract_checked_in_chunks_passes_clean_chunks(trajectories):
    from schemas.validation import ChunkedContract

    contract = ChunkedContract(TrajectorySchema)
    contract.check(trajectories.iloc[:1].reset_index(drop=True))
    contract.check(trajectories.iloc[1:].reset_index(drop=True))
    assert contract.result().passed and contract.result().rows_checked == 2


def test_a_contract_checked_in_blocks_holds_chunks_back_and_finds_what_chunk_by_chunk_finds(trajectories,
                                                                                           monkeypatch):
    from schemas.validation import ChunkedContract

    calls = _validate_calls(monkeypatch)
    unique = _three_chunks_the_second_broken(trajectories)
    by_chunk, by_block = ChunkedContract(TrajectorySchema), ChunkedContract(TrajectorySchema, block_rows=4)
    for chunk in unique:
        by_chunk.check(chunk)
        by_block.check(chunk)
    # chunk by chunk: a call per chunk; in blocks: one call once 4 rows wait, the rest at the result
    assert calls == [2, 2, 4, 2]
    by_block_result = by_block.result()
    assert calls == [2, 2, 4, 2, 2] and by_block_result == by_chunk.result()
    assert not by_block_result.passed and by_block_result.rows_checked == 6
    assert list(by_block_result.failures) == [3]  # numbered across the blocks as across the chunks


def raw_record(tmp_path, inputs=False):
    from trajectory_assets.io.source_files import describe_batch, discover
    from trajectory_assets.sources import INPUTS_SUFFIXES

    (tmp_path / "run.jsonl").write_text('{"x": 1}\n')
    if inputs:
        (tmp_path / "run_materialized_inputs.jsonl").write_text('{"_ng_task_index": 0}\n')
    (source,) = discover([str(tmp_path / "run.jsonl")], INPUTS_SUFFIXES)
    return describe_batch(source)


def raw_frame(*records):
    from schemas.raw_rollouts import RawRolloutSchema

    return pd.DataFrame(list(records), columns=list(RawRolloutSchema.to_schema().columns)).astype({"bytes": "Int64"})


def test_raw_rollouts_contract_accepts_a_harbor_job_with_side_files_and_an_unreadable_file(tmp_path):
    from schemas.raw_rollouts import RawRolloutSchema
    from tests.fixtures.harbor_jobs import harbor_jobs
    from trajectory_assets.io.source_files import describe_batch, discover
    from trajectory_assets.sources import FOLDER_RECORDS, INPUTS_SUFFIXES, SIDE_FILES

    jobs = harbor_jobs(tmp_path)
    (tmp_path / "run.jsonl").write_text('{"x": 1}\n')
    (tmp_path / "run_aggregate_metrics.json").write_text("{}")
    broken = next(jobs.rglob("result.json"))
    broken.unlink()
    broken.symlink_to(tmp_path / "nowhere")
    records = [describe_batch(source) for source in
               discover([str(jobs), str(tmp_path / "run.jsonl")], INPUTS_SUFFIXES, SIDE_FILES, FOLDER_RECORDS)]
    assert any(record["records"] for record in records) and any(record["side_files"] for record in records)
    assert any(file["error"] for record in records for trial in record["records"] or [] for file in trial["files"])
    assert validate(RawRolloutSchema, raw_frame(*records)).passed


@pytest.mark.parametrize("inputs", [False, True])
def test_raw_rollouts_contract_accepts_what_describe_batch_records(tmp_path, inputs):
    from schemas.raw_rollouts import RawRolloutSchema

    record = raw_record(tmp_path, inputs)
    assert validate(RawRolloutSchema, raw_frame(record)).passed
    assert (record["inputs_sha256"] is not None) is inputs


@pytest.mark.parametrize("change, check", [
    ({"sha256": None}, "unreadable_iff_error"),
    ({"error": "cannot read: gone"}, "unreadable_iff_error"),
    ({"sha256": "abc"}, "str_matches"),
    ({"inputs_uri": "/x_materialized_inputs.jsonl"}, "inputs_hashed_or_failed"),
    ({"bytes": -1}, "greater_than_or_equal_to"),
    ({"data_version": ""}, "str_matches"),
    ({"side_files": None}, "side_files"),
    ({"side_files": [{"uri": "/x_aggregate_metrics.json", "bytes": 3, "sha256": None, "error": None}]},
     "side_files_listed"),
    ({"records": []}, "records_listed"),
    ({"records": [{"name": "t1", "folder": "/j/t1", "files": [{"path": "agent/trajectory.json", "bytes": 9,
                                                               "sha256": "abc", "error": None}]}]}, "records_listed"),
])
def test_raw_rollouts_contract_rejects(tmp_path, change, check):
    from schemas.raw_rollouts import RawRolloutSchema

    result = validate(RawRolloutSchema, raw_frame({**raw_record(tmp_path), **change}))
    assert not result.passed and any(check in failure for failure in result.summary())


AXOLOTL_ROW = {"messages": [{"role": "user", "content": "q", "train": False},
                            {"role": "assistant", "content": "a", "train": True}],
               "tools": None, "trajectory_id": "a" * 32, "task_key": "b" * 24}


@pytest.mark.parametrize("change, check", [
    (lambda row: row["messages"][1].update(train=False), "trained_roles"),  # a row that trains nothing
    (lambda row: row["messages"][0].update(train=True), "trained_roles"),  # a user's words trained
    (lambda row: row["messages"][0].pop("train"), "every_message_flagged"),
])
def test_axolotl_contract_rejects(change, check):
    from schemas.axolotl import AxolotlSchema
    from schemas.export_row import checked_frame

    good = checked_frame(AxolotlSchema, [AXOLOTL_ROW], ["c" * 24], ["train"])
    assert validate(AxolotlSchema, good).passed
    row = json.loads(json.dumps(AXOLOTL_ROW))
    change(row)
    assert check in failed_checks(AxolotlSchema, checked_frame(AxolotlSchema, [row], ["c" * 24], ["train"]))


@pytest.mark.parametrize("margins, holds", [({"correctness": 1.0, "format": 0.0}, True),
                                            ({"correctness": 1.0, "format": -0.5}, False), ({}, False)])
def test_dpo_contract_checks_that_a_dominance_pair_dominates(margins, holds):
    from schemas.dpo import DpoSchema as Schema

    assert Schema.pair_columns([{"pairing": "dominance", "component_margins": margins}])["dominance_holds"] == [holds]
    assert Schema.pair_columns([{"pairing": "best_vs_worst", "component_margins": margins}])["dominance_holds"] == [True]
    rows = dpo_frame()
    rows["dominance_holds"] = holds
    assert validate(DpoSchema, rows).passed is holds
