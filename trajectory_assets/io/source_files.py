"""Discover rollout source files and stream their lines without loading them whole."""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import posixpath
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

from trajectory_assets.io.file_layouts import FolderRecords, RecordFiles, SideFile

SOURCE_SUFFIXES = (".jsonl", ".jsonl.gz")
READ_BLOCK = 1 << 20


class SourceError(Exception):
    """A configured source cannot be used at all (missing path, no permission...)."""


@dataclass(frozen=True)
class FolderRecord:
    """One record made of files: its name (relative to its batch's folder, the same on every
    machine), its folder and its files (the main file first), as URIs."""

    name: str
    folder: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class SourceFile:
    uri: str  # where it was read from, as the user would type it
    source_id: str  # stable, machine-independent name: path relative to the source root's parent
    inputs_uri: str | None = None  # its NeMo Gym materialized inputs, when they lie beside it
    # the files its producer wrote beside it that hold no records (``SideFile``): listed, never read
    side_uris: tuple[str, ...] = ()
    # a batch of folder records (``FolderRecords``: a Harbor job), one record per folder; its
    # ``uri`` is then the job folder (or the one file named alone)
    records: tuple[FolderRecord, ...] = ()
    size: int | None = field(default=None, compare=False)  # bytes as listed when discovered
    # the file's and its side file's fingerprints as listed when discovered (None: not listed)
    listed_fingerprint: str | None = field(default=None, compare=False)


@dataclass
class SourceReadStats:
    sha256: str = ""
    bytes_read: int = 0
    blank_lines: int = 0
    error: str | None = None
    # the stream was cut (a truncated gzip): its readable part was read, so the source is
    # not "unreadable at all" even when the cut falls inside its first record
    truncated: bool = False
    # (line number, bytes) of a record the cut broke off: quarantined, never dropped
    partial_record: tuple[int, bytes] | None = None
    hasher: "hashlib._Hash" = field(default_factory=hashlib.sha256, repr=False)


