import gzip
import json
import os
import re
import hashlib

import pytest

from tests.fixtures.harbor_jobs import LINEAR, TERMINUS, harbor_jobs, write_trial
from trajectory_assets.io.source_files import (
    SourceError,
    SourceReadStats,
    describe_batch,
    discover,
    iter_folder_records,
    iter_lines,
    source_fingerprint,
    source_from_record,
)
from trajectory_assets.sources import FOLDER_RECORDS, INPUTS_SUFFIXES, SIDE_FILES


def lines_of(path):
    stats = SourceReadStats()
    (source,) = discover([str(path)], INPUTS_SUFFIXES)
    return list(iter_lines(source, stats)), stats


def test_discover_searches_folders_recursively_for_jsonl_and_gz(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ["a/one.jsonl", "a/b/two.jsonl.gz", "a/notes.txt", "a/three.json"]:
        (tmp_path / name).write_bytes(b"")
    found = discover([str(tmp_path / "a")], INPUTS_SUFFIXES)
    assert [s.source_id for s in found] == ["a/b/two.jsonl.gz", "a/one.jsonl"]


def test_discover_accepts_single_files_and_deduplicates(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"")
    found = discover([str(path), str(tmp_path)], INPUTS_SUFFIXES)
    assert len(found) == 1 and found[0].source_id == "x.jsonl"


def test_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        discover([str(tmp_path / "nope")], INPUTS_SUFFIXES)


def test_lines_split_on_newline_only_and_strip_crlf_and_bom(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": "x\xe2\x80\xa8y"}\r\n\r\n   \n{"b": "\xc2\x85"}')
    lines, stats = lines_of(path)
    assert lines == [(1, b'{"a": "x\xe2\x80\xa8y"}'), (4, b'{"b": "\xc2\x85"}')]
    assert stats.blank_lines == 2
    assert stats.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_gzip_with_several_members(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"n": 1}\n') + gzip.compress(b'{"n": 2}\n'))
    lines, stats = lines_of(path)
    assert [line for _, line in lines] == [b'{"n": 1}', b'{"n": 2}']
    assert stats.error is None
    assert stats.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_truncated_gzip_keeps_what_was_read_and_reports_the_error(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    data = gzip.compress(b"".join(b'{"n": %d}\n' % i for i in range(2000)))
    path.write_bytes(data[: len(data) - 20])
    lines, stats = lines_of(path)
    assert stats.error is not None and "read failed" in stats.error
    assert len(lines) > 0


@pytest.mark.parametrize(
    "source_id",
    ["../../etc/passwd", "/abs/path.jsonl", "a/../../b.jsonl", "spaces and ünïcode/x y.jsonl", "..", "", "~/x|y;z.jsonl"],
)
def test_batch_keys_are_safe_file_names_and_unique(source_id):
    from trajectory_assets.io.source_files import batch_key
    from trajectory_assets.io.storage import Storage

    key = batch_key(source_id)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", key) and not key.startswith(".")
    assert Storage("/tmp/root").path(f"raw/batches/{key}.json").startswith("/tmp/root/raw/batches/")
    assert batch_key(source_id + "x") != key


def test_a_name_with_double_colons_is_a_plain_file_not_a_chained_url(tmp_path):
    from trajectory_assets.io.source_files import fingerprint, sha256_of

    path = tmp_path / "x::y.jsonl"
    path.write_bytes(b'{"n": 1}\n{"n": 2}\n')
    lines, stats = lines_of(path)
    assert [line for _, line in lines] == [b'{"n": 1}', b'{"n": 2}']
    assert stats.error is None
    (source,) = discover([str(tmp_path)], INPUTS_SUFFIXES)
    assert source.uri == str(path)
    assert sha256_of(source) == (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_size)
    assert fingerprint(source.uri).startswith("size:18:")


def test_a_broken_symlink_is_a_source_that_cannot_be_opened_not_an_exception(tmp_path):
    from trajectory_assets.io.source_files import fingerprint, is_unreadable, sha256_of

    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "missing-target.jsonl")
    (source,) = discover([str(tmp_path)], INPUTS_SUFFIXES)  # found in its folder (named alone, it is a SourceError)
    stats = SourceReadStats()
    assert list(iter_lines(source, stats)) == []
    assert stats.error.startswith("cannot open:") and stats.sha256 == ""
    with pytest.raises(OSError) as raised:
        sha256_of(source)
    assert is_unreadable(raised.value, source.uri)
    assert fingerprint(source.uri) == "unreadable:FileNotFoundError"  # the sensor still sees a batch


def test_only_missing_or_forbidden_objects_count_as_unreadable_remote_sources():
    from trajectory_assets.io.source_files import is_unreadable

    for error in (FileNotFoundError("k"), PermissionError("k")):
        assert is_unreadable(error, "s3://bucket/k.jsonl")
    assert not is_unreadable(ConnectionResetError("reset"), "s3://bucket/k.jsonl")  # retried instead
    assert not is_unreadable(TimeoutError("slow"), "s3://bucket/k.jsonl")
    assert is_unreadable(OSError(5, "I/O error"), "/data/k.jsonl")


def test_remote_and_local_sources_are_opened_without_parsing_their_names_as_urls():
    from fsspec.implementations.local import LocalFileSystem

    from trajectory_assets.io.source_files import filesystem_of

    fs, path = filesystem_of("/data/a::b/x::y.jsonl")
    assert isinstance(fs, LocalFileSystem) and path == "/data/a::b/x::y.jsonl"
    fs, path = filesystem_of("file:///data/x::y.jsonl")
    assert isinstance(fs, LocalFileSystem) and path == "/data/x::y.jsonl"
    fs, path = filesystem_of("memory://bucket/x::y.jsonl")
    assert "memory" in fs.protocol and path.endswith("bucket/x::y.jsonl")


def test_materialized_inputs_beside_a_rollout_file_are_its_side_file_not_a_batch(tmp_path):
    for name in ["run.jsonl", "run_materialized_inputs.jsonl", "run_failures.jsonl", "other.jsonl.gz",
                 "other_materialized_inputs.jsonl.gz", "lonely_materialized_inputs.jsonl"]:
        (tmp_path / name).write_bytes(b"")
    found = {source.source_id.split("/")[-1]: source for source in discover([str(tmp_path)], INPUTS_SUFFIXES)}
    # the failures sidecar is read as a batch of its own (its rows are quarantined by class);
    # inputs whose rollout file is not there are a source like any other
    assert sorted(found) == ["lonely_materialized_inputs.jsonl", "other.jsonl.gz", "run.jsonl", "run_failures.jsonl"]
    assert found["run.jsonl"].inputs_uri == str(tmp_path / "run_materialized_inputs.jsonl")
    assert found["other.jsonl.gz"].inputs_uri == str(tmp_path / "other_materialized_inputs.jsonl.gz")
    assert found["run_failures.jsonl"].inputs_uri is None
    # a single file finds its side file beside it
    (single,) = discover([str(tmp_path / "run.jsonl")], INPUTS_SUFFIXES)
    assert single.inputs_uri == str(tmp_path / "run_materialized_inputs.jsonl")


def test_a_gzip_cut_inside_its_first_record_keeps_the_bytes_of_that_record(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    record = b'{"responses_create_params": {"input": "' + os.urandom(4000).hex().encode() + b'"}}\n'
    data = gzip.compress(record)
    path.write_bytes(data[: len(data) // 2])
    lines, stats = lines_of(path)
    assert lines == [] and stats.truncated and "read failed" in stats.error
    line, partial = stats.partial_record
    assert line == 1 and record.startswith(partial) and len(partial) > 100


def test_a_gzip_cut_between_records_has_no_partial_record(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"n": 1}\n') + gzip.compress(b'{"n": 2}\n')[:10])  # the header only
    lines, stats = lines_of(path)
    assert [line for _, line in lines] == [b'{"n": 1}'] and stats.truncated and stats.partial_record is None


def test_a_file_that_is_not_gzip_is_not_a_cut_stream(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(b'{"n": 1}\n')
    lines, stats = lines_of(path)
    assert lines == [] and stats.error and not stats.truncated


def test_lines_longer_than_a_read_block_stay_whole(tmp_path):
    from trajectory_assets.io.source_files import READ_BLOCK

    long_line = b'{"x": "' + b"y" * (3 * READ_BLOCK) + b'"}'
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n' + long_line + b"\n" + b'{"b": 2}')
    lines, _ = lines_of(path)
    assert lines == [(1, b'{"a": 1}'), (2, long_line), (3, b'{"b": 2}')]


# ---------------------------------------------------------------- side files


# what NeMo Gym's collector and reward profiler, and Hermes Agent, write beside a source file
SIDE_FILE_CASES = [
    ("run.jsonl", "run_aggregate_metrics.json"),
    ("run.jsonl", "run_reward_profiling.jsonl"),
    ("run.jsonl", "run_agent_metrics.json"),
    ("batch_0.jsonl", "batch_0.exploration.jsonl"),
    ("samples.jsonl.gz", "samples.jsonl.exploration.jsonl"),
    ("samples.jsonl.gz", "samples.exploration.jsonl"),
    ("trajectory_samples.jsonl.gz", "exploration_trees.jsonl"),
    ("failed_trajectories.jsonl", "failed_exploration_trees.jsonl"),
]


@pytest.mark.parametrize("source, side", SIDE_FILE_CASES)
def test_a_side_file_beside_its_source_is_listed_with_it_and_is_no_batch(tmp_path, source, side):
    (tmp_path / source).write_bytes(b"")
    (tmp_path / side).write_bytes(b"[]\n")
    (found,) = discover([str(tmp_path)], INPUTS_SUFFIXES, SIDE_FILES)
    assert found.source_id.endswith(source)
    assert found.side_uris == (str(tmp_path / side),)
    (alone,) = discover([str(tmp_path / source)], INPUTS_SUFFIXES, SIDE_FILES)  # named alone, it is found too
    assert alone.side_uris == (str(tmp_path / side),)


@pytest.mark.parametrize("source, side", SIDE_FILE_CASES)
def test_every_side_file_named_alone_beside_its_source_is_no_batch(tmp_path, source, side):
    (tmp_path / source).write_bytes(b"")
    (tmp_path / side).write_bytes(b"[]\n")
    # also a .json one, which named alone would otherwise be a record file of its own
    assert discover([str(tmp_path / side)], INPUTS_SUFFIXES, SIDE_FILES, FOLDER_RECORDS) == []


def test_a_side_file_named_alone_is_read_by_nobody_when_its_source_lies_beside_it(tmp_path):
    (tmp_path / "run.jsonl").write_bytes(b"")
    (tmp_path / "run_reward_profiling.jsonl").write_bytes(b"{}\n")
    assert discover([str(tmp_path / "run_reward_profiling.jsonl")], INPUTS_SUFFIXES, SIDE_FILES) == []
    # a shell glob names both: one batch, which lists it
    (found,) = discover([str(tmp_path / "run.jsonl"), str(tmp_path / "run_reward_profiling.jsonl")],
                        INPUTS_SUFFIXES, SIDE_FILES)
    assert found.side_uris == (str(tmp_path / "run_reward_profiling.jsonl"),)


def test_a_file_named_like_a_side_file_without_its_source_is_read_as_a_source(tmp_path):
    # never skipped on its name alone: a rollout file that only looks like a side file is not lost
    (tmp_path / "lonely_reward_profiling.jsonl").write_bytes(b"")
    found = discover([str(tmp_path)], INPUTS_SUFFIXES, SIDE_FILES)
    assert [source.source_id.split("/")[-1] for source in found] == ["lonely_reward_profiling.jsonl"]
    assert discover([str(tmp_path / "lonely_reward_profiling.jsonl")], INPUTS_SUFFIXES, SIDE_FILES)


def test_the_batch_lists_its_side_files_with_size_and_sha256_outside_its_data_version(tmp_path):
    (tmp_path / "run.jsonl").write_bytes(b"{}\n")
    (tmp_path / "run_aggregate_metrics.json").write_bytes(b"[1]")
    (source,) = discover([str(tmp_path)], INPUTS_SUFFIXES, SIDE_FILES)
    record = describe_batch(source)
    assert record["side_files"] == [{"uri": str(tmp_path / "run_aggregate_metrics.json"),
                                     "name": "run_aggregate_metrics.json", "bytes": 3,
                                     "sha256": hashlib.sha256(b"[1]").hexdigest(), "error": None}]
    assert record["data_version"] == record["sha256"]  # nothing of it is read into a trajectory
    (tmp_path / "run_aggregate_metrics.json").write_bytes(b"[2]")
    assert describe_batch(source)["data_version"] == record["data_version"]
    (tmp_path / "run_aggregate_metrics.json").unlink()
    assert describe_batch(source)["side_files"][0]["error"].startswith("cannot read")


# ---------------------------------------------------------------- Harbor job folders



def discover_all(*paths):
    return discover([str(path) for path in paths], INPUTS_SUFFIXES, SIDE_FILES, FOLDER_RECORDS)


def test_a_folder_of_harbor_jobs_is_one_batch_per_job_and_one_record_per_trial(tmp_path):
    jobs = harbor_jobs(tmp_path)
    (jobs / "loose.jsonl").write_text("{}\n")  # a JSON-lines source beside the jobs is still one
    found = {source.source_id: source for source in discover_all(jobs)}
    assert sorted(found) == ["jobs/2026-08-01__10-00-00", "jobs/2026-08-02__09-30-00", "jobs/loose.jsonl"]
    first = found["jobs/2026-08-01__10-00-00"]
    assert [record.name for record in first.records] == ["hello-world__lin0002", "hello-world__sum0001",
                                                        "hello-world__tmo0003"]
    files = {record.name: [uri[len(record.folder) + 1:] for uri in record.files] for record in first.records}
    # continuation and subagent files are part of their trial; trial.log is not read
    assert files["hello-world__lin0002"] == ["agent/trajectory.json", "agent/trajectory.cont-1.json", "result.json"]
    assert files["hello-world__sum0001"][0] == "agent/trajectory.json" and len(files["hello-world__sum0001"]) == 5
    second = found["jobs/2026-08-02__09-30-00"]
    cc = next(record for record in second.records if record.name == "fix-bug__cc000004")
    assert [uri[len(cc.folder) + 1:] for uri in cc.files] == ["agent/trajectory.json", "verifier/reward.txt"]
    assert first.size == sum((tmp_path / uri).stat().st_size for record in first.records for uri in record.files)


def test_the_agents_native_logs_inside_a_trial_are_never_read_as_sources(tmp_path):
    jobs = harbor_jobs(tmp_path)
    assert not any(source.uri.endswith("native.jsonl") for source in discover_all(jobs))


def test_each_trial_is_one_record_holding_its_files_as_text(tmp_path):
    jobs = harbor_jobs(tmp_path)
    source = next(s for s in discover_all(jobs) if s.source_id.endswith("10-00-00"))
    stats = SourceReadStats()
    records = list(iter_folder_records(source, stats))
    assert [number for number, _ in records] == [1, 2, 3]
    number, record = records[0]
    assert record.name == "hello-world__lin0002" and record.main == "agent/trajectory.json"
    assert record.folder == str(tmp_path / "jobs" / "2026-08-01__10-00-00" / "hello-world__lin0002")
    assert record.files["agent/trajectory.cont-1.json"] == (TERMINUS / f"{LINEAR}.cont-1.json").read_text()
    with pytest.raises(ValueError, match="iter_folder_records"):  # a trial is never read as a line
        next(iter_lines(source, SourceReadStats()))
    assert stats.sha256 == describe_batch(source)["sha256"]  # what was read is what was hashed


def test_a_job_data_version_changes_when_any_file_of_any_trial_changes(tmp_path):
    jobs = harbor_jobs(tmp_path)
    (source,) = [s for s in discover_all(jobs) if s.source_id.endswith("10-00-00")]
    before = describe_batch(source)
    assert before["data_version"] == before["sha256"] and before["error"] is None
    assert [file["path"] for file in before["records"][0]["files"]] == ["agent/trajectory.json",
                                                                        "agent/trajectory.cont-1.json", "result.json"]
    result = jobs / "2026-08-01__10-00-00" / "hello-world__tmo0003" / "result.json"
    result.write_text(result.read_text().replace('"reward": 0.0', '"reward": 0.5'))
    assert describe_batch(source)["data_version"] != before["data_version"]
    (jobs / "2026-08-01__10-00-00" / "hello-world__tmo0003" / "trial.log").write_text("changed")  # not read
    again = describe_batch(source)
    write_trial(jobs / "2026-08-01__10-00-00", "hello-world__new0006",
                {"trajectory.json": TERMINUS / "hello-world-timeout.trajectory.json"})
    (grown,) = [s for s in discover_all(jobs) if s.source_id.endswith("10-00-00")]
    assert len(grown.records) == 4 and describe_batch(grown)["data_version"] != again["data_version"]
    assert source_fingerprint(grown) != source_fingerprint(source)


def test_ingest_reads_exactly_the_files_its_raw_record_hashed(tmp_path):
    jobs = harbor_jobs(tmp_path)
    (source,) = [s for s in discover_all(jobs) if s.source_id.endswith("09-30-00")]
    rebuilt = source_from_record(json.loads(json.dumps(describe_batch(source))))
    assert rebuilt.records == source.records and rebuilt.uri == source.uri


def test_a_trial_or_a_trajectory_json_named_alone_is_a_batch_of_one(tmp_path):
    jobs = harbor_jobs(tmp_path)
    trial = jobs / "2026-08-01__10-00-00" / "hello-world__lin0002"
    for named in (trial, trial / "agent" / "trajectory.json"):
        (source,) = discover_all(named)
        (record,) = source.records
        assert source.uri == str(trial) and record.name == "hello-world__lin0002"
        assert [uri[len(record.folder) + 1:] for uri in record.files] == [
            "agent/trajectory.json", "agent/trajectory.cont-1.json", "result.json"]
    # any other .json file named alone: one record, with the segments and subagent files beside it
    (lone,) = discover_all(TERMINUS / f"{LINEAR}.json")
    (record,) = lone.records
    assert lone.uri == str(TERMINUS / f"{LINEAR}.json") and record.name == f"{LINEAR}.json"
    assert [uri.rsplit("/", 1)[-1] for uri in record.files] == [f"{LINEAR}.json", f"{LINEAR}.cont-1.json"]


def test_a_file_or_trial_another_named_record_holds_is_read_once(tmp_path):
    """A shell glob `*trajectory*.json` names a main trajectory and its continuation segment;
    a trial may be named beside its job: each file is read in one record only."""
    jobs = harbor_jobs(tmp_path)
    lone = [TERMINUS / f"{LINEAR}.json", TERMINUS / f"{LINEAR}.cont-1.json"]
    (source,) = discover_all(*lone)
    assert [uri.rsplit("/", 1)[-1] for uri in source.records[0].files] == [f"{LINEAR}.json", f"{LINEAR}.cont-1.json"]
    assert [s.uri for s in discover_all(lone[1])] == [str(lone[1])]  # named alone, a segment is still a record
    job = jobs / "2026-08-01__10-00-00"
    trial = job / "hello-world__lin0002"
    for extra in (trial, trial / "agent" / "trajectory.json", trial / "agent" / "trajectory.cont-1.json"):
        (found,) = discover_all(job, extra)
        assert found.uri == str(job) and len(found.records) == 3
    # a record of its own beside the job is still read
    assert len(discover_all(job, TERMINUS / f"{LINEAR}.json")) == 2
    # a job of one trial holds as many files as the trial: the job is kept, in either order
    lone_job = tmp_path / "lone-job"
    write_trial(lone_job, "only__t0001", {"trajectory.json": TERMINUS / f"{LINEAR}.json"})
    for paths in ((lone_job, lone_job / "only__t0001"), (lone_job / "only__t0001", lone_job)):
        assert [source.uri for source in discover_all(*paths)] == [str(lone_job)]
    # a file named as a file:// URL is the same file
    (found,) = discover_all(job, f"file://{trial / 'agent' / 'trajectory.cont-1.json'}")
    assert found.uri == str(job)


def test_a_trial_file_that_cannot_be_read_is_named_in_its_record_not_a_failed_batch(tmp_path):
    jobs = harbor_jobs(tmp_path)
    (source,) = [s for s in discover_all(jobs) if s.source_id.endswith("09-30-00")]
    broken = jobs / "2026-08-02__09-30-00" / "hello-world__oh000005" / "result.json"
    broken.unlink()
    broken.symlink_to(tmp_path / "nowhere")
    record = describe_batch(source)
    assert record["error"] is None and record["records"][1]["files"][1]["error"].startswith("cannot read")
    stats = SourceReadStats()
    records = [record for _, record in iter_folder_records(source, stats)]
    assert list(records[1].unreadable) == ["result.json"] and stats.error is None
    assert stats.sha256 == record["sha256"]


def test_a_json_file_of_json_lines_named_alone_is_read_as_lines_not_as_a_trajectory(tmp_path):
    path = tmp_path / "rollouts.json"
    path.write_text('{"a": 1}\n{"a": 2}\n')
    (found,) = discover([str(path)], INPUTS_SUFFIXES, SIDE_FILES, FOLDER_RECORDS)
    assert not found.records
    assert [line for _, line in iter_lines(found, SourceReadStats())] == [b'{"a": 1}', b'{"a": 2}']
    named = tmp_path / "run.trajectory.json"  # a renamed ATIF file keeps the word
    named.write_text(json.dumps({"schema_version": "ATIF-v1.7", "steps": []}))
    (trajectory,) = discover([str(named)], INPUTS_SUFFIXES, SIDE_FILES, FOLDER_RECORDS)
    assert len(trajectory.records) == 1


def test_a_multi_step_trial_is_one_batch_with_one_record_per_step(tmp_path):
    """``<trial>/steps/<step>/agent/trajectory.json`` (Harbor's multi-step trials): each step
    folder is a record; the trial's own result.json belongs to none of them (docs/sources.md)."""
    trial = tmp_path / "jobs" / "2026-09-01__08-00-00" / "multi__abc0001"
    for step in ("step-1", "step-2"):
        write_trial(trial / "steps", step, {"trajectory.json": TERMINUS / f"{LINEAR}.json"})
    (trial / "result.json").write_text(json.dumps({"trial_name": "multi__abc0001"}))
    (source,) = discover_all(tmp_path / "jobs")
    assert source.source_id == "jobs/2026-09-01__08-00-00/multi__abc0001/steps"
    assert [(record.name, [uri[len(record.folder) + 1:] for uri in record.files]) for record in source.records] == [
        ("step-1", ["agent/trajectory.json"]), ("step-2", ["agent/trajectory.json"])]
