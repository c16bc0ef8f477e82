"""An export split's files as a test reads them: its shard files in name order, which is the
order of its rows (``datasets`` reads the card's glob ``train-*.jsonl`` the same way)."""

from __future__ import annotations

from pathlib import Path


def split_paths(folder: Path, split: str) -> list[Path]:
    """The files of ``split`` in an export folder (``train-00000-of-00002.jsonl``, ...), in order."""
    return sorted(folder.glob(f"{split}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].*"))


def split_text(folder: Path, split: str) -> str:
    """A JSON-lines split's lines, every file's one after the other."""
    return "".join(path.read_text() for path in split_paths(folder, split))


def split_rows(folder: Path, split: str) -> list[dict]:
    """A JSON-lines split's rows, in order."""
    import json

    return [json.loads(line) for line in split_text(folder, split).splitlines()]
