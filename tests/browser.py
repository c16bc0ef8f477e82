"""Debian's Chromium driven by Playwright (never a downloaded browser), for the UI and
report page tests: pages record every console error and dialog they raise."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT, in_ci

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = PROJECT_ROOT / "tests" / "artifacts"
# headless as root, and nothing but the page's own connections (this machine's network is closed)
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run", "--disable-quic"]

# Outside CI a machine without Chromium skips these tests with the reason; with CI set they run
# and `chromium_page` fails them, so CI can never pass them by skipping.
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists() and not in_ci(),
                                    reason="Debian's chromium is not installed (make test installs it)")


@dataclass
class Watched:
    """What a page did that a test must see: console errors, dialogs (alert, confirm, ...),
    uncaught exceptions, and requests (a self-contained page makes none but its own)."""

    console_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@contextlib.contextmanager
def chromium_page(width: int = 1400, height: int = 900) -> Iterator[tuple[object, Watched]]:
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"CI is set but Debian's chromium is not at {CHROMIUM} (make test installs it)", pytrace=False)
    ARTIFACTS.mkdir(exist_ok=True)
    watched = Watched()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", lambda message: message.type == "error" and watched.console_errors.append(message.text))
            page.on("pageerror", lambda error: watched.page_errors.append(str(error)))
            page.on("request", lambda request: watched.requests.append(request.url))

            def on_dialog(dialog) -> None:
                watched.dialogs.append(f"{dialog.type}: {dialog.message}")
                dialog.dismiss()

            page.on("dialog", on_dialog)
            yield page, watched
        finally:
            browser.close()
