"""The stats_report asset's two steps alone, one after the other, on a finished run's
storage: their time, the part of it the page takes, and the size of what they write.

    python -m bench.report STORAGE OUT.json

Runs the asset's own code (``report/steps.py``) in this process, as ``bench/profile.py``
does for the export families, with wall-clock timers around the page's parts: reading
each export's summary (or, for an export written without one, scanning its rows and reading
its samples), rendering the samples, drawing the plots (vl-convert: SVG, then PNG), writing
the HTML. What is left is the statistics (trajectory columns, tasks, tool use),
the quarantine gathered into one file, the part over the trajectories handed to the part over
the exports through the storage, and writing. ``parts_s`` also times each of the two steps
(what ``bench/run.py`` calls the report's two stages). ``bench/run.py`` calls it after the
``run`` variant of each corpus size, in a fresh process.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from bench.profile import _timed


def stored_batches(storage: Path) -> list[str]:
    """What the report asset reads outside Dagster: every batch stored under ``storage``."""
    return sorted(path.name[: -len(".parquet")] for path in (storage / "trajectories" / "batches").glob("*.parquet"))


def _in_main_thread(timed, plain):
    """``timed`` when called from the main thread, else ``plain``."""
    return lambda *args, **kwargs: (timed if threading.current_thread() is threading.main_thread() else plain)(
        *args, **kwargs)


def profile_report(storage: Path) -> dict:
    import vl_convert

    from trajectory_assets.config import PipelineConfig
    from trajectory_assets.io.storage import Storage
    from trajectory_assets.report import report, steps

    spent: Counter = Counter()
    patched = [(report, "scan_stored_export"), (steps, "stored_scan"), (report, "view_sample"),
               (report, "render_page"), (vl_convert, "vegalite_to_svg"), (vl_convert, "svg_to_png"),
               (steps, "summarize_stored_trajectories"), (steps, "write_stored_report")]
    originals = [(owner, name, getattr(owner, name)) for owner, name in patched]
    # an export's summary read (or, without one, its rows scanned and its samples read whole)
    steps.stored_scan = _timed(spent, "exports' summaries (or rows)", steps.stored_scan)
    report.scan_stored_export = _timed(spent, "exports' summaries (or rows)", report.scan_stored_export)
    report.view_sample = _timed(spent, "samples shown as chats", report.view_sample)
    report.render_page = _timed(spent, "HTML", report.render_page)
    # the step's own calls: the renderer's warm-up thread draws meanwhile, not in the step's time
    vl_convert.vegalite_to_svg = _in_main_thread(_timed(spent, "plots", vl_convert.vegalite_to_svg),
                                                 vl_convert.vegalite_to_svg)
    vl_convert.svg_to_png = _timed(spent, "plots", vl_convert.svg_to_png)
    steps_spent: Counter = Counter()  # each step whole (the parts above are inside them)
    steps.summarize_stored_trajectories = _timed(steps_spent, "step 1: over the trajectories",
                                                 steps.summarize_stored_trajectories)
    steps.write_stored_report = _timed(steps_spent, "step 2: over the exports", steps.write_stored_report)

    start = time.perf_counter()
    try:
        result = steps.write_report(Storage(str(storage)), stored_batches(storage), PipelineConfig())
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    step = time.perf_counter() - start
    page = sum(spent.values())
    reports_dir = storage / "reports"
    return {
        "step_s": round(step, 3),
        "page_s": round(page, 3),  # the parts above: what the page adds to the statistics
        "parts_s": {part: round(seconds, 3) for part, seconds in [*spent.most_common(), *steps_spent.items()]},
        "page_bytes": (reports_dir / "index.html").stat().st_size,
        "plots_png_bytes": sum(path.stat().st_size for path in (reports_dir / "plots").glob("*.png")),
        "markdown_metadata_bytes": len(steps.inline_markdown(result)),  # what the UI's event log stores
    }


def main(argv: list[str] | None = None) -> None:
    storage, out = (argv or sys.argv[1:])[:2]
    Path(out).write_text(json.dumps(profile_report(Path(storage)), indent=2) + "\n")


if __name__ == "__main__":
    main()
