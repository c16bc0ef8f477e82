"""What the CLI shows while its runs go: batches done / total, records per second, each
export as it is written. A live bar (rich) on a terminal; plain lines anywhere else (a
log file, CI), one per batch and per export."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from trajectory_assets.runs.runner import Progress


class LineProgress(Progress):
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.total = self.done = self.records = 0
        self.started = time.monotonic()

    def batches_started(self, total: int) -> None:
        self.total, self.started = total, time.monotonic()
        print(f"ingesting {total} batch(es)", file=self.out, flush=True)

    def batch_done(self, key: str, records: int) -> None:
        self.done += 1
        self.records += records
        print(f"batch {self.done}/{self.total} {key}: {records} records ({self.rate():.0f} records/s)",
              file=self.out, flush=True)

    def export_written(self, name: str, rows: int, uri: str | None) -> None:
        print(f"exported {name}, {rows} rows -> {uri}", file=self.out, flush=True)

    def rate(self) -> float:
        return self.records / max(time.monotonic() - self.started, 1e-6)

    def close(self) -> None:
        pass


class TerminalProgress(LineProgress):
    """The same events as a live bar; exports are printed above it as they are written."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

        super().__init__(out)
        self.console = Console(file=out)
        self.bar = Bar(TextColumn("batches"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                       TimeElapsedColumn(), console=self.console, transient=True)
        self.task = None

    def batches_started(self, total: int) -> None:
        self.total, self.started = total, time.monotonic()
        self.bar.start()
        self.task = self.bar.add_task("batches", total=total, rate="")

    def batch_done(self, key: str, records: int) -> None:
        self.done += 1
        self.records += records
        self.bar.update(self.task, completed=self.done, rate=f"{self.rate():,.0f} records/s")

    def export_written(self, name: str, rows: int, uri: str | None) -> None:
        self.bar.console.print(f"exported {name}, {rows} rows -> {uri}")

    def close(self) -> None:
        self.bar.stop()


def progress_for(out: TextIO = sys.stdout) -> LineProgress:
    return TerminalProgress(out) if out.isatty() else LineProgress(out)
