"""The headless CLI: output layout, exit codes and reproducibility."""

import json
import os
import subprocess
import sys

import pytest

from tests.split_files import split_paths, split_text
from tests.conftest import PROJECT_ROOT, SAMPLE, make_rollout, message_item, write_jsonl, written_files
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
            # one file per split until the export phase is sharded (every split has a file)
            assert [path.name for path in split_paths(sample_run / "exports" / export, split)] == [
                f"{split}-00000-of-00001.jsonl"]
        manifest = json.loads((sample_run / "exports" / export / "manifest.json").read_text())
        assert {"sources", "rows", "config", "code_version", "files"} <= set(manifest)
        assert all({"uri", "sha256", "records"} <= set(s) for s in manifest["sources"])
    for name in ("stats.json", "stats.md", "tasks.jsonl", "index.html"):
        assert (sample_run / "reports" / name).is_file()
    for plot in ("rewards", "pass_rate", "lengths", "tools"):  # the Markdown's plots
        assert (sample_run / "reports" / "plots" / f"{plot}.png").read_bytes().startswith(b"\x89PNG")


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
            for line in split_text(sample_run / "exports" / export, split).splitlines():
                check(line)


def test_manifest_row_counts_and_hashes_match_the_files(sample_run):
    import hashlib

    for export in ("sft", "dpo", "grpo"):
        folder = sample_run / "exports" / export
        manifest = json.loads((folder / "manifest.json").read_text())
        for split, rows in manifest["rows"].items():
            assert split_text(folder, split).count("\n") == rows
        for name, described in manifest["files"].items():
            data = (folder / name).read_bytes()
            assert described["sha256"] == hashlib.sha256(data).hexdigest() and described["rows"] == data.count(b"\n")
        assert sorted(manifest["files"]) == sorted(path.name for split in manifest["rows"]
                                                   for path in split_paths(folder, split))


def test_rerun_on_unchanged_inputs_is_byte_identical(sample_run, tmp_path):
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path)]) == 0
    first, again = written_files(sample_run), written_files(tmp_path)
    from trajectory_assets.exports.registry import EXPORTS

    # every export's two splits, manifest and card, and LLaMA-Factory's dataset_info.json
    assert len([name for name in first if name.startswith("exports/")]) == len(EXPORTS) * 4 + 1
    assert first.keys() == again.keys()
    assert [name for name in first if first[name] != again[name]] == []


def test_forked_runs_give_the_same_exports_as_one_process(sample_run, tmp_path):
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path), "--execution", "forked",
                 "--workers", "2"]) == 0
    assert written_files(tmp_path) == written_files(sample_run)


