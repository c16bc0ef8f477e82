"""The headless CLI: output layout, exit codes and reproducibility."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT, SAMPLE, make_rollout, message_item, written_files
from tests.spec_checks import CHECKERS
from trajectory_assets.cli import main


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    storage = tmp_path_factory.mktemp("out")
    assert main(["run", "--source", str(SAMPLE), "--storage", str(storage)]) == 0
    return storage


def test_writes_the_documented_layout(sample_run):
    for export in ("sft", "dpo", "grpo", "sft_hermes"):
        for split in ("train", "validation"):
            assert (sample_run / "exports" / export / f"{split}.jsonl").is_file()
        manifest = json.loads((sample_run / "exports" / export / "manifest.json").read_text())
        assert {"sources", "rows", "config", "code_version", "files"} <= set(manifest)
        assert all({"uri", "sha256", "records"} <= set(s) for s in manifest["sources"])
    for name in ("stats.json", "stats.md", "reward_histogram.png"):
        assert (sample_run / "reports" / name).is_file()
    assert (sample_run / "reports" / "reward_histogram.png").read_bytes().startswith(b"\x89PNG")


def test_stats_counts_reconcile_with_quarantine(sample_run):
    stats = json.loads((sample_run / "reports" / "stats.json").read_text())
    assert all(isinstance(stats[k], int) for k in ("records_read", "records_valid", "records_rejected"))
    assert stats["records_read"] == stats["records_valid"] + stats["records_rejected"]
    quarantine = [json.loads(line) for line in (sample_run / "quarantine" / "rejected.jsonl").read_text().splitlines()]
    assert len(quarantine) == stats["records_rejected"] == sum(stats["rejected_by_reason"].values())
    assert all(set(row) == {"source", "line", "reason", "detail", "raw"} for row in quarantine)


def test_every_export_line_obeys_the_spec(sample_run):
    for export, check in CHECKERS.items():
        for split in ("train", "validation"):
            for line in (sample_run / "exports" / export / f"{split}.jsonl").read_text().splitlines():
                check(line)


def test_manifest_row_counts_and_hashes_match_the_files(sample_run):
    import hashlib

    for export in ("sft", "dpo", "grpo"):
        folder = sample_run / "exports" / export
        manifest = json.loads((folder / "manifest.json").read_text())
        for split, rows in manifest["rows"].items():
            data = (folder / f"{split}.jsonl").read_bytes()
            assert data.count(b"\n") == rows
            assert manifest["files"][f"{split}.jsonl"]["sha256"] == hashlib.sha256(data).hexdigest()


def test_rerun_on_unchanged_inputs_is_byte_identical(sample_run, tmp_path):
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path)]) == 0
    first, again = written_files(sample_run), written_files(tmp_path)
    assert len([name for name in first if name.startswith("exports/")]) == 11 * 4 + 1  # 11 exports + dataset_info
    assert first.keys() == again.keys()
    assert [name for name in first if first[name] != again[name]] == []


def test_parallel_batches_give_the_same_exports_as_one_at_a_time(sample_run, tmp_path):
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path), "--workers", "1"]) == 0
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path / "p"), "--workers", "2"]) == 0
    one, parallel, reference = written_files(tmp_path), written_files(tmp_path / "p"), written_files(sample_run)
    assert one == parallel == reference


def test_a_persistent_instance_records_every_run(tmp_path, monkeypatch):
    import shutil

    import dagster as dg

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path / "out")]) == 0
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs()
        assert len(runs) == 4  # three batches, one at a time, then the datasets job
        assert all(run.is_success for run in runs)
        assert len(instance.get_dynamic_partitions("rollout_batches")) == 3


def test_empty_source_still_writes_every_export_file(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "empty.jsonl").write_text("\n\n")
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out")]) == 0
    for export in ("sft", "dpo", "grpo"):
        assert (tmp_path / "out" / "exports" / export / "train.jsonl").read_text() == ""


def test_a_source_unreadable_from_its_first_byte_fails_after_all_the_work(tmp_path, capsys):
    bad = tmp_path / "bad" / "x.jsonl.gz"
    bad.parent.mkdir()
    bad.write_text('{"not": "gzip"}\n')  # plain text named .gz: the read fails before any record
    out = tmp_path / "out"
    assert main(["run", "--source", str(SAMPLE), "--source", str(bad), "--storage", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and "Not a gzipped file" in err and "Traceback" not in err
    # the other sources were still ingested and every export written
    stats = json.loads((out / "reports" / "stats.json").read_text())
    assert stats["records_valid"] > 0 and stats["sources_failed"] == 1
    assert stats["exports"]["sft"]["train"] + stats["exports"]["sft"]["validation"] > 0
    for export in ("sft", "dpo", "grpo"):
        assert (out / "exports" / export / "manifest.json").is_file()


def test_a_source_broken_after_some_records_keeps_them_and_exits_zero(tmp_path, capsys):
    import gzip

    rows = [json.dumps(make_rollout([message_item(f"answer {i}")], request_input=f"question {i}")) + "\n"
            for i in range(300)]
    whole = gzip.compress("".join(rows[:1]).encode())
    cut = gzip.compress("".join(rows[1:]).encode())
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "cut.jsonl.gz").write_bytes(whole + cut[: len(cut) // 2])
    out = tmp_path / "out"
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(out)]) == 0
    assert "cannot read" not in capsys.readouterr().err
    stats = json.loads((out / "reports" / "stats.json").read_text())
    assert stats["records_valid"] >= 1 and stats["sources_failed"] == 1
    quarantine = [json.loads(line) for line in (out / "quarantine" / "rejected.jsonl").read_text().splitlines()]
    assert [row["reason"] for row in quarantine if row["line"] is None] == ["unreadable_source"]


def cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "trajectory_assets.cli", *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, env={**os.environ, **(env or {})}, timeout=300,
    )


def test_missing_source_exits_non_zero_with_one_line(tmp_path):
    result = cli("run", "--source", str(tmp_path / "nope"), "--storage", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_invalid_config_exits_non_zero_with_the_field_named(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("dpo:\n  pairing: random\n")
    result = cli("run", "--source", str(SAMPLE), "--storage", str(tmp_path / "out"), "--config", str(config))
    assert result.returncode == 2
    assert "dpo.pairing" in result.stderr and "Traceback" not in result.stderr


def test_unwritable_storage_exits_non_zero_with_a_clear_reason(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = cli("run", "--source", str(SAMPLE), "--storage", str(blocker))
    assert result.returncode == 1
    assert "cannot write" in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_exports_option_builds_only_the_named_exports(tmp_path, capsys):
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path), "--exports", "trl_sft,dpo"]) == 0
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["dpo", "trl_sft"]
    stats = json.loads((tmp_path / "reports" / "stats.json").read_text())
    assert sorted(stats["exports"]) == ["dpo", "trl_sft"]
    printed = capsys.readouterr().out
    assert "trl_sft:" in printed and "sft:" not in printed.replace("trl_sft:", "")


def test_unknown_export_names_fail_in_one_line(tmp_path, capsys):
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path), "--exports", "sft,parquet"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("trajectory-assets: unknown export(s) ['parquet']") and "\n" not in error


def test_a_tokenizer_that_cannot_be_loaded_fails_in_one_line_before_any_work(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(f"tokenizer: {tmp_path / 'no-such-tokenizer'}\n")
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path / "out"), "--config", str(config)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("trajectory-assets: tokenizer ") and "cannot be loaded" in error and "\n" not in error
    assert not (tmp_path / "out").exists()
