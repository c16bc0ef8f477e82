"""Hostile input never crashes a run and loses nothing; each bad record has its reason."""

import json
from collections import Counter

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.split_files import split_text
from tests.conftest import make_rollout, message_item
from tests.fixtures.hostile import write_hostile_folder
from trajectory_assets.cli import main
from trajectory_assets.ingest.conversion import ingest
from trajectory_assets.io.source_files import batch_key, discover
from trajectory_assets.sources import INPUTS_SUFFIXES


def test_an_adversarial_folder_runs_to_completion_with_every_record_accounted_for(tmp_path, capsys):
    expected = write_hostile_folder(tmp_path / "in")
    out = tmp_path / "out"
    # every batch and export is written; exit 2 names the one source that could not be read at all
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(out)]) == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "broken link.jsonl" in message and "Traceback" not in message
    for export in ("sft", "dpo", "grpo"):
        assert (out / "exports" / export / "manifest.json").is_file()
    assert (out / "reports" / "stats.md").is_file()
    stats = json.loads((out / "reports" / "stats.json").read_text())
    assert stats["records_read"] == stats["records_valid"] + stats["records_rejected"]
    quarantine = [json.loads(line) for line in (out / "quarantine" / "rejected.jsonl").read_text().splitlines()]
    by_file: dict[str, dict[int, str]] = {}
    for row in quarantine:
        by_file.setdefault(row["source"].rsplit("/", 1)[1], {})[row["line"]] = row["reason"]
        assert row["raw"] or row["line"] is None  # every record's raw text is kept
    for name, reasons in expected.items():
        if isinstance(reasons, str):
            continue
        got = by_file.get(name, {})
        assert [got.get(line) for line in range(1, len(reasons) + 1)] == reasons, name
    # the gzip cut short: what was read before the cut is kept, the source failure is reported
    cut = by_file["cut short.jsonl.gz"]
    assert cut[None] == "unreadable_source"
    # the broken symlink: one unreadable_source row with its URI and error, no records
    (broken,) = [row for row in quarantine if row["source"].endswith("/broken link.jsonl")]
    assert broken["reason"] == "unreadable_source" and broken["line"] is None
    assert broken["source"] == str(tmp_path / "in" / "broken link.jsonl") and "cannot open" in broken["detail"]
    assert stats["sources_failed"] == 2
    # "x::y.jsonl" is read like any other file: its valid row is a trajectory, not a rejection
    assert by_file["x::y.jsonl"] == {2: "invalid_json"}
    trajectories = pd.read_parquet(out / "trajectories" / "batches" / f"{batch_key('in/x::y.jsonl')}.parquet")
    assert trajectories["source_line"].tolist() == [1]
    summary_lines = sum(len(r) for r in expected.values() if not isinstance(r, str))
    assert stats["records_read"] > summary_lines  # plus the gzip lines read before the cut


def test_a_record_of_tens_of_megabytes_is_one_record(tmp_path):
    expected = write_hostile_folder(tmp_path / "in")
    assert expected["mixed garbage.jsonl"][12] is None  # the 20 MB record is valid ...
    out = tmp_path / "out"
    assert main(["run", "--source", str(tmp_path / "in" / "mixed garbage.jsonl"), "--storage", str(out)]) == 0
    sft = split_text(out / "exports" / "sft", "train") + split_text(out / "exports" / "sft", "validation")
    assert any(len(line) > 20 << 20 for line in sft.splitlines())  # ... and exported whole


GOOD = json.dumps(make_rollout([message_item("ok")], request_input="seed")).encode()


@st.composite
def damaged_lines(draw):
    line = bytearray(GOOD)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["cut", "flip", "insert", "delete_key", "retype"]))
        if kind == "cut" and len(line) > 2:
            del line[draw(st.integers(1, len(line) - 1)):]
        elif kind == "flip" and line:
            line[draw(st.integers(0, len(line) - 1))] = draw(st.integers(0, 255))
        elif kind == "insert":
            position = draw(st.integers(0, len(line)))
            line[position:position] = draw(st.sampled_from([b"\xe2\x80\xa8", b"\xc2\x85", b"\r", b"\x00", b'"', b"{", b"]"]))
        elif kind in ("delete_key", "retype"):
            try:
                row = json.loads(bytes(line))
            except ValueError:
                continue
            if isinstance(row, dict) and row:
                key = draw(st.sampled_from(sorted(row)))
                if kind == "delete_key":
                    del row[key]
                else:
                    row[key] = draw(st.sampled_from([None, 0, "x", [], {}, [[[]]], 1e308, -1]))
                line = bytearray(json.dumps(row).encode())
    return bytes(line).replace(b"\n", b" ")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(damaged_lines(), min_size=1, max_size=12))
def test_any_damage_reconciles_and_never_raises(tmp_path_factory, lines):
    folder = tmp_path_factory.mktemp("prop")
    (folder / "x.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    written, rejected = [], []
    summary = ingest(discover([str(folder)], INPUTS_SUFFIXES), lambda table: written.append(table.num_rows), rejected.extend)
    non_blank = sum(1 for line in lines if line.strip())
    assert summary.records_read == non_blank
    assert summary.records_read == summary.records_valid + summary.records_rejected
    assert sum(written) == summary.records_valid
    assert len(rejected) == summary.records_rejected
    assert Counter(r["reason"] for r in rejected) == summary.rejected_by_reason
    assert all(r["reason"] and r["detail"] for r in rejected)