def test_progress_names_every_batch_and_every_export(tmp_path, capsys):
    """Plain progress lines (not a terminal): every batch, then every export as it is
    written. (What the runs record in the instance: tests/runs/test_runner.py.)"""
    assert main(["run", "--source", str(SAMPLE), "--storage", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("\nbatch ") == 3 and "batch 3/3 " in printed and "records/s)" in printed
    from trajectory_assets.exports.registry import EXPORTS

    assert printed.count("exported ") == len(EXPORTS)


def test_empty_source_still_writes_every_export_file(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "empty.jsonl").write_text("\n\n")
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out")]) == 0
    for export in ("sft", "dpo", "grpo"):
        assert split_text(tmp_path / "out" / "exports" / export, "train") == ""


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


def test_the_cli_process_prints_its_whole_summary_before_it_exits(tmp_path):
    """The console script exits without finalizing the interpreter (cli.entry): the summary,
    block-buffered into a pipe, must still be flushed, and the exit code be main()'s."""
    result = cli("run", "--source", str(SAMPLE), "--storage", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "ingesting 3 batch(es)" and lines[-1].startswith("page:")
    assert any(line.startswith("records: 14 read = 12 valid + 2 quarantined") for line in lines)


def test_missing_source_exits_non_zero_with_one_line(tmp_path):
    result = cli("run", "--source", str(tmp_path / "nope"), "--storage", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("text, field", [
    ("dpo:\n  pairing: random\n", "dpo.pairing"),
    # checked by the redactor, not when the config loads (redaction.redactor.check_rules)
    ("redaction:\n  extra_rules:\n    acme: '(acme_)?'\n", "redaction.extra_rules.acme"),
])
def test_invalid_config_exits_non_zero_with_the_field_named(tmp_path, text, field):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    result = cli("run", "--source", str(SAMPLE), "--storage", str(tmp_path / "out"), "--config", str(config))
    assert result.returncode == 2
    assert field in result.stderr and "Traceback" not in result.stderr


def test_an_unusable_tokenizer_exits_non_zero_with_one_line_before_any_run(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"tokenizer: {tmp_path / 'no-such-tokenizer'}\n")
    result = cli("run", "--source", str(SAMPLE), "--storage", str(tmp_path / "out"), "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "cannot be loaded" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


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


def test_a_gzip_cut_inside_its_first_record_is_a_cut_source_not_an_unreadable_one(tmp_path, capsys):
    import gzip

    (tmp_path / "in").mkdir()
    record = json.dumps(make_rollout([message_item(os.urandom(3000).hex())])).encode() + b"\n"
    data = gzip.compress(record)
    (tmp_path / "in" / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(out)]) == 0
    assert "cannot read" not in capsys.readouterr().err
    quarantine = [json.loads(line) for line in (out / "quarantine" / "rejected.jsonl").read_text().splitlines()]
    assert [(row["reason"], row["line"]) for row in quarantine] == [("truncated_record", 1), ("unreadable_source", None)]
    assert record.decode().startswith(quarantine[0]["raw"]) and len(quarantine[0]["raw"]) > 100
    stats = json.loads((out / "reports" / "stats.json").read_text())
    assert (stats["records_read"], stats["records_rejected"], stats["sources_failed"]) == (1, 1, 1)


def test_nemo_gym_side_files_reach_the_datasets_and_the_quarantine(tmp_path):
    source = tmp_path / "collection"
    rows = [make_rollout([message_item(f"answer {r}")], request_input=f"question {t}", reward=float(r),
                         _ng_task_index=t, _ng_rollout_index=r, agent_ref={"name": "math_agent"},
                         _ng_rollout_id=f"{t}-{r}")
            for t in range(12) for r in range(2)]
    inputs = [{"responses_create_params": {"input": f"question {t}"}, "agent_ref": {"name": "math_agent"},
               "expected_answer": f"{t * 7}", "_ng_task_index": t, "_ng_rollout_index": r}
              for t in range(12) for r in range(2)]
    failures = [make_rollout([message_item("partial")], reward=0.0, _ng_failure_class="judge_failed",
                             _ng_task_index=99, _ng_rollout_index=0)]
    write_jsonl(source / "rollouts.jsonl", rows)
    write_jsonl(source / "rollouts_materialized_inputs.jsonl", [*inputs, "not json"])
    write_jsonl(source / "rollouts_failures.jsonl", failures)
    out = tmp_path / "out"
    assert main(["run", "--source", str(source), "--storage", str(out)]) == 0

    grpo = [json.loads(line) for split in ("train", "validation")
            for line in split_text(out / "exports" / "grpo", split).splitlines()]
    assert len(grpo) == 12
    # the row ng_prepare_data would write: the verifier's inputs beside the request
    assert {row["responses_create_params"]["input"]: row["expected_answer"] for row in grpo} == {
        f"question {t}": f"{t * 7}" for t in range(12)}
    import pyarrow.parquet as pq

    verl = [row for path in split_paths(out / "exports" / "verl", "train") for row in pq.read_table(path).to_pylist()]
    assert all(row["reward_model"]["ground_truth"] == str(int(row["prompt"][0]["content"].split()[1]) * 7)
               for row in verl)
    stats = json.loads((out / "reports" / "stats.json").read_text())
    assert stats["rejected_by_reason"] == {"ng_failure_judge_failed": 1}
    assert stats["records_valid"] == 24
    summaries = {s["uri"].split("/")[-1]: s for path in (out / "trajectories" / "batches").glob("*.summary.json")
                 for s in json.loads(path.read_text())["sources"]}
    assert set(summaries) == {"rollouts.jsonl", "rollouts_failures.jsonl"}  # the inputs are no batch
    assert (summaries["rollouts.jsonl"]["inputs_rows"], summaries["rollouts.jsonl"]["inputs_skipped"]) == (24, 1)
    trajectories = pq.read_table(next((out / "trajectories" / "batches").glob("collection_rollouts.jsonl-*.parquet")))
    assert sorted(trajectories["rollout_id"].to_pylist())[:2] == ["0-0", "0-1"]
    raw = json.loads(next((out / "raw" / "batches").glob("collection_rollouts.jsonl-*.json")).read_text())
    assert raw["inputs_uri"].endswith("rollouts_materialized_inputs.jsonl") and raw["inputs_sha256"]
    assert raw["data_version"] != raw["sha256"]  # the inputs are part of the batch's version


def test_nan_outside_the_reward_is_counted_in_the_report(tmp_path):
    rows = [json.dumps(make_rollout(judge_scores=[float("nan"), 0.5])), json.dumps(make_rollout(request_input="b"))]
    write_jsonl(tmp_path / "in" / "x.jsonl", rows)
    out = tmp_path / "out"
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(out)]) == 0
    assert json.loads((out / "reports" / "stats.json").read_text())["non_finite_values"] == 1
    assert "NaN / Infinity values outside rewards (stored as null, rows flagged non_finite_number): 1" in (
        out / "reports" / "stats.md").read_text()


def test_on_a_terminal_progress_is_a_live_bar(tmp_path):
    """Under a pseudo-terminal the CLI draws rich's bar (batches done / total, records per
    second) and prints each export as it is written."""
    import os
    import pty
    import re

    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "trajectory_assets.cli", "run", "--source", str(SAMPLE), "--storage",
         str(tmp_path / "out")], cwd=PROJECT_ROOT, stdin=terminal, stdout=terminal, stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm"})
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process has exited
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=300) == 0, process.stderr.read().decode()
    os.close(controller)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode(errors="replace"))
    assert re.search(r"batches .*3/3", text) and "records/s" in text
    assert "exported sft, 6 rows" in text and "\nbatch 1/3" not in text  # the bar, not the plain lines