def discover(paths: list[str], inputs_suffixes: tuple[str, ...],
             side_files: tuple[SideFile, ...] = (),
             folder_records: tuple[FolderRecords, ...] = ()) -> list[SourceFile]:
    """Expand folders (recursively) and single files into a sorted, de-duplicated list.

    A ``<stem><suffix>.jsonl`` beside ``<stem>.jsonl``, for a suffix of ``inputs_suffixes``
    (the source formats' inputs files, ``sources.INPUTS_SUFFIXES``: NeMo Gym's
    ``_materialized_inputs``), is that source's inputs file (``inputs_uri``), not a source of
    its own; given on its own, it is read as a source.

    A file named by one of ``side_files`` (``sources.SIDE_FILES``) beside its source is that
    source's side file (``side_uris``): never a source of its own, also when it is named
    alone (then nothing is read from it; its source's batch lists it whenever that source is
    read). Without its source beside it, a file is read as a source whatever its name: a
    rollout file that only looks like a side file is never skipped.

    Record folders (``folder_records``: Harbor trials) found in a folder are grouped into one
    batch per folder holding them (a Harbor job); a record folder named itself is a batch of
    one. Nothing under a record folder is read as a JSON-lines source (agents keep their
    native logs there). A folder holding a layout's ``manifest`` beside files named as its
    members (NeMo Gym's ATIF export) is a batch whose records are those files, each read with
    the manifest. A ``.json`` file named alone is a batch of one record (see
    :func:`_single_file_batch`).
    """
    found: dict[str, SourceFile] = {}
    for path in paths:
        fs, root = filesystem_of(path)
        protocol = _protocol_prefix(path)
        if fs.isdir(root):
            parent = posixpath.dirname(root.rstrip("/"))
            listed = fs.find(root, detail=True)
            batches = _folder_batches(root, parent, listed, folder_records, protocol)
            for batch in batches:
                found.setdefault(batch.uri, batch)
            inside = {record.folder.removeprefix(protocol) for batch in batches for record in batch.records}
            names = [name for name in sorted(listed)
                     if name.endswith(SOURCE_SUFFIXES) and record_folder_of(name, inside, root.rstrip("/")) is None]
            stems = {_stem(name) for name in names}
            inputs = {stem: name for name in names
                      if (stem := _inputs_stem(name, inputs_suffixes)) is not None and stem in stems}
            inputs.update(_reverified_inputs(names, inputs))
            sides = _listed_side_files(names, listed, side_files, set(inputs.values()))
            taken = {side for found_sides in sides.values() for side in found_sides}
            for name in names:
                if name in inputs.values() or name in taken:
                    continue
                source_id = posixpath.relpath(name, parent) if parent else name
                side = inputs.get(_stem(name))
                fingerprints = [_listed_fingerprint(listed[name])] + ([_listed_fingerprint(listed[side])] if side else [])
                found.setdefault(protocol + name, SourceFile(
                    protocol + name, source_id, protocol + side if side else None,
                    side_uris=tuple(protocol + s for s in sides.get(name, ())), size=_size(listed[name]),
                    listed_fingerprint="+".join(fingerprints)))
        elif fs.isfile(root) and _is_side_file_of_a_source(fs, root, side_files):
            continue  # its source's batch lists it
        elif fs.isfile(root) and (single := _single_file_batch(fs, root, folder_records, protocol)) is not None:
            found.setdefault(single.uri, single)
        elif fs.isfile(root):
            side = next((candidate for candidate in _inputs_candidates(root, inputs_suffixes) if fs.isfile(candidate)),
                        None)
            beside = tuple(protocol + s for s in _side_files_beside(fs, root, side_files))
            found.setdefault(protocol + root, SourceFile(protocol + root, posixpath.basename(root),
                                                         protocol + side if side else None, side_uris=beside,
                                                         size=_size(fs.info(root))))
        else:
            raise SourceError(f"source {path!r} does not exist (expected a folder or a .jsonl/.jsonl.gz file)")
    return sorted(_each_record_once(found.values()), key=lambda s: s.uri)


def _each_record_once(sources: Iterable[SourceFile]) -> list[SourceFile]:
    """``sources`` without a batch of records each of which another batch already reads: a
    continuation segment or subagent file named beside its main trajectory (a shell glob
    ``*trajectory*.json`` names both), or a trial named beside the job folder holding it.
    Read twice, its rows would be converted twice. The batch holding more files is kept, and
    of two holding as many, the one whose path comes first (a job before a trial in it),
    whatever order the paths were named in: a batch's key must not depend on it."""
    kept: list[SourceFile] = []
    held: set[str] = set()
    for source in sorted(sources, key=lambda s: (-sum(len(record.files) for record in s.records), s.uri)):
        if source.records and all(_local(record.files[0]) in held for record in source.records):
            continue
        kept.append(source)
        held.update(_local(file) for record in source.records for file in record.files)
    return kept


def _local(uri: str) -> str:
    """A local file's path however it was named (``file://`` or not); other URLs as they are."""
    return uri.removeprefix("file://")


# How many bytes of JSON lines a byte of a .jsonl.gz holds, for guessing the work a source
# is before it is read: the median ratio of gzip -6 over the files of ../shared/corpus is 4.8.
GZIP_EXPANSION = 5


def work_bytes(sources: list[SourceFile]) -> int:
    """The JSON-lines bytes the sources hold, roughly (a gzip file by ``GZIP_EXPANSION``)."""
    return sum((source.size or 0) * (GZIP_EXPANSION if source.uri.endswith(".gz") else 1) for source in sources)


def _size(info: dict) -> int | None:
    size = info.get("size")
    return int(size) if size is not None else None


def _stem(name: str) -> str:
    return next((name[: -len(suffix)] for suffix in sorted(SOURCE_SUFFIXES, key=len, reverse=True)
                 if name.endswith(suffix)), name)  # a file of another name, given on its own


