"""Every line becomes exactly one trajectory row or one quarantine row."""

import gzip
import json

import pyarrow as pa

from tests.conftest import call_item, make_rollout, message_item, output_item, write_jsonl
from trajectory_assets.ingest.conversion import ingest
from trajectory_assets.io.source_files import discover
from trajectory_assets.sources import INPUTS_SUFFIXES


def run_ingest(*paths):
    tables, rejected = [], []
    summary = ingest(discover([str(p) for p in paths], INPUTS_SUFFIXES), tables.append, rejected.extend, batch_rows=3)
    table = pa.concat_tables(tables).to_pandas() if tables else None
    return summary, table, rejected


def test_mixed_file_reconciles_and_quarantines_with_reasons(tmp_path):
    rows = [
        make_rollout(),
        "not json at all",
        "[1]",
        make_rollout(reward=None),
        json.dumps({"other": "format"}),
        make_rollout([call_item("f", "{}", "c"), output_item("c", "r"), message_item("done")]),
    ]
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    summary, table, rejected = run_ingest(path)
    assert (summary.records_read, summary.records_valid, summary.records_rejected) == (6, 2, 4)
    assert summary.reconciles
    assert dict(summary.rejected_by_reason) == {
        "invalid_json": 1, "not_an_object": 1, "missing_reward": 1, "not_a_rollout": 1,
    }
    assert [(r["line"], r["reason"]) for r in rejected] == [
        (2, "invalid_json"), (3, "not_an_object"), (4, "missing_reward"), (5, "not_a_rollout"),
    ]
    assert rejected[0]["raw"] == "not json at all" and rejected[0]["source"] == str(path)
    assert table["source_line"].tolist() == [1, 6]
    assert table["role_shape"].tolist() == ["ua", "ucta"]


def test_duplicates_are_counted_and_quarantined_not_merged_silently(tmp_path):
    row = make_rollout()
    path = write_jsonl(tmp_path / "d.jsonl", [row, row, row])
    summary, table, rejected = run_ingest(path)
    assert len(table) == 1
    assert [r["reason"] for r in rejected] == ["duplicate_record", "duplicate_record"]
    assert rejected[0]["detail"] == f"byte-identical to {path}:1"


def test_invalid_utf8_raw_text_is_kept_visible(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"a": "\xff"}\n')
    _, _, rejected = run_ingest(path)
    assert rejected[0]["reason"] == "invalid_utf8"
    assert rejected[0]["raw"] == '{"a": "\\xff"}'


def test_trajectory_ids_are_stable_and_rows_carry_lineage(tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [make_rollout(_ng_task_index=0)])
    _, first, _ = run_ingest(path)
    _, second, _ = run_ingest(path)
    assert first["trajectory_id"].tolist() == second["trajectory_id"].tolist()
    assert first["source_id"].tolist() == ["s.jsonl"]
    assert first["source_uri"].tolist() == [str(path)]


def test_unreadable_gzip_source_is_reported_and_does_not_stop_others(tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", [make_rollout()])
    broken = tmp_path / "broken.jsonl.gz"
    data = gzip.compress(b"".join(b"{\"n\": %d}\n" % i for i in range(20_000)))
    broken.write_bytes(data[: len(data) // 2])  # cut inside the deflate stream
    summary, table, rejected = run_ingest(good, broken)
    assert len(table) == 1
    assert summary.sources_failed == 1
    # the lines before the cut are still read (and rejected: they are not rollouts) ...
    broken_summary = summary.sources[0]
    assert broken_summary.records > 1000 and "read failed" in broken_summary.error
    assert {r["reason"] for r in rejected[:-2]} == {"not_a_rollout"}
    # ... the bytes of the record the cut broke off are quarantined, not dropped ...
    partial = rejected[-2]
    assert partial["reason"] == "truncated_record" and partial["line"] == broken_summary.records
    assert partial["raw"]
    assert ('{"n": %d' % (broken_summary.records - 1)).startswith(partial["raw"])
    # ... and the failure of the source itself is one extra quarantine row without a line
    assert rejected[-1]["reason"] == "unreadable_source"
    assert rejected[-1]["line"] is None and rejected[-1]["source"] == str(broken)
    assert len(rejected) == summary.records_rejected + summary.sources_failed
    assert summary.reconciles


def test_a_crash_inside_conversion_becomes_a_quarantine_row(tmp_path, monkeypatch):
    import dataclasses

    from trajectory_assets import sources

    def explode(record, **options):
        raise KeyError("surprise")

    monkeypatch.setattr(sources, "SOURCES", tuple(dataclasses.replace(source, convert=explode)
                                                  for source in sources.SOURCES))
    path = write_jsonl(tmp_path / "x.jsonl", [make_rollout()])
    summary, table, rejected = run_ingest(path)
    assert table is None
    assert rejected[0]["reason"] == "invalid_structure" and "KeyError" in rejected[0]["detail"]
    assert summary.reconciles


def test_contract_violations_are_quarantined_with_the_failed_checks(tmp_path, monkeypatch):
    import trajectory_assets.ingest.conversion as ingest

    real_row = ingest.trajectory_row

    def bad_row(*args, **kwargs):
        row = real_row(*args, **kwargs)
        if kwargs["line"] == 2:
            row["role_shape"] = "x"  # a converter bug the contract must catch
        return row

    monkeypatch.setattr(ingest, "trajectory_row", bad_row)
    path = write_jsonl(tmp_path / "x.jsonl", [make_rollout(), make_rollout(request_input="other")])
    summary, table, rejected = run_ingest(path)
    assert table["source_line"].tolist() == [1]
    assert rejected[0]["reason"] == "contract_violation"
    assert "role_shape" in rejected[0]["detail"]
    assert (summary.records_valid, summary.records_rejected) == (1, 1)
    assert summary.sources[0].valid == 1 and summary.sources[0].rejected == 1
    # the contract ran once per row; its result is what the trajectory_contract check reports
    assert (summary.contract_rows_checked, summary.contract_violations) == (2, 1)
