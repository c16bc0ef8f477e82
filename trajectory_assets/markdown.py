"""Markdown pieces shared by the stats report and the dataset cards."""

from __future__ import annotations

from typing import Any


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A Markdown table as lines ("(none)" when there are no rows); pipes in cells are escaped."""
    if not rows:
        return ["(none)"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join("" if v is None else str(v).replace("|", "\\|") for v in row) + " |" for row in rows]
    return out