def _inputs_stem(name: str, inputs_suffixes: tuple[str, ...]) -> str | None:
    """The stem of the source file whose inputs file ``name`` would be, if it is one."""
    stem = _stem(name)
    return next((stem[: -len(suffix)] for suffix in inputs_suffixes if stem.endswith(suffix)), None)


def _inputs_candidates(name: str, inputs_suffixes: tuple[str, ...]) -> list[str]:
    if _inputs_stem(name, inputs_suffixes) is not None:
        return []  # an inputs file given on its own is read as a source
    own = [_stem(name) + inputs + suffix for inputs in inputs_suffixes for suffix in SOURCE_SUFFIXES]
    return own + [posixpath.join(posixpath.dirname(name), original) + inputs + suffix
                  for original in _originals(name) for inputs in inputs_suffixes for suffix in SOURCE_SUFFIXES]


# ``gym eval reverify --force`` prefixes its outputs so (nemo_gym/rollout_reverification.py
# ``_prepare_output_fpaths``): a reward the verifier may not reproduce
UNSAFE_PREFIX = "unsafe_"
FAILURES_SUFFIX = "_failures"  # nemo_gym/path_utils.py ``failures_path_for``


def _originals(name: str) -> list[str]:
    """The stems (longest first) of the rollouts file ``name`` would be a re-verification of,
    were it named as the reverify documentation names its outputs: ``[unsafe_]<stem>_<what>``
    (``rollouts_lenient_reverified.jsonl`` for ``rollouts.jsonl``). A failures file is none.

    >>> _originals("/r/unsafe_rollouts_strict_reverified.jsonl")
    ['rollouts_strict', 'rollouts']
    """
    stem = posixpath.basename(_stem(name))
    if stem.endswith(FAILURES_SUFFIX):
        return []
    stem = stem.removeprefix(UNSAFE_PREFIX)
    cuts = [at for at in range(len(stem) - 1, 0, -1) if stem[at] == "_"]
    return [stem[:at] for at in cuts]


def _reverified_inputs(names: list[str], inputs: dict[str, str]) -> dict[str, str]:
    """Each re-verification output of a folder (``gym eval reverify``) -> its original's inputs
    file: reverify writes none of its own; its rows keep the task and rollout indices, and
    their inputs stay in the original's ``_materialized_inputs`` file
    (rollout_reverification.py ``_yield_inputs_and_rollouts_paired`` joins them so). A source
    with inputs of its own, or named as no original's output, has none."""
    taken = set(inputs.values())
    found: dict[str, str] = {}
    for name in names:
        if name in taken or _stem(name) in inputs:
            continue
        folder = posixpath.dirname(name)
        original = next((posixpath.join(folder, stem) for stem in _originals(name)
                         if posixpath.join(folder, stem) in inputs), None)
        if original is not None:
            found[_stem(name)] = inputs[original]
    return found


def reverification_of(source: SourceFile) -> tuple[str, bool] | None:
    """(the original rollouts file's name, whether forced) of a re-verification output: a
    source read with another file's inputs (``_reverified_inputs``); None for any other."""
    if source.inputs_uri is None or source.records:
        return None
    inputs_stem = posixpath.basename(_stem(source.inputs_uri))
    own = posixpath.basename(_stem(source.uri))
    original = next((stem for stem in _originals(source.uri) if inputs_stem.startswith(stem + "_")), None)
    if original is None or inputs_stem.startswith(own + "_"):
        return None
    return original, own.startswith(UNSAFE_PREFIX)


