import gzip
import re
import hashlib

import pytest

from trajectory_assets.io.sources import SourceError, SourceReadStats, discover, iter_lines


def lines_of(path):
    stats = SourceReadStats()
    (source,) = discover([str(path)])
    return list(iter_lines(source, stats)), stats


def test_discover_searches_folders_recursively_for_jsonl_and_gz(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ["a/one.jsonl", "a/b/two.jsonl.gz", "a/notes.txt", "a/three.json"]:
        (tmp_path / name).write_bytes(b"")
    found = discover([str(tmp_path / "a")])
    assert [s.source_id for s in found] == ["a/b/two.jsonl.gz", "a/one.jsonl"]


def test_discover_accepts_single_files_and_deduplicates(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"")
    found = discover([str(path), str(tmp_path)])
    assert len(found) == 1 and found[0].source_id == "x.jsonl"


def test_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        discover([str(tmp_path / "nope")])


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
    from trajectory_assets.io.sources import batch_key
    from trajectory_assets.io.storage import Storage

    key = batch_key(source_id)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", key) and not key.startswith(".")
    assert Storage("/tmp/root").path(f"raw/batches/{key}.json").startswith("/tmp/root/raw/batches/")
    assert batch_key(source_id + "x") != key
