"""The fork server (the CLI's, and the UI launcher's), and how the CLI takes Ctrl-C; nothing
here imports Dagster at import time, so the CLI can start a server before it imports the
code location.

The console script forks its server from itself once it has imported what a step needs
(:func:`fork_server_from_here`): the server, and every run and step forked from it, then
share the pages of one import with the CLI instead of holding a second one. Anywhere a fork
of the process is not known to be safe (another Python thread runs; the process has already
run steps or drawn plots, whose libraries may keep native threads; ``cli_fork_server``), the
server is started the standard library's way (:func:`start_fork_server`): a new interpreter
that imports the preload modules itself. The UI launcher always starts it that way (the
daemon that launches runs has many threads).
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import gc
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable

# What a fork server imports before it forks steps or runs (a module path, as Dagster's
# multiprocess executor takes it): the code location and the instance's storage modules.
STEP_PRELOAD = "trajectory_assets.runs.step_preload"


# The CLI's fork server: its processes leave the terminal's process group and die with the CLI
CLI_PRELOAD = ("trajectory_assets.runs.fork_server_session", STEP_PRELOAD)


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def enter_cli_session() -> None:
    """In the CLI's fork server: the server and every process it forks leave the terminal's
    process group, so a Ctrl-C reaches the CLI alone, which marks its runs canceling before it
    stops the forked runs and steps itself (none of them ends as an interrupted failure first);
    and every process it forks is killed when its parent exits (Linux's parent-death signal):
    the server exits when the CLI does, so a killed CLI leaves no forked run or step writing on
    without it (the next CLI call then fails the runs it left started)."""
    os.setpgrp()
    os.register_at_fork(after_in_child=_die_with_parent)


def start_fork_server(preload: tuple[str, ...] = CLI_PRELOAD) -> multiprocessing.context.BaseContext:
    """Starts this process's fork server (the one Dagster's multiprocess executor forks the
    datasets run's steps from, too) as a new interpreter preloaded with ``preload``: it
    imports in the background while this process goes on. Returns the context to fork from."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    with _sigint_mask_kept():
        multiprocessing.forkserver.ensure_running()
    return context


@contextlib.contextmanager
def _sigint_mask_kept():
    # starting the resource tracker unblocks SIGINT in this thread when it is done (it blocks
    # it while it spawns): keep what Interrupts blocked
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def cli_fork_server(from_here: bool) -> multiprocessing.context.BaseContext:
    """The CLI's fork server: forked from this process (``from_here``: it has imported what a
    step needs, ``step_imports.import_what_steps_need``) when that is safe, else started as a
    new interpreter. Only a process that exists for one call, and has run nothing
    yet, may fork its server from itself: a library that already ran in it may have left a
    native thread that does not survive a fork (a process that had drawn the report's plots
    hung in vl-convert's runtime when forked), and no check from Python sees that."""
    return (from_here and fork_server_from_here()) or start_fork_server()


def fork_server_from_here() -> multiprocessing.context.BaseContext | None:
    """Forks this process's fork server from this process, which has imported what a step
    needs (``step_imports.import_what_steps_need``): the standard library's own server loop
    (``multiprocessing.forkserver.main``), with nothing left to preload. Returns the context to
    fork from, or None (nothing started) when a Python thread other than this one and the
    interrupt thread (:class:`Interrupts`, which waits in ``sigwait`` and holds no lock) runs
    here: a fork copies only the calling thread, and a lock another thread held would stay
    locked in the server forever. (The native threads of OpenBLAS and of Arrow's jemalloc,
    which their imports start, are in a spawned server too when it forks: both libraries
    prepare their own state for a fork.)

    The standard library starts its server only by spawning; this one is registered where
    ``ensure_running`` looks for a running server (``ForkServer``'s address, alive descriptor
    and pid), so Dagster's multiprocess executor forks the datasets run's steps from it too,
    and ``stop_fork_server`` stops it."""
    if threading.current_thread() is not threading.main_thread() or _other_threads():
        return None
    server = multiprocessing.forkserver._forkserver
    context = multiprocessing.get_context("forkserver")
    with server._lock:
        if server._forkserver_pid is not None:  # already running (its call has not ended)
            return context
        with _sigint_mask_kept():
            multiprocessing.resource_tracker.ensure_running()  # the server's processes report to it
        listener = socket.socket(socket.AF_UNIX)
        address = multiprocessing.connection.arbitrary_address("AF_UNIX")
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _serve(listener, alive_r, alive_w)  # never returns
        os.close(alive_r)
        listener.close()
        server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid
    return context


def _serve(listener: socket.socket, alive_r: int, alive_w: int) -> None:
    """The forked server: serves until the CLI closes its end of the alive pipe (or exits),
    then leaves without running anything of the CLI's."""
    code = 1
    try:
        os.close(alive_w)
        enter_cli_session()
        # the CLI's sys.stdout may write to the terminal (its progress display) while its
        # descriptors 1 and 2 go to its log: a step writes where its descriptors go, as in a
        # server started by spawning
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # the steps take Dagster's SIGINT
        gc.freeze()  # see step_preload.py: a step's collections then never copy the import's pages
        multiprocessing.forkserver.main(listener.fileno(), alive_r, [])
    except SystemExit:  # the CLI closed the alive pipe
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def stop_fork_server() -> None:
    """Stops this process's fork server, if one runs, when a call that started it ends: it
    holds the environment and the open files of the call (a later call in the same process,
    with other settings, starts its own). The standard library's own tests stop it the same
    way; a CLI process that exits stops it anyway."""
    server = multiprocessing.forkserver._forkserver
    stop = getattr(server, "_stop", None)
    if stop is not None:
        stop()


_INTERRUPT_THREADS: set[threading.Thread] = set()  # Interrupts' threads running now


def _other_threads() -> list[threading.Thread]:
    """The Python threads of this process besides the main one and the interrupt threads."""
    return [thread for thread in threading.enumerate()
            if thread is not threading.main_thread() and thread not in _INTERRUPT_THREADS]


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
        _INTERRUPT_THREADS.add(self._thread)
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
        _INTERRUPT_THREADS.discard(self._thread)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
