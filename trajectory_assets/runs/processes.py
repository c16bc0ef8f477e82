"""The fork server (the CLI's, and the UI launcher's), and how the CLI takes Ctrl-C; nothing
here imports Dagster, so the CLI starts the server before it imports the code location."""

from __future__ import annotations

import _thread
import multiprocessing
import multiprocessing.forkserver
import signal
import threading
import traceback
from collections.abc import Callable

# What a fork server imports before it forks steps or runs (a module path, as Dagster's
# multiprocess executor takes it): the code location and the instance's storage modules.
STEP_PRELOAD = "trajectory_assets.runs.step_preload"


# The CLI's fork server: its processes leave the terminal's process group and die with the CLI
CLI_PRELOAD = ("trajectory_assets.runs.fork_server_session", STEP_PRELOAD)


def start_fork_server(preload: tuple[str, ...] = CLI_PRELOAD) -> multiprocessing.context.BaseContext:
    """Starts this process's fork server (the one Dagster's multiprocess executor forks the
    datasets run's steps from, too), preloaded with ``preload``: it imports in the
    background while this process goes on. Returns the context to fork from."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    # starting the resource tracker unblocks SIGINT in this thread when it is done (it blocks
    # it while it spawns): keep what Interrupts blocked
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return context


def stop_fork_server() -> None:
    """Stops this process's fork server, if one runs, when a call that started it ends: it
    holds the environment and the open files of the call (a later call in the same process,
    with other settings, starts its own). The standard library's own tests stop it the same
    way; a CLI process that exits stops it anyway."""
    server = multiprocessing.forkserver._forkserver
    stop = getattr(server, "_stop", None)
    if stop is not None:
        stop()


class Interrupts:
    """Takes SIGINT in a thread of its own (every other thread of the process blocks it), so
    that runs are marked canceling before anything is interrupted: ``on_interrupt`` runs
    first, then the main thread gets a ``KeyboardInterrupt`` (or, during a run, Dagster's
    interrupt, which then ends the run CANCELED). Enter it before the process starts any
    other thread: a thread inherits the block from the thread that starts it. A second
    Ctrl-C interrupts the main thread again without waiting."""

    def __init__(self) -> None:
        self.received = False
        self.on_interrupt: Callable[[], None] = lambda: None
        self._closing = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Interrupts:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        self._thread = threading.Thread(target=self._wait, name="interrupts", daemon=True)
        self._thread.start()
        return self

    def _wait(self) -> None:
        while True:
            signal.sigwait({signal.SIGINT})
            if self._closing:
                return
            if not self.received:
                self.received = True
                try:
                    self.on_interrupt()
                except Exception:  # the interrupt must reach the main thread anyway
                    traceback.print_exc()
            _thread.interrupt_main(signal.SIGINT)

    def __exit__(self, *exc_info) -> None:
        self._closing = True
        signal.pthread_kill(self._thread.ident, signal.SIGINT)
        self._thread.join()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
