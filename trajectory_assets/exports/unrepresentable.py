"""The error flavor renderers raise when a trajectory cannot be written in their format.

A trajectory that is valid canonically can still have no faithful form in a trainer's
format (ShareGPT cannot hold text and tool calls in one turn, Parquet prompts hold only
text...). Renderers raise :class:`Unrepresentable` instead of writing a lossy row, and the
export counts ``reason`` so the drop is visible rather than silent.
"""

from __future__ import annotations


class Unrepresentable(ValueError):
    """``reason`` is a short snake_case code (counted in stats); ``detail`` is for humans."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
