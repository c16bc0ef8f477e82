"""Discover rollout source files and stream their lines without loading them whole."""

from __future__ import annotations

import gzip
import hashlib
import io
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

SOURCE_SUFFIXES = (".jsonl", ".jsonl.gz")
READ_BLOCK = 1 << 20


class SourceError(Exception):
    """A configured source cannot be used at all (missing path, no permission...)."""


@dataclass(frozen=True)
class SourceFile:
    uri: str  # where it was read from, as the user would type it
    source_id: str  # stable, machine-independent name: path relative to the source root's parent


@dataclass
class SourceReadStats:
    sha256: str = ""
    bytes_read: int = 0
    blank_lines: int = 0
    error: str | None = None
    hasher: "hashlib._Hash" = field(default_factory=hashlib.sha256, repr=False)


def discover(paths: list[str]) -> list[SourceFile]:
    """Expand folders (recursively) and single files into a sorted, de-duplicated list."""
    found: dict[str, SourceFile] = {}
    for path in paths:
        fs, root = filesystem_of(path)
        protocol = _protocol_prefix(path)
        if fs.isdir(root):
            parent = posixpath.dirname(root.rstrip("/"))
            for name in sorted(fs.find(root)):
                if name.endswith(SOURCE_SUFFIXES):
                    source_id = posixpath.relpath(name, parent) if parent else name
                    found.setdefault(protocol + name, SourceFile(protocol + name, source_id))
        elif fs.isfile(root):
            found.setdefault(protocol + root, SourceFile(protocol + root, posixpath.basename(root)))
        else:
            raise SourceError(f"source {path!r} does not exist (expected a folder or a .jsonl/.jsonl.gz file)")
    return sorted(found.values(), key=lambda s: s.uri)


def iter_lines(source: SourceFile, stats: SourceReadStats) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, line bytes without the line ending) for non-blank lines.

    Splits on ``\\n`` only, never on U+2028/U+0085 inside JSON strings. Gzip files may hold
    several members. The source's SHA-256 (of its stored bytes) is computed on the way.
    A read error ends the stream and is recorded in ``stats.error`` instead of raising.
    """
    fs, path = filesystem_of(source.uri)
    try:
        raw = fs.open(path, "rb")
    except OSError as error:
        if not is_unreadable(error, source.uri):
            raise  # e.g. the object store is unreachable: the step's retries deal with it
        stats.error = f"cannot open: {error}"
        return
    hashing = io.BufferedReader(_HashingReader(raw, stats), buffer_size=READ_BLOCK)
    stream: io.BufferedIOBase = gzip.GzipFile(fileobj=hashing) if source.uri.endswith(".gz") else hashing
    line_number = 0
    try:
        for line in stream:
            line_number += 1
            if line_number == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]  # UTF-8 byte order mark
            line = line.rstrip(b"\r\n")
            if not line.strip():
                stats.blank_lines += 1
                continue
            yield line_number, line
        while hashing.read(READ_BLOCK):  # hash any trailing bytes the decoder did not need
            pass
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        stats.error = f"read failed after line {line_number}: {error}"
    finally:
        stats.sha256 = stats.hasher.hexdigest()
        raw.close()


class _HashingReader(io.RawIOBase):
    def __init__(self, inner: io.IOBase, stats: SourceReadStats) -> None:
        self._inner = inner
        self._stats = stats

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self._inner.read(len(buffer))
        size = len(data)
        buffer[:size] = data
        self._stats.hasher.update(data)
        self._stats.bytes_read += size
        return size


def _protocol_prefix(path: str) -> str:
    return path.split("://", 1)[0] + "://" if "://" in path else ""


def filesystem_of(uri: str) -> tuple[AbstractFileSystem, str]:
    """The filesystem and plain path of a source, without reading the name as a URL.

    ``fsspec.open``/``url_to_fs`` treat ``::`` anywhere in a string as a chain of URLs, so a
    file named ``x::y.jsonl`` would be opened as ``x``. A local path goes to the local
    filesystem as it is; ``proto://rest`` to that protocol's filesystem with ``rest`` as the
    path. Only a chain the user wrote before ``://`` (``simplecache::s3://...``) is parsed.
    """
    protocol = uri.split("://", 1)[0] if "://" in uri else ""
    if "::" in protocol:
        return url_to_fs(uri)
    if protocol in ("", "file", "local"):
        path = uri.split("://", 1)[1] if protocol else uri
        return LocalFileSystem(), LocalFileSystem._strip_protocol(path)
    fs = fsspec.filesystem(protocol)  # options from the environment (FSSPEC_S3...) still apply
    return fs, fs._strip_protocol(uri)


# what a missing or forbidden object looks like; anything else from a remote store (a
# connection reset, a timeout) may pass and is raised for the step's retry policy
_UNREADABLE = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def is_unreadable(error: BaseException, uri: str) -> bool:
    """Whether an error opening the source ``uri`` means the source itself cannot be read
    (so it is reported as a failed source) rather than a passing fault of the storage."""
    if isinstance(error, _UNREADABLE):
        return True
    # a local file that cannot be opened (a broken symlink, a loop, an I/O error) won't heal by retrying
    return isinstance(error, OSError) and _protocol_prefix(uri) in ("", "file://", "local://")


def sha256_of(source: SourceFile) -> tuple[str, int]:
    """(SHA-256, size) of the stored bytes, read in blocks: the batch's data version."""
    digest = hashlib.sha256()
    size = 0
    fs, path = filesystem_of(source.uri)
    with fs.open(path, "rb") as handle:
        while block := handle.read(READ_BLOCK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def batch_key(source_id: str) -> str:
    """A source's batch (partition) key: readable, safe as a file name and a Dagster
    partition key, and unique (a short hash of the full id tells apart ids that only
    differ in characters that had to be replaced)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", source_id).strip("._-")[:80] or "source"
    return f"{readable}-{hashlib.sha256(source_id.encode()).hexdigest()[:8]}"


def fingerprint(uri: str) -> str:
    """Cheap change detector for the sensor: the object store's ETag where there is one,
    else size and modification time. A changed fingerprint means the batch is re-read
    (and its SHA-256 recomputed); an unchanged one costs no read at all."""
    fs, path = filesystem_of(uri)
    try:
        info = fs.info(path)
    except OSError as error:
        if not is_unreadable(error, uri):
            raise
        # still a batch: its run reports the source as unreadable
        return f"unreadable:{type(error).__name__}"
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return f"etag:{str(etag).strip(chr(34))}"
    return f"size:{info.get('size')}:mtime:{info.get('mtime') or info.get('LastModified') or info.get('created')}"