def test_side_files_are_listed_in_their_batch_and_never_quarantined(tmp_path):
    from pathlib import Path

    from tests.fixtures.hermes_rows import tool_run

    source = tmp_path / "runs"
    write_jsonl(source / "gym" / "rollouts.jsonl", [make_rollout(request_input=f"q{n}") for n in range(3)])
    (source / "gym" / "rollouts_aggregate_metrics.json").write_text('[{"agent_ref": {"name": "a"}}]')
    write_jsonl(source / "gym" / "rollouts_reward_profiling.jsonl", [{"mean/reward": 1.0}])
    write_jsonl(source / "hermes" / "batch_0.jsonl", [tool_run()])
    write_jsonl(source / "hermes" / "batch_0.exploration.jsonl", [{"version": 1, "nodes": []}])
    out = tmp_path / "out"
    assert main(["run", "--source", str(source), "--storage", str(out), "--exports", "sft"]) == 0
    stats = json.loads((out / "reports" / "stats.json").read_text())
    assert (stats["records_read"], stats["records_rejected"]) == (4, 0)
    raws = {Path(raw["uri"]).name: raw for raw in map(json.loads, map(Path.read_text, (out / "raw" / "batches").glob("*.json")))}
    assert set(raws) == {"rollouts.jsonl", "batch_0.jsonl"}
    assert [side["name"] for side in raws["rollouts.jsonl"]["side_files"]] == [
        "rollouts_aggregate_metrics.json", "rollouts_reward_profiling.jsonl"]
    assert [side["name"] for side in raws["batch_0.jsonl"]["side_files"]] == ["batch_0.exploration.jsonl"]
    assert all(side["sha256"] and side["bytes"] for raw in raws.values() for side in raw["side_files"])