def _folder_batches(root: str, parent: str, listed: dict[str, dict], folder_records: tuple[FolderRecords, ...],
                    protocol: str) -> list[SourceFile]:
    """The batches of record folders under ``root``: one per folder holding record folders
    (a Harbor job), or ``root`` itself when it is a record folder."""
    root = root.rstrip("/")
    by_batch: dict[str, list[FolderRecord]] = {}
    for layout in folder_records:
        mains = {name[: -len(layout.main) - 1]: name for name in sorted(listed) if name.endswith("/" + layout.main)}
        folders = {folder: main for folder, main in mains.items() if folder == root or folder.startswith(root + "/")}
        # every listed file under its nearest record folder: one walk up per file (a job holds
        # thousands of trials, so no scan of the listing per trial)
        members: dict[str, list[str]] = {folder: [] for folder in folders}
        for name in sorted(listed):
            folder = record_folder_of(name, folders, root)
            if folder is not None and name != folders[folder]:
                members[folder].append(name)
        for folder, main in folders.items():
            batch_folder = root if folder == root else posixpath.dirname(folder)
            files = [main] + [name for name in members[folder] if layout.belongs(layout.main, name[len(folder) + 1:])]
            name = posixpath.relpath(folder, batch_folder) if folder != batch_folder else posixpath.basename(folder)
            by_batch.setdefault(batch_folder, []).append(
                FolderRecord(name, protocol + folder, tuple(protocol + file for file in files)))
        if layout.manifest is not None:
            for folder, records in _manifest_batches(root, listed, layout, protocol).items():
                by_batch.setdefault(folder, []).extend(records)
    batches = []
    for batch_folder, records in sorted(by_batch.items()):
        files = list(dict.fromkeys(file.removeprefix(protocol) for record in records for file in record.files))
        source_id = posixpath.relpath(batch_folder, parent) if parent else batch_folder
        batches.append(SourceFile(protocol + batch_folder, source_id, records=tuple(records),
                                  size=sum(_size(listed[file]) or 0 for file in files),
                                  listed_fingerprint=_combined_fingerprint(
                                      [_listed_fingerprint(listed[file]) for file in files])))
    return batches


def _manifest_batches(root: str, listed: dict[str, dict], layout: FolderRecords,
                      protocol: str) -> dict[str, list[FolderRecord]]:
    """The folders under ``root`` holding ``layout.manifest`` and files named as its members
    beside it: each such file is a record, read with the manifest (its second file)."""
    member = re.compile(layout.manifest_member)
    manifests = [name for name in sorted(listed) if posixpath.basename(name) == layout.manifest
                 and (name == f"{root}/{layout.manifest}" or name.startswith(root + "/"))]
    batches: dict[str, list[FolderRecord]] = {}
    for manifest in manifests:
        folder = posixpath.dirname(manifest)
        records = [FolderRecord(posixpath.basename(name), protocol + folder, (protocol + name, protocol + manifest))
                   for name in sorted(listed) if posixpath.dirname(name) == folder
                   and member.fullmatch(posixpath.basename(name))]
        if records:
            batches[folder] = records
    return batches


def record_folder_of(name: str, folders: Collection[str], root: str) -> str | None:
    """The nearest folder above ``name`` (within ``root``) that is one of ``folders``, if any.

    >>> record_folder_of("/j/t1/agent/trajectory.json", {"/j/t1", "/j/t2"}, "/j")
    '/j/t1'
    >>> record_folder_of("/j/notes.jsonl", {"/j/t1"}, "/j") is None
    True
    """
    folder = posixpath.dirname(name)
    while len(folder) >= len(root):
        if folder in folders:
            return folder
        parent = posixpath.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return None


def _single_file_batch(fs: AbstractFileSystem, path: str, folder_records: tuple[FolderRecords, ...],
                       protocol: str) -> SourceFile | None:
    """A file named alone that is a folder record's main file (``<trial>/agent/trajectory.json``:
    that trial, a batch of one) or whose name matches a layout's ``single_pattern`` (a record
    of its own, with the files beside it that belong to it). None: not a record file."""
    for layout in folder_records:
        if path.endswith("/" + layout.main):
            folder = path[: -len(layout.main) - 1]
            main = layout.main
        elif fnmatch.fnmatch(posixpath.basename(path), layout.single_pattern) and not path.endswith(SOURCE_SUFFIXES):
            folder, main = posixpath.dirname(path), posixpath.basename(path)
        else:
            continue
        listed = fs.find(folder, detail=True)
        files = [path] + sorted(name for name in listed if name != path and layout.belongs(main, name[len(folder) + 1:]))
        record = FolderRecord(posixpath.basename(folder if main == layout.main else path), protocol + folder,
                              tuple(protocol + file for file in files))
        uri = protocol + (folder if main == layout.main else path)
        return SourceFile(uri, posixpath.basename(uri), records=(record,),
                          size=sum(_size(listed[file]) or 0 for file in files),
                          listed_fingerprint=_combined_fingerprint([_listed_fingerprint(listed[file]) for file in files]))
    return None


