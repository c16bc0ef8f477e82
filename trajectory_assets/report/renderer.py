"""vl-convert, the report's renderer, started ahead of the report step.

Its first chart in a process takes 0.3–0.5 s on this 2-core machine (it starts a JavaScript
runtime); the next ones about 20 ms. The report step starts it in a thread as it begins (its
statistics come before its plots), so the plots find it running: at 1 GB the step's own
plotting took 0.68–0.70 s instead of 0.95 s (``bench.report``). vl-convert releases the GIL
while it draws, so the thread takes nothing from the main one but the other core. (Started
by the CLI as a one-process call began, it made no difference to the call's wall time on the
bundled sample: six interleaved runs each way, 5.4–6.2 s.)
"""

from __future__ import annotations

import threading

_started: threading.Thread | None = None  # this process's warm-up, once
_POINT = {"data": {"values": [{"x": 0}]}, "mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}}}


def warm_up() -> threading.Thread:
    """Draws one point in a daemon thread and returns it (the one already started, if this
    process started one). A failure is left to the report step, which meets it again and
    reports it as its own."""
    global _started
    if _started is not None:
        return _started

    def draw() -> None:
        try:
            import vl_convert

            vl_convert.vegalite_to_svg(_POINT, allowed_base_urls=[])
        except Exception:  # noqa: BLE001 - the report step reports it
            pass

    _started = threading.Thread(target=draw, name="vl-convert warm-up", daemon=True)
    _started.start()
    return _started
