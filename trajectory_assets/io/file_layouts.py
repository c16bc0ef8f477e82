"""How a source format's files lie: the side files a producer writes beside a source, and
records made of several files. Declared by the source formats (``sources/format.py``), used
by discovery (``source_files.py``). A module of its own, with no imports of ours, so a
format's code version (and an export that reads a format's markup) does not follow the
discovery code."""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SideFile:
    """A file a producer writes beside a source file that holds no records (metrics, profiling,
    exploration trees). Declared by the source formats (``SourceFormat.side_files``): it is
    listed in its source's batch (name, size, SHA-256), never read as records.

    ``pattern`` names it from its source's stem (the name without ``.jsonl`` / ``.jsonl.gz``):
    ``"{stem}_aggregate_metrics.json"``. A pattern without ``{stem}`` is a fixed name, the side
    file of the sources whose stem is one of ``stems`` (Hermes writes ``exploration_trees.jsonl``
    beside ``trajectory_samples.jsonl``).

    >>> SideFile("{stem}_reward_profiling.jsonl").names_for("run")
    ['run_reward_profiling.jsonl']
    >>> SideFile("{stem}_reward_profiling.jsonl").stems_of("run_reward_profiling.jsonl")
    ['run']
    >>> SideFile("exploration_trees.jsonl", ("trajectory_samples",)).stems_of("exploration_trees.jsonl")
    ['trajectory_samples']
    """

    pattern: str
    stems: tuple[str, ...] = ()
    # a side file of every source in its folder, whatever their stems: a fixed name or a glob
    # (NeMo Gym's health check writes quality_summary.json once per results folder; its data
    # processor writes <dataset>_prepare.jsonl). A pattern ending in "/" ("{stem}/preprocessed_datasets/")
    # is a folder beside the source: every file under it is the source's side file.
    in_folder: bool = False

    @property
    def is_folder(self) -> bool:
        return self.pattern.endswith("/")

    def names_for(self, stem: str) -> list[str]:
        """The name this side file has beside a source of that stem (none: it has none, or it
        is named by a glob or is a folder: see ``matches``)."""
        if self.in_folder or self.is_folder:
            return []
        if "{stem}" in self.pattern:
            return [self.pattern.replace("{stem}", stem)]
        return [self.pattern] if stem in self.stems else []

    def matches(self, name: str) -> bool:
        """Whether a file of that name (no folder) is a side file of every source beside it.

        >>> SideFile("*_prepare.jsonl", in_folder=True).matches("train_prepare.jsonl")
        True
        >>> SideFile("{stem}_aggregate_metrics.json").matches("rollouts_aggregate_metrics.json")
        False
        """
        return self.in_folder and fnmatch.fnmatchcase(name, self.pattern)

    def folder_for(self, stem: str) -> str | None:
        """The folder (relative to the source's) whose every file is a side file of a source of
        that stem.

        >>> SideFile("{stem}/preprocessed_datasets/").folder_for("rollouts")
        'rollouts/preprocessed_datasets'
        """
        return self.pattern.replace("{stem}", stem).rstrip("/") if self.is_folder else None

    def stems_of(self, name: str) -> list[str]:
        """The stems of the sources a file of that name would be the side file of."""
        if self.in_folder or self.is_folder:
            return []
        if "{stem}" not in self.pattern:
            return list(self.stems) if name == self.pattern else []
        prefix, suffix = self.pattern.split("{stem}", 1)
        if len(name) > len(prefix) + len(suffix) and name.startswith(prefix) and name.endswith(suffix):
            return [name[len(prefix): len(name) - len(suffix)]]
        return []


@dataclass(frozen=True)
class FolderRecords:
    """A format whose record is a folder of files rather than a line: a Harbor trial
    (``<trial>/agent/trajectory.json``, its continuation and subagent files, ``result.json``,
    the verifier's reward file). Declared by the source format (``SourceFormat.folder_records``).

    A folder holding ``main`` (a path relative to it) is a record folder; the folder holding
    record folders (a Harbor job) is one batch, and each record folder one record. A file
    whose name matches ``single_pattern`` named alone is a record of its own, with the files
    beside it that ``belongs`` names; any other file named alone is read as JSON lines, as
    before (a ``rollouts.json`` of JSON lines stays one).
    """

    main: str
    # (the main file's path, another file's path), both relative to the record folder ->
    # whether that file is part of the record
    belongs: Callable[[str, str], bool]
    # Harbor writes trajectory.json, and NeMo Data Designer reads ATIF files by the glob
    # trajectory*.json; renamed copies (hello-world.trajectory.json) keep the word
    single_pattern: str = "*trajectory*.json"
    # a folder holding ``manifest`` and files whose names match ``manifest_member`` (a regex)
    # beside it is a batch whose records are those files, each read with the manifest (NeMo
    # Gym's ``gym eval export atif``: ``manifest.jsonl`` beside ``<task>-<rollout>.json``)
    manifest: str | None = None
    manifest_member: str = ""


# how much of a record's main file its quarantine entry shows after the folder's path
QUARANTINE_EXCERPT = 2000


@dataclass(frozen=True)
class RecordFiles:
    """One record made of files as it was read (``source_files.iter_folder_records``): what
    ingest hands to its source format instead of a line. Paths are relative to the record's
    folder, so the record (and its trajectory id) is the same wherever the folder lies."""

    name: str  # relative to its batch's folder (a Harbor trial: ``<trial>``)
    folder: str  # the record folder's URI, as discovery named it
    main: str  # the main file (a Harbor trial: ``agent/trajectory.json``)
    files: Mapping[str, str]  # path -> text, for each file read as UTF-8
    unreadable: Mapping[str, str] = field(default_factory=dict)  # path -> why it was not read
    # path -> SHA-256 of the bytes as read (before any scrubbing): a file several records share
    # (a manifest) is hashed once
    sha256s: Mapping[str, str] = field(default_factory=dict)

    def digest(self) -> str:
        """The SHA-256 of the record's name and of every file's path and text (or why it
        could not be read): byte-identical records share it, any change to a file changes it."""
        hashed = hashlib.sha256(self.name.encode())
        for path in sorted({*self.files, *self.unreadable}):
            text = self.files.get(path)
            hashed.update(f"\n{path}\t".encode())
            if text is None:
                hashed.update(b"unreadable:" + self.unreadable[path].encode())
            else:
                hashed.update((self.sha256s.get(path) or hashlib.sha256(text.encode()).hexdigest()).encode())
        return hashed.hexdigest()

    def quarantine_raw(self) -> str:
        """What a quarantine entry keeps of the record: its folder, the files it held, and
        the start of its main file (not every file of the folder)."""
        main = self.files.get(self.main, "")
        cut = f"\n[… {len(main) - QUARANTINE_EXCERPT} more characters]" if len(main) > QUARANTINE_EXCERPT else ""
        return "\n".join([self.folder, "files: " + ", ".join(sorted({*self.files, *self.unreadable})),
                          f"{self.main}:", main[:QUARANTINE_EXCERPT] + cut])