def _combined_fingerprint(fingerprints: list[str]) -> str:
    """One short fingerprint for many files (a job holds thousands: the sensor's cursor keeps one per batch)."""
    return "files:" + hashlib.sha256("\n".join(fingerprints).encode()).hexdigest()


def _side_candidates(name: str, side_files: tuple[SideFile, ...]) -> list[str]:
    """The paths the side files of the source ``name`` would have."""
    folder, stem = posixpath.dirname(name), posixpath.basename(_stem(name))
    return [posixpath.join(folder, side) for side_file in side_files for side in side_file.names_for(stem)]


def _is_side_file_of_a_source(fs: AbstractFileSystem, name: str, side_files: tuple[SideFile, ...]) -> bool:
    """Whether ``name`` is named as a side file and the source it belongs to lies beside it."""
    folder, base = posixpath.dirname(name), posixpath.basename(name)
    if any(fs.isfile(posixpath.join(folder, stem + suffix))
           for side_file in side_files for stem in side_file.stems_of(base) for suffix in SOURCE_SUFFIXES):
        return True
    if _side_folder_owner(name, side_files, fs.isfile) is not None:
        return True
    return any(side.matches(base) for side in side_files) and any(
        _is_source_name(other, side_files) for other in fs.ls(folder, detail=False))


def _is_source_name(name: str, side_files: tuple[SideFile, ...]) -> bool:
    """A records file that no side file of every source in its folder names."""
    return name.endswith(SOURCE_SUFFIXES) and not any(side.matches(posixpath.basename(name)) for side in side_files)


def _side_folder_owner(name: str, side_files: tuple[SideFile, ...], exists: Callable[[str], bool]) -> str | None:
    """The source whose side folder (``SideFile("{stem}/preprocessed_datasets/")``) ``name`` lies
    in, if that source exists: ``<dir>/<stem>.jsonl`` for ``<dir>/<stem>/preprocessed_datasets/...``."""
    for side in side_files:
        if not side.is_folder or not side.pattern.startswith("{stem}/"):
            continue
        inside = side.pattern[len("{stem}"):]  # "/preprocessed_datasets/"
        at = name.find(inside)
        while at > 0:
            owner = next((name[:at] + suffix for suffix in SOURCE_SUFFIXES if exists(name[:at] + suffix)), None)
            if owner is not None:
                return owner
            at = name.find(inside, at + 1)
    return None


def _listed_side_files(names: list[str], listed: dict[str, dict], side_files: tuple[SideFile, ...],
                       inputs: set[str]) -> dict[str, list[str]]:
    """Each source of a folder's listing (``names``: its records files, ``inputs``: those that are
    inputs files) -> its side files in the listing: those its stem names, those named as side
    files of every source in their folder (when that folder holds a source they do not name),
    and the files under its side folders. A file taken by none of these rules is a source."""
    owned: dict[str, list[str]] = {}
    for name in listed:
        owner = _side_folder_owner(name, side_files, listed.__contains__)
        if owner is not None:
            owned.setdefault(owner, []).append(name)
    under = {name for files in owned.values() for name in files}
    shared: dict[str, list[str]] = {}  # folder -> its side files of every source
    for name in listed:
        if name not in under and any(side.matches(posixpath.basename(name)) for side in side_files):
            shared.setdefault(posixpath.dirname(name), []).append(name)
    sources = [name for name in names if name not in inputs and name not in under]
    with_source = {posixpath.dirname(name) for name in sources if _is_source_name(name, side_files)}
    return {name: [side for side in _side_candidates(name, side_files) if side in listed]
            + (shared.get(posixpath.dirname(name), []) if _is_source_name(name, side_files) else [])
            + sorted(owned.get(name, []))
            for name in sources
            if _is_source_name(name, side_files) or posixpath.dirname(name) not in with_source}


