"""vl-convert, the report's renderer, started ahead of the report step.

Its first chart in a process takes 0.3–0.5 s on this 2-core machine (it starts a JavaScript
runtime); the next ones about 20 ms. A CLI call that runs everything in its own process
(small inputs) starts it in a thread while the batches are ingested, and the report step,
in any process, as it starts (its statistics come before its plots), so the plots find it
running. vl-convert releases the GIL while it draws, so the thread takes nothing from the
main one but the other core.
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
