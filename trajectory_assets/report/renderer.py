"""vl-convert, the report's renderer, started ahead of the report step.

Its first chart in a process takes 0.3–0.5 s on this 2-core machine (it starts a JavaScript
runtime); the next ones about 20 ms. A CLI call that runs everything in its own process
(small inputs) starts it in a thread while the batches are ingested, so the report step
finds it running. vl-convert releases the GIL while it draws, so the thread takes nothing
from the main one but the other core.
"""

from __future__ import annotations

import threading

_POINT = {"data": {"values": [{"x": 0}]}, "mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}}}


def warm_up() -> threading.Thread:
    """Draws one point in a daemon thread and returns it. A failure is left to the report
    step, which meets it again and reports it as its own."""

    def draw() -> None:
        try:
            import vl_convert

            vl_convert.vegalite_to_svg(_POINT, allowed_base_urls=[])
        except Exception:  # noqa: BLE001 - the report step reports it
            pass

    thread = threading.Thread(target=draw, name="vl-convert warm-up", daemon=True)
    thread.start()
    return thread
