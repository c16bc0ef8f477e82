"""Conformance over the real NeMo Gym files in ../shared/corpus/nemo_gym."""

import json

import pytest

from tests.split_files import split_text
from tests.spec_checks import CHECKERS
from trajectory_assets.cli import main

# the two files NOTICE.md describes as deliberately not rollouts, and the shapes seen in
# the corpus that cannot become a trainable trajectory
EXPECTED_REASONS = {"invalid_json", "not_a_rollout", "no_model_output", "no_prompt"}


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory, request):
    folder = request.getfixturevalue("corpus_nemo_gym")
    storage = tmp_path_factory.mktemp("corpus")
    assert main(["run", "--source", str(folder), "--storage", str(storage)]) == 0
    return folder, storage


@pytest.fixture(scope="module")
def corpus_nemo_gym():
    from tests.conftest import shared_data

    return shared_data("corpus/nemo_gym")


def test_every_record_is_accounted_for(corpus_run):
    folder, storage = corpus_run
    lines = sum(1 for path in folder.glob("*.jsonl") for line in path.read_bytes().split(b"\n") if line.strip())
    stats = json.loads((storage / "reports" / "stats.json").read_text())
    assert stats["records_read"] == lines
    assert stats["records_read"] == stats["records_valid"] + stats["records_rejected"]
    assert stats["sources"] == len(list(folder.glob("*.jsonl")))
    assert set(stats["rejected_by_reason"]) <= EXPECTED_REASONS


def test_files_that_are_not_rollouts_are_quarantined_whole(corpus_run):
    _, storage = corpus_run
    rows = [json.loads(line) for line in (storage / "quarantine" / "rejected.jsonl").read_text().splitlines()]
    by_file = {}
    for row in rows:
        by_file.setdefault(row["source"].rsplit("/", 1)[1], set()).add(row["reason"])
    assert by_file["resources_servers__bbq__example_rollouts.jsonl"] == {"not_a_rollout"}
    assert by_file["resources_servers__browsecomp_advanced_harness__example_rollouts.jsonl"] == {"invalid_json"}
    assert all(row["raw"] for row in rows)


def test_every_export_line_obeys_the_spec(corpus_run):
    _, storage = corpus_run
    counts = {}
    for export, check in CHECKERS.items():
        for split in ("train", "validation"):
            lines = split_text(storage / "exports" / export, split).splitlines()
            for line in lines:
                check(line)
            counts[export] = counts.get(export, 0) + len(lines)
    # the corpus holds tool-using rollouts and multi-rollout tasks: every export is non-empty
    assert counts["sft"] > 100 and counts["grpo"] > 100 and counts["dpo"] >= 1


def test_sft_keeps_tool_calls_and_reasoning_as_structure(corpus_run):
    _, storage = corpus_run
    rows = [json.loads(line) for line in split_text(storage / "exports" / "sft", "train").splitlines()]
    messages = [m for row in rows for m in row["messages"]]
    assert any(m.get("tool_calls") for m in messages)
    assert any(m.get("reasoning_content") for m in messages)
    assert any(m["role"] == "tool" for m in messages)


