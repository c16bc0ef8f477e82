"""The stats_report step alone on a finished run's storage: its time, the part of it the
page takes, and the size of what it writes.

    python -m bench.report STORAGE OUT.json

Runs the asset's own code (``defs/reports.py``) in this process, as ``bench/profile.py``
does for the export families, with wall-clock timers around the page's parts: reading
each export's summary (or, for an export written without one, scanning its rows and reading
its samples), rendering the samples, drawing the plots (vl-convert: SVG, then PNG), writing
the HTML. What is left is the statistics (trajectory columns, tasks, tool use),
the quarantine gathered into one file, and writing. ``bench/run.py`` calls it after the
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

    from trajectory_assets.report import report
    from trajectory_assets.defs import reports
    from trajectory_assets.defs.resources import PipelineSettings
    from trajectory_assets.io.storage import Storage
    from trajectory_assets.exports import export_scan

    spent: Counter = Counter()
    patched = [(report, "scan_stored_export"), (reports, "stored_scan"), (report, "view_sample"),
               (report, "render_page"), (vl_convert, "vegalite_to_svg"), (vl_convert, "svg_to_png")]
    originals = [(owner, name, getattr(owner, name)) for owner, name in patched]
    # an export's summary read (or, without one, its rows scanned and its samples read whole)
    reports.stored_scan = _timed(spent, "exports' summaries (or rows)", reports.stored_scan)
    report.scan_stored_export = _timed(spent, "exports' summaries (or rows)", report.scan_stored_export)
    report.view_sample = _timed(spent, "samples shown as chats", report.view_sample)
    report.render_page = _timed(spent, "HTML", report.render_page)
    # the step's own calls: the renderer's warm-up thread draws meanwhile, not in the step's time
    vl_convert.vegalite_to_svg = _in_main_thread(_timed(spent, "plots", vl_convert.vegalite_to_svg),
                                                 vl_convert.vegalite_to_svg)
    vl_convert.svg_to_png = _timed(spent, "plots", vl_convert.svg_to_png)

    start = time.perf_counter()
    try:
        result = reports.write_report(Storage(str(storage)), stored_batches(storage), PipelineSettings())
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    step = time.perf_counter() - start
    page = sum(spent.values())
    reports_dir = storage / "reports"
    return {
        "step_s": round(step, 3),
        "page_s": round(page, 3),  # the parts above: what the page adds to the statistics
        "parts_s": {part: round(seconds, 3) for part, seconds in spent.most_common()},
        "page_bytes": (reports_dir / "index.html").stat().st_size,
        "plots_png_bytes": sum(path.stat().st_size for path in (reports_dir / "plots").glob("*.png")),
        "markdown_metadata_bytes": len(result.metadata["report"].value),  # what the UI's event log stores
    }


def main(argv: list[str] | None = None) -> None:
    storage, out = (argv or sys.argv[1:])[:2]
    Path(out).write_text(json.dumps(profile_report(Path(storage)), indent=2) + "\n")


if __name__ == "__main__":
    main()