def _side_files_beside(fs: AbstractFileSystem, name: str, side_files: tuple[SideFile, ...]) -> list[str]:
    """The side files of a source named alone, as the folder beside it holds them."""
    folder = posixpath.dirname(name)
    listed = {other: {} for other in fs.ls(folder, detail=False)}
    stem = posixpath.basename(_stem(name))
    for side in side_files:
        side_folder = side.folder_for(stem)
        if side_folder is not None and fs.isdir(posixpath.join(folder, side_folder)):
            listed.update({other: {} for other in fs.find(posixpath.join(folder, side_folder))})
    listed.setdefault(name, {})
    return _listed_side_files([name], listed, side_files, set()).get(name, [])


def iter_lines(source: SourceFile, stats: SourceReadStats) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, line bytes without the line ending) for non-blank lines.

    Splits on ``\\n`` only, never on U+2028/U+0085 inside JSON strings. Gzip files may hold
    several members. The source's SHA-256 (of its stored bytes) is computed on the way.
    A read error ends the stream and is recorded in ``stats.error`` instead of raising; the
    bytes of a record it broke off are kept in ``stats.partial_record``.
    """
    if source.records:
        raise ValueError(f"{source.uri} is a batch of folder records: read it with iter_folder_records")
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
    pending: list[bytes] = []  # pieces of the line not ended yet (a line may span many blocks)
    try:
        while block := stream.read1(READ_BLOCK):  # read1: a cut loses no block already decoded
            if b"\n" not in block:
                pending.append(block)
                continue
            lines = block.split(b"\n")
            if pending:
                lines[0] = b"".join([*pending, lines[0]])
            pending = [lines.pop()]
            for line in lines:
                line_number += 1
                if (line := _record(line, line_number, stats)) is not None:
                    yield line_number, line
        last = b"".join(pending)
        if last:  # the last line has no line ending
            line_number += 1
            if (last := _record(last, line_number, stats)) is not None:
                yield line_number, last
        while hashing.read(READ_BLOCK):  # hash any trailing bytes the decoder did not need
            pass
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        stats.error = f"read failed after line {line_number}: {error}"
        stats.truncated = isinstance(error, EOFError)
        broken = b"".join(pending)
        if broken.strip():
            stats.partial_record = (line_number + 1, broken)
    finally:
        stats.sha256 = stats.hasher.hexdigest()
        raw.close()


def iter_folder_records(source: SourceFile, stats: SourceReadStats) -> Iterator[tuple[int, RecordFiles]]:
    """Yield (1-based record number, the record's files as read) for a batch of folder
    records (``source.records``). A file that cannot be read or is not UTF-8 is named in
    ``unreadable`` (its format rejects or flags the record); the batch's SHA-256 is
    :func:`folder_digest` of the files."""
    digests: list[tuple[str, str | None]] = []
    shared: dict[str, tuple[str | None, str | None, str | None]] = {}  # a file several records hold: read once
    for number, record in enumerate(source.records, start=1):
        files: dict[str, str] = {}
        unreadable: dict[str, str] = {}
        sha256s: dict[str, str] = {}
        for uri in record.files:
            relative = uri[len(record.folder) + 1:]
            if uri in shared:
                text, sha256, why = shared[uri]
            else:
                text, sha256, why = _read_member(uri, stats)
                if uri != record.files[0]:  # a main file is no other record's: not kept
                    shared[uri] = (text, sha256, why)
            digests.append((f"{record.name}/{relative}", sha256))
            if text is None:
                unreadable[relative] = why
            else:
                files[relative] = text
            if sha256 is not None:
                sha256s[relative] = sha256
        yield number, RecordFiles(record.name, record.folder, record.files[0][len(record.folder) + 1:], files,
                                  unreadable, sha256s)
    stats.sha256 = folder_digest(digests)


def _read_member(uri: str, stats: SourceReadStats) -> tuple[str | None, str | None, str | None]:
    """(text, SHA-256 of the bytes, why there is no text) of one file of a folder record."""
    try:
        data = read_bytes(uri)
    except OSError as error:
        if not is_unreadable(error, uri):
            raise
        return None, None, f"cannot read: {error}"
    stats.bytes_read += len(data)
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        return data.decode("utf-8"), sha256, None
    except UnicodeDecodeError as error:
        return None, sha256, f"not valid UTF-8 at byte {error.start}"


def folder_digest(files: list[tuple[str, str | None]]) -> str:
    """The SHA-256 of a batch of folder records: of each file's name and SHA-256 (None: it
    cannot be read), in order. Any change to any file of any record changes it."""
    return hashlib.sha256("".join(f"{name}\t{digest or 'unreadable'}\n" for name, digest in files).encode()).hexdigest()


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem_of(uri)
    with fs.open(path, "rb") as handle:
        return handle.read()


def _record(line: bytes, line_number: int, stats: SourceReadStats) -> bytes | None:
    """The line as a record, or None for a blank line (counted)."""
    if line_number == 1 and line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]  # UTF-8 byte order mark
    line = line.rstrip(b"\r")
    if not line.strip():
        stats.blank_lines += 1
        return None
    return line


class _HashingReader(io.RawIOBase):
    def __init__(self, inner: io.IOBase, stats: SourceReadStats) -> None:
        self._inner = inner
        self._stats = stats

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        # read straight into the buffer where the file can (a local file): no copy of each block
        size = self._inner.readinto(buffer) if hasattr(self._inner, "readinto") else self._read_into(buffer)
        size = size or 0
        self._stats.hasher.update(memoryview(buffer)[:size])
        self._stats.bytes_read += size
        return size

    def _read_into(self, buffer) -> int:
        data = self._inner.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


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
    """(SHA-256, size) of the source file's stored bytes."""
    return file_sha256(source.uri)