def test_streaming_in_tiny_chunks_changes_no_output(corpus_run, tmp_path, monkeypatch):
    """Chunked ingest and chunked exports are optimizations: with 2-row ingest batches and
    3-row export chunks (many chunks per file, dedup and pairing across chunk edges) every
    output has the same rows in the same order as the default run. Text files are
    byte-identical; a Parquet file gets one row group per chunk, so its bytes (and the hash
    and size its manifest and card quote) differ while its table is equal."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.conftest import written_files
    from trajectory_assets.ingest import conversion
    from trajectory_assets.io import trajectory_table

    folder, storage = corpus_run
    monkeypatch.setattr(conversion, "BATCH_ROWS", 2)
    monkeypatch.setattr(trajectory_table, "CHUNK_ROWS", 3)
    assert main(["run", "--source", str(folder), "--storage", str(tmp_path)]) == 0
    default, tiny = written_files(storage), written_files(tmp_path)
    from trajectory_assets.exports.registry import EXPORTS

    assert sum(name.startswith("exports/") for name in default) == len(EXPORTS) * 4 + 1
    assert default.keys() == tiny.keys()
    parquet_exports = {name.split("/")[1] for name in default if name.endswith(".parquet")}
    assert parquet_exports == {"trl_sft", "trl_dpo", "trl_grpo", "verl", "nemo_rl_dpo", "on_policy_tokens"}
    for name in default:
        export = name.split("/")[1] if name.startswith("exports/") else None
        if name.endswith(".parquet"):
            def table(data: bytes) -> pa.Table:
                return pq.read_table(pa.BufferReader(data))

            assert table(default[name]).equals(table(tiny[name])), name
        elif export in parquet_exports and name.endswith("manifest.json"):
            def without_parquet_bytes(data: bytes) -> dict:
                manifest = json.loads(data)
                for file in manifest["files"].values():
                    del file["sha256"], file["bytes"]
                return manifest

            assert without_parquet_bytes(default[name]) == without_parquet_bytes(tiny[name])
        elif not (export in parquet_exports and name.endswith("README.md")):  # the card quotes the hashes
            assert default[name] == tiny[name], name


def corpus_trajectories(storage):
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa.concat_tables(pq.read_table(path) for path in sorted((storage / "trajectories" / "batches").glob(
        "*.parquet"))).to_pylist()


def test_every_tool_output_of_the_corpus_is_a_tool_message(corpus_run):
    """Every function_call_output of an accepted rollout became a tool message (none is kept
    aside or lost), and every model turn is one assistant message."""
    folder, storage = corpus_run
    by_line = {(row["source_id"].split("/")[-1], row["source_line"]): row for row in corpus_trajectories(storage)}
    compared = 0
    for path in sorted(folder.glob("*.jsonl")):
        for number, line in enumerate(path.read_bytes().split(b"\n"), start=1):
            row = by_line.get((path.name, number))
            if row is None:
                continue
            record = json.loads(line)
            request_input = record["responses_create_params"].get("input")
            items = (request_input if isinstance(request_input, list) else []) + record["response"]["output"]
            messages = json.loads(row["messages"])
            outputs = sum(item.get("type") == "function_call_output" for item in items)
            assert outputs == sum(m["role"] == "tool" for m in messages), (path.name, number)
            assert not any(a["role"] == b["role"] == "assistant" and not a.get("tool_calls")
                           for a, b in zip(messages, messages[1:])), (path.name, number)
            compared += 1
    assert compared == 210  # every accepted rollout of the corpus


def test_inline_reasoning_of_the_corpus_becomes_reasoning_content(corpus_run):
    _, storage = corpus_run
    rows = [row for row in corpus_trajectories(storage)
            if row["source_id"].split("/")[-1] in ("resources_servers__arena_judge__example_rollouts.jsonl",
                                                   "resources_servers__frontierscience_judge__example_rollouts.jsonl",
                                                   "responses_api_agents__mini_swe_agent_2__example_rollouts.jsonl")]
    assert len(rows) == 15
    for row in rows:
        assistants = [m for m in json.loads(row["messages"]) if m["role"] == "assistant"]
        assert assistants[0].get("reasoning_content")
        assert all("</think>" not in (m["content"] or "") for m in assistants)


def test_token_data_of_the_corpus_is_kept(corpus_run):
    _, storage = corpus_run
    rows = [row for row in corpus_trajectories(storage) if row["token_data"]]
    # competitive_coding_challenges carries token ids on its output; hermes_agent's lists are empty
    assert {row["source_id"].split("/")[-1] for row in rows} == {
        "resources_servers__competitive_coding_challenges__example_rollouts.jsonl"}
    for row in rows:
        for call in row["token_data"]:
            assert len(call["generation_token_ids"]) == len(call["generation_log_probs"]) > 0
            assert json.loads(row["messages"])[call["message_index"]]["role"] == "assistant"


def test_the_corpus_token_data_becomes_on_policy_token_rows(corpus_run):
    import pandas as pd

    from trajectory_assets.config import SftConfig, SplitConfig
    from tests.exports.rendering import build

    _, storage = corpus_run
    frame = pd.DataFrame(corpus_trajectories(storage))
    result = build("on_policy_tokens", frame, SftConfig(min_reward=None), SplitConfig(validation_fraction=0.0))
    rows = [json.loads(line) for line in result.lines()]
    # the five competitive_coding_challenges rollouts (their rewards are below the SFT default)
    assert len(rows) == 5 and result.rows["aligned"].all()
    assert all(row["contiguous"] and len(row["calls"]) == 1 for row in rows)
    assert result.excluded["no_token_data"] > 100


def test_ingest_records_for_every_batch_the_tool_use_its_conversations_hold(corpus_run):
    """The report counts tool use from what ingest recorded beside each batch; reading the
    stored conversations again must count the same."""
    from trajectory_assets import layout
    from trajectory_assets.io.storage import Storage
    from trajectory_assets.io.trajectory_table import StoredTrajectories
    from trajectory_assets.ingest.tool_use import TOOL_USE_RULE
    from trajectory_assets.report.tool_use import counted

    _, storage = corpus_run
    store = Storage(str(storage))
    keys = sorted(path.name.removesuffix(".parquet") for path in (storage / "trajectories" / "batches").glob("*.parquet"))
    assert keys
    calls = 0
    for key in keys:
        recorded = store.read_json(layout.batch_tool_use(key))
        assert recorded["rule"] == TOOL_USE_RULE
        # written by ingest, before the batch's summary (a report that had to count it writes later)
        batches = storage / "trajectories" / "batches"
        assert (batches / f"{key}.tool_use.json").stat().st_mtime_ns <= (batches / f"{key}.summary.json").stat().st_mtime_ns
        read = counted(StoredTrajectories(store, [key]).scan(["trajectory_id", "num_tool_calls", "messages"]))
        assert recorded["trajectories"] == read, key
        calls += sum(used[0] for tools in read.values() for used in tools.values())
    assert calls > 0  # the corpus calls tools
    stats = json.loads((storage / "reports" / "stats.json").read_text())
    assert sum(tool["calls"] for tool in stats["tools"].values()) == calls