def test_a_folder_of_harbor_jobs_becomes_trajectories_and_exports(tmp_path):
    from pathlib import Path

    import pyarrow.parquet as pq

    from tests.fixtures.harbor_jobs import harbor_jobs

    jobs = harbor_jobs(tmp_path)
    out = tmp_path / "out"
    config = tmp_path / "config.yaml"
    config.write_text("grpo:\n  atif_agent_ref: terminal_agent\n")  # Harbor's agents name no NeMo Gym agent
    call = ["run", "--source", str(jobs), "--exports", "sft,grpo", "--config", str(config)]
    assert main([*call, "--storage", str(out)]) == 0
    stats = json.loads((out / "reports" / "stats.json").read_text())
    assert (stats["records_read"], stats["records_valid"], stats["records_rejected"]) == (5, 5, 0)
    assert {row["name"]: row["trajectories"] for row in stats["by_source_format"]} == {"atif": 5}
    rows = [row for path in sorted((out / "trajectories" / "batches").glob("*.parquet"))
            for row in pq.read_table(path).to_pylist()]
    by_trial = {row["rollout_id"]: row for row in rows}
    assert by_trial["hello-world__sum0001"]["reward"] == 1.0
    assert by_trial["hello-world__lin0002"]["reward_components"] == '{"reward":1.0,"style":0.5}'
    assert by_trial["hello-world__oh000005"]["reward"] is None  # no verifier result: never 0
    assert by_trial["fix-bug__cc000004"]["reward"] == 1.0  # from verifier/reward.txt
    assert by_trial["hello-world__tmo0003"]["status"] == "AgentTimeoutError"
    assert len(by_trial["hello-world__sum0001"]["token_data"]) == 7
    lineage = json.loads(by_trial["hello-world__lin0002"]["metadata"])
    assert lineage["harbor"]["record"] == "hello-world__lin0002" and lineage["untrained_messages"]
    raws = [json.loads(path.read_text()) for path in (out / "raw" / "batches").glob("*.json")]
    assert sorted(Path(raw["uri"]).name for raw in raws) == ["2026-08-01__10-00-00", "2026-08-02__09-30-00"]
    assert all(raw["data_version"] == raw["sha256"] and raw["records"] for raw in raws)
    sft = [json.loads(line) for split in ("train", "validation")
           for line in split_text(out / "exports" / "sft", split).splitlines()]
    grpo = [json.loads(line) for split in ("train", "validation")
            for line in split_text(out / "exports" / "grpo", split).splitlines()]
    assert sft and grpo and {row["agent_ref"]["name"] for row in grpo} == {"terminal_agent"}
    # a second run over the same jobs is byte-identical
    again = tmp_path / "again"
    assert main([*call, "--storage", str(again)]) == 0
    assert written_files(again) == written_files(out)


BENCHMARK_QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
                      "May. How many clips did Natalia sell altogether in April and May?")


def decontamination_run(tmp_path):
    """Three tasks of two rollouts: one quoting a benchmark question, one carrying a benchmark
    instance id, one clean; a config naming the benchmark. Returns (config, source, benchmark)."""
    benchmark = write_jsonl(tmp_path / "evals" / "gsm8k.jsonl", [
        {"question": BENCHMARK_QUESTION, "instance_id": "gsm-7"}, {"question": "Unused.", "instance_id": "gsm-8"}])
    rows = []
    for task, (prompt, extra) in enumerate([(f"Solve: {BENCHMARK_QUESTION.upper()}", {}),
                                            ("Fix the parser.", {"instance_id": "gsm-8"}),
                                            ("Say hi to the nice people who came to the meeting on the first day "
                                             "of the month.", {"instance_id": "other"})]):
        rows += [make_rollout([message_item(f"answer {task} {rollout}")], request_input=prompt, reward=reward,
                              _ng_task_index=task, _ng_rollout_index=rollout, **extra,
                              agent_ref={"name": "agent"})
                 for rollout, reward in enumerate((1.0, 0.0))]
    write_jsonl(tmp_path / "in" / "rollouts.jsonl", rows)
    config = tmp_path / "c.yaml"
    config.write_text(f"decontamination:\n  benchmarks:\n  - name: gsm8k\n    path: {benchmark}\n"
                      "    text_fields: [question]\n    id_field: instance_id\n"
                      "split:\n  validation_fraction: 0\n")
    return config, tmp_path / "in", benchmark


def test_decontamination_leaves_benchmark_items_out_of_every_export_and_names_them(tmp_path):
    """A rollout quoting a benchmark question and one carrying a benchmark instance id leave
    every family; the manifests, stats.json, stats.md and the page name the benchmark."""
    config, source, _ = decontamination_run(tmp_path)
    out = tmp_path / "out"
    assert main(["run", "--source", str(source), "--storage", str(out), "--config", str(config)]) == 0
    for export, kept in (("sft", 1), ("dpo", 1), ("grpo", 1)):
        manifest = json.loads((out / "exports" / export / "manifest.json").read_text())
        assert manifest["rows"]["train"] == kept, export
        assert manifest["excluded"]["contaminated:gsm8k"] == (2 if export == "sft" else 4), export
        (block,) = manifest["decontamination"]["benchmarks"]
        assert block["left_out"] == manifest["excluded"]["contaminated:gsm8k"] and block["ngrams"] == 19  # 31 words
        assert "Say hi" in split_text(out / "exports" / export, "train"), export
    stats = json.loads((out / "reports" / "stats.json").read_text())
    assert stats["decontamination"]["left_out_by_export"]["dpo"] == {"gsm8k": 4}
    assert "## Benchmark decontamination" in (out / "reports" / "stats.md").read_text()
    page = (out / "reports" / "index.html").read_text()
    assert 'id="decontamination"' in page and "<code>gsm8k</code>" in page
    # ingest found the four matches and stored them beside the batch
    (flags_file,) = (out / "trajectories" / "batches").glob("*.decontamination/*.json")
    assert len(json.loads(flags_file.read_text())["contaminated"]) == 4