def file_sha256(uri: str) -> tuple[str, int]:
    """(SHA-256, size) of the stored bytes of a file, read in blocks."""
    digest = hashlib.sha256()
    size = 0
    fs, path = filesystem_of(uri)
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


def data_version(sha256: str, inputs_sha256: str | None) -> str:
    """A batch's data version: its file's SHA-256, and its side file's when it has one."""
    if inputs_sha256 is None:
        return sha256
    return hashlib.sha256(f"{sha256}+{inputs_sha256}".encode()).hexdigest()


def describe_batch(source: SourceFile) -> dict[str, Any]:
    """A batch's raw record (``schemas.raw_rollouts``): its files, their SHA-256 and its
    data version. A file that cannot be read is recorded with its error rather than
    failing: the batch then reports it as an ``unreadable_source`` (the side file: the
    batch is read without it). Passing storage faults are raised, for the retry policy."""
    record: dict[str, Any] = {"uri": source.uri, "source_id": source.source_id, "sha256": None, "bytes": 0,
                              "inputs_uri": source.inputs_uri, "inputs_sha256": None, "inputs_error": None,
                              "data_version": "unreadable", "error": None,
                              "side_files": [describe_side_file(uri) for uri in source.side_uris],
                              "records": None}  # a batch of folder records lists every file of each
    if source.records:
        return _describe_folder_batch(source, record)
    try:
        record["sha256"], record["bytes"] = sha256_of(source)
    except OSError as failure:
        if not is_unreadable(failure, source.uri):
            raise
        record["error"] = f"cannot read: {failure}"
        return record
    if source.inputs_uri is not None:
        try:
            record["inputs_sha256"] = file_sha256(source.inputs_uri)[0]
        except OSError as failure:
            if not is_unreadable(failure, source.inputs_uri):
                raise
            record["inputs_error"] = f"cannot read: {failure}"
    record["data_version"] = data_version(record["sha256"], record["inputs_sha256"])
    return record


