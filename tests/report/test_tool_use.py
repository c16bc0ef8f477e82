import orjson

from tests.conftest import call_item, make_rollout, message_item, output_item, write_jsonl
from trajectory_assets import layout
from trajectory_assets.chat.trajectory import TRAJECTORY_ARROW_SCHEMA
from trajectory_assets.exports.families.frames import FrameTable
from trajectory_assets.ingest.conversion import ingest
from trajectory_assets.io.source_files import discover
from trajectory_assets.io.storage import Storage
from trajectory_assets.io.trajectory_table import StoredTrajectories
from trajectory_assets.ingest.tool_use import TOOL_USE_RULE, ToolUseRecorder
from trajectory_assets.report.tool_use import tool_use_of
from trajectory_assets.sources import INPUTS_SUFFIXES

CALLED = [make_rollout([call_item("search", "{}", "c"), output_item("c", "error: down"), message_item("x")],
                       request_input="a"),
          make_rollout([call_item("search", "{}", "c"), output_item("c", "{}"), call_item("open", "{}", "d"),
                        output_item("d", '{"success": false}'), message_item("y")], request_input="b")]
QUIET = make_rollout([message_item("no tools")], request_input="c")


def ingest_batch(store: Storage, key: str, source, record: bool = True) -> None:
    """One batch as the ingest asset writes it: trajectories, summary and (unless not
    ``record``, as before records were kept) its tool use."""
    recorder = ToolUseRecorder()
    with store.parquet_writer(layout.batch_trajectories(key), TRAJECTORY_ARROW_SCHEMA) as writer:
        ingest(discover([str(source)], INPUTS_SUFFIXES), writer.write_table, lambda rows: None,
               on_trajectory=recorder.add)
    store.write_bytes(layout.batch_summary(key), b"{}")
    if record:
        store.write_bytes(layout.batch_tool_use(key), orjson.dumps(recorder.result()))


def ids_of(table) -> list[str]:
    return [i for chunk in table.scan(["trajectory_id"]) for i in chunk["trajectory_id"]]


def test_ingest_records_the_tool_use_a_reading_of_the_messages_counts(tmp_path):
    store = Storage(str(tmp_path / "out"))
    ingest_batch(store, "a", write_jsonl(tmp_path / "a.jsonl", [*CALLED, QUIET]))
    table = StoredTrajectories(store, ["a"])
    first, second, quiet = ids_of(table)
    record = store.read_json(layout.batch_tool_use("a"))
    assert record == {"rule": TOOL_USE_RULE, "trajectories": {
        first: {"search": [1, 1]},
        second: {"search": [1, 0], "open": [1, 1]},  # a JSON result with success false failed
    }}  # a trajectory without calls is not recorded
    frame = next(iter(table.scan(["trajectory_id", "num_tool_calls", "messages"])))
    assert tool_use_of(FrameTable(frame), {first, second}) == record["trajectories"]


def test_the_report_trusts_current_records_and_reads_only_batches_without_one(tmp_path):
    store = Storage(str(tmp_path / "out"))
    ingest_batch(store, "a", write_jsonl(tmp_path / "a.jsonl", CALLED[:1]))
    ingest_batch(store, "b", write_jsonl(tmp_path / "b.jsonl", CALLED[1:]), record=False)
    table = StoredTrajectories(store, ["a", "b"])
    first, second = ids_of(table)
    # a record is what ingest counted: the messages of its batch are not read again
    store.write_bytes(layout.batch_tool_use("a"), orjson.dumps(
        {"rule": TOOL_USE_RULE, "trajectories": {first: {"search": [7, 0]}}}))
    assert tool_use_of(table, {first, second}) == {first: {"search": [7, 0]},
                                                  second: {"search": [1, 0], "open": [1, 1]}}
    # the batch without one was read once, and its record stored for the next report
    assert store.read_json(layout.batch_tool_use("b"))["trajectories"] == {second: {"search": [1, 0], "open": [1, 1]}}
    # a record counted under another rule is read again
    store.write_bytes(layout.batch_tool_use("a"), orjson.dumps(
        {"rule": TOOL_USE_RULE - 1, "trajectories": {first: {"search": [7, 0]}}}))
    assert tool_use_of(table, {first}) == {first: {"search": [1, 1]}}
    assert store.read_json(layout.batch_tool_use("a"))["rule"] == TOOL_USE_RULE