def test_the_exports_use_the_flags_ingest_stored_and_rescan_when_the_benchmarks_change(tmp_path):
    from trajectory_assets.config import load_config
    from trajectory_assets.ingest.decontamination import build_index
    from trajectory_assets.exports.families import grpo
    from trajectory_assets.io.storage import Storage
    from trajectory_assets.io.trajectory_table import StoredTrajectories

    config_file, source, benchmark = decontamination_run(tmp_path)
    out = tmp_path / "out"
    assert main(["run", "--source", str(source), "--storage", str(out), "--config", str(config_file)]) == 0
    (flags_file,) = (out / "trajectories" / "batches").glob("*.decontamination/*.json")
    config = load_config(config_file)
    table = StoredTrajectories(Storage(str(out)), [flags_file.parent.name.removesuffix(".decontamination")])

    def grpo_plan():
        plan = grpo.plan(table, config.grpo, None, build_index(config.decontamination))
        return plan.units, plan.excluded

    # the export steps read what ingest stored, not the messages: a match added there is left out
    flags = json.loads(flags_file.read_text())
    clean = list(grpo_plan()[0]["trajectory_ids"].iloc[0])  # the rollouts of the one clean task
    flags["contaminated"][clean[0]] = "gsm8k"
    flags_file.write_text(json.dumps(flags))
    index = build_index(config.decontamination)
    plan = grpo.plan(table, config.grpo, None, index)
    tasks, excluded = plan.units, plan.excluded
    assert excluded["contaminated:gsm8k"] == 5 and clean[0] not in tasks["trajectory_ids"].iloc[0]
    assert "_tables" not in vars(index) and index.counted()[0].ngrams == flags["ngrams"][0] > 0  # none built
    # other benchmarks (a batch ingested before them): the batch is scanned and their flags stored
    # beside the first ones' (which another dataset may still use)
    write_jsonl(benchmark, [{"question": "Unused.", "instance_id": "gsm-7"},
                            {"question": "say hi to the nice people who came to the meeting on the first day",
                             "instance_id": "none"}])
    tasks, excluded = grpo_plan()
    (rescanned_file,) = set(flags_file.parent.glob("*.json")) - {flags_file}
    rescanned = json.loads(rescanned_file.read_text())
    assert rescanned["fingerprint"] != flags["fingerprint"] and len(rescanned["contaminated"]) == 2
    assert json.loads(flags_file.read_text()) == flags
    assert excluded == {"contaminated:gsm8k": 2} and len(tasks) == 2  # now "Say hi ..." matches, the others not