def _describe_folder_batch(source: SourceFile, record: dict[str, Any]) -> dict[str, Any]:
    """A batch of folder records: every file of every record with its size and SHA-256 (or why it
    cannot be read); the batch's SHA-256 and data version are :func:`folder_digest` of them."""
    digests: list[tuple[str, str | None]] = []
    records = []
    hashed: dict[str, dict[str, Any]] = {}  # a file several records hold (a manifest): hashed and counted once
    for folder_record in source.records:
        files = []
        for uri in folder_record.files:
            relative = uri[len(folder_record.folder) + 1:]
            if uri in hashed:
                files.append({**hashed[uri], "path": relative})
                digests.append((f"{folder_record.name}/{relative}", hashed[uri]["sha256"]))
                continue
            try:
                sha256, size = file_sha256(uri)
                files.append({"path": relative, "bytes": size, "sha256": sha256, "error": None})
            except OSError as failure:
                if not is_unreadable(failure, uri):
                    raise
                sha256, size = None, 0
                files.append({"path": relative, "bytes": None, "sha256": None, "error": f"cannot read: {failure}"})
            if uri != folder_record.files[0]:
                hashed[uri] = files[-1]
            digests.append((f"{folder_record.name}/{relative}", sha256))
            record["bytes"] += size
        records.append({"name": folder_record.name, "folder": folder_record.folder, "files": files})
    record["sha256"] = record["data_version"] = folder_digest(digests)
    record["records"] = records
    return record


def source_from_record(recorded: dict[str, Any]) -> SourceFile:
    """The source a batch's raw record (:func:`describe_batch`) describes, as ingest reads it:
    its side file left out when it could not be read (its error is in the record), a batch of
    folder records with exactly the files that were hashed."""
    inputs_uri = recorded.get("inputs_uri") if recorded.get("inputs_sha256") else None
    sides = tuple(side["uri"] for side in recorded.get("side_files") or () if side.get("sha256"))
    records = tuple(FolderRecord(record["name"], record["folder"],
                                 tuple(f"{record['folder']}/{file['path']}" for file in record["files"]))
                    for record in recorded.get("records") or ())
    return SourceFile(recorded["uri"], recorded["source_id"], inputs_uri, side_uris=sides, records=records)


def describe_side_file(uri: str) -> dict[str, Any]:
    """A side file as its batch lists it: where it is, its size and SHA-256 (or why it cannot
    be read). It is lineage only: nothing of it is read into a trajectory, so it is not part
    of the batch's data version (a rewritten metrics file changes no trajectory)."""
    try:
        sha256, size = file_sha256(uri)
    except OSError as failure:
        if not is_unreadable(failure, uri):
            raise
        return {"uri": uri, "name": posixpath.basename(uri), "bytes": None, "sha256": None,
                "error": f"cannot read: {failure}"}
    return {"uri": uri, "name": posixpath.basename(uri), "bytes": size, "sha256": sha256, "error": None}


def source_fingerprint(source: SourceFile) -> str:
    """:func:`fingerprint` of a source and of its side file: as the folder's listing gave them
    when the source was discovered in one (no request per file), else asked of each file."""
    if source.listed_fingerprint is not None:
        return source.listed_fingerprint
    if source.records:
        return _combined_fingerprint([fingerprint(uri) for record in source.records for uri in record.files])
    main = fingerprint(source.uri)
    return main if source.inputs_uri is None else f"{main}+{fingerprint(source.inputs_uri)}"


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
    return _listed_fingerprint(info)


def _listed_fingerprint(info: dict) -> str:
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return f"etag:{str(etag).strip(chr(34))}"
    return f"size:{info.get('size')}:mtime:{info.get('mtime') or info.get('LastModified') or info.get('created')}"