def test_an_unreadable_benchmark_exits_non_zero_with_one_line_before_any_run(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"decontamination:\n  benchmarks:\n  - {{name: gsm8k, path: {tmp_path / 'none.jsonl'}, "
                      "text_fields: [question]}\n")
    result = cli("run", "--source", str(SAMPLE), "--storage", str(tmp_path / "out"), "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "none.jsonl does not exist" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


# A source nothing can be read from (issue 41, item 7) -----------------------------------------


def test_a_source_whose_every_record_is_of_no_known_format_fails_and_replaces_no_export(sample_run, tmp_path,
                                                                                       capsys):
    """A folder of JSON lines of an unknown shape, read into a storage that holds the bundled
    sample's exports: exit 2 naming the formats tried, and the stored exports (the 6-row SFT
    export among them) are left as they were."""
    import shutil

    storage = tmp_path / "out"
    shutil.copytree(sample_run, storage)
    before = written_files(storage)
    stored_sft = json.loads((storage / "exports" / "sft" / "manifest.json").read_text())["rows"]
    assert stored_sft["train"] + stored_sft["validation"] == 6
    unknown = write_jsonl(tmp_path / "unknown" / "events.jsonl", [{"event": "login", "user": i} for i in range(3)])
    assert main(["run", "--source", str(unknown.parent), "--storage", str(storage)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nothing could be read from" in err and str(unknown.parent) in err
    assert all(name in err for name in ("nemo_gym", "hermes", "atif"))
    after = written_files(storage)
    assert {name: data for name, data in after.items() if name.startswith(("exports/", "reports/"))} == {
        name: data for name, data in before.items() if name.startswith(("exports/", "reports/"))}
    # its records are quarantined in their batch, with their reason
    quarantined = [json.loads(line) for path in (storage / "quarantine" / "batches").glob("*.jsonl")
                   for line in path.read_text().splitlines() if str(unknown) in line]
    assert [row["reason"] for row in quarantined] == ["not_a_rollout"] * 3


def test_a_folder_without_a_file_of_a_known_kind_fails_before_any_run(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("nothing here\n")
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no file of a known kind" in err and "nemo_gym" in err
    assert not (tmp_path / "out" / "exports").exists()


def test_a_stray_unknown_file_inside_a_readable_source_is_quarantined_as_before(tmp_path):
    source = tmp_path / "in"
    shutil_copy = __import__("shutil").copytree
    shutil_copy(SAMPLE, source)
    write_jsonl(source / "stray.jsonl", [{"event": "login"}])
    out = tmp_path / "out"
    assert main(["run", "--source", str(source), "--storage", str(out)]) == 0
    stats = json.loads((out / "reports" / "stats.json").read_text())
    assert stats["rejected_by_reason"]["not_a_rollout"] >= 1 and stats["records_valid"] > 0


def test_manifests_cards_and_the_report_say_where_the_rewards_came_from(tmp_path):
    """Issue 41, items 5 and 6: a Gym results folder with a re-verification of its rollouts
    (tests/sources/test_nemo_gym_run_folder.py ``reverify_folder``, built from Gym's code)."""
    from pathlib import Path

    from tests.sources.test_nemo_gym_run_folder import reverify_folder

    results = reverify_folder(tmp_path)
    out = tmp_path / "out"
    assert main(["run", "--source", str(results), "--storage", str(out), "--exports", "sft,grpo"]) == 0
    for export in ("sft", "grpo"):
        manifest = json.loads((out / "exports" / export / "manifest.json").read_text())
        assert manifest["excluded"]["superseded"] == 2  # the originals: their re-verified copies won
        said = {Path(s["uri"]).name: s.get("reward_provenance") for s in manifest["sources"]}
        assert said["unsafe_rollouts_strict_reverified.jsonl"] is None  # every row quarantined: none scored
        assert said["rollouts_lenient_reverified.jsonl"]["reverified"] is True
        assert said["rollouts.jsonl"]["verifiers"] == {"math_simple_agent": 2}
        card = (out / "exports" / export / "README.md").read_text()
        assert "## Where the rewards came from" in card and "re-verification of results/rollouts.jsonl" in card
    assert "## Where the rewards came from" in (out / "reports" / "stats.md").read_text()


def test_a_named_path_is_covered_by_the_batch_that_reads_it():
    """What the nothing-could-be-read rule counts as a named source's batches: a side file named
    beside its source (a shell glob) and a trial named inside its job belong to that batch."""
    from trajectory_assets.cli import _covers
    from trajectory_assets.io.source_files import FolderRecord, SourceFile

    rollouts = SourceFile("/r/rollouts.jsonl", "r/rollouts.jsonl", "/r/rollouts_materialized_inputs.jsonl",
                          side_uris=("/r/rollouts_aggregate_metrics.json",))
    assert all(_covers(rollouts, path) for path in ("/r", "/r/rollouts.jsonl", "/r/rollouts_aggregate_metrics.json"))
    assert not _covers(rollouts, "/elsewhere")
    job = SourceFile("/jobs/j1", "jobs/j1", records=(FolderRecord("t1", "/jobs/j1/t1", ("/jobs/j1/t1/agent/trajectory.json",)),))
    assert _covers(job, "/jobs/j1/t1") and _covers(job, "/jobs/j1/t1/agent/trajectory.json")
