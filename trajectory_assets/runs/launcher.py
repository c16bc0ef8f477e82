"""The runs that the UI and its daemon launch (a sensor's, the automation's, a click on
Materialize), forked from a server that already imported the code location.

Dagster's default launcher asks the code server to start each run. The code server spawns a
new interpreter, which imports the code location and the instance's storage modules before
the run starts, and the run queue waits for that before it launches the next run: 2.0 to
3.4 s a run on this machine (``python -m bench.ui --compare-launcher``), paid by every run.

``PreloadedRunLauncher`` (below, named in ``dagster_home/dagster.yaml``) hands the runs of
this project's code location to ``LaunchedRuns``, in the process that launches them (the
daemon's run queue):

- one fork server, started at the first launch and preloaded with what a step needs
  (``step_preload.py``: the code location and the instance's storage modules), forks a
  process per run, which executes the run as a run worker would (Dagster's
  ``execute_run_iterator``, through ``dagster_internals.execute_recorded_run``);
- the launch returns once that process has loaded the run's job and recorded itself on the
  run (``run_workers.EXECUTOR_TAG``): a run that cannot load fails to launch, as with
  Dagster's launcher;
- a thread waits for each forked run; a run whose process exits without ending it is failed
  (canceled if it was being canceled). If the launching process is gone by then, the next
  CLI call on this machine does it (``run_workers.fail_abandoned_runs``), and so does Dagster's
  run monitoring, when it is on: the launcher's ``check_run_worker_health`` looks for the
  recorded process;
- terminating a run (the UI's Terminate) marks it canceling and sends its process SIGTERM,
  which Dagster takes as an interrupt: the run ends CANCELED;
- the server is started again when a source file of the project or the config file
  (``TRAJECTORY_CONFIG``) changed since it imported them (``code_stamp``), so a run executes
  the code on disk, as a spawned run worker would.

Any other run (another code location, another interpreter, a location whose ``.env`` sets
variables that the preloaded import did not see, a system without ``/proc``) goes to Dagster's
launcher unchanged.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import dagster as dg

from trajectory_assets import PROJECT_ROOT
from trajectory_assets import dagster_internals as internals
from trajectory_assets.runs.processes import STEP_PRELOAD, start_fork_server, stop_fork_server
from trajectory_assets.runs.run_workers import (end_unfinished, executor_alive, executor_tag, process_identity,
                                                recorded_executor)

CODE_LOCATION_MODULE = "trajectory_assets.definitions"
# how long a forked run may take to load its job and record itself before its launch fails:
# the first launch also waits for the fork server's preload (a few seconds)
READY_TIMEOUT_S = 120
PACKAGES = ("trajectory_assets", "schemas")


def code_stamp() -> tuple:
    """What the code location is made of on disk: every source file of the project's
    packages and the config file, each with its modification time and size (a few
    milliseconds; compared at every launch)."""
    files = sorted(path for package in PACKAGES for path in (PROJECT_ROOT / package).rglob("*.py"))
    config = os.environ.get("TRAJECTORY_CONFIG")
    if config:
        files.append(Path(config))
    stamp = []
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            stamp.append((str(path), None, None))
            continue
        stamp.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(stamp)


def _execute_launched_run(instance_ref: Any, run_id: str, ready: multiprocessing.connection.Connection) -> None:
    """The forked process of one run: loads its job, records itself on the run, tells the
    launcher, then executes the run. SIGTERM interrupts it (Dagster's interrupt)."""
    try:
        instance = internals.instance_from_ref(instance_ref)
        run = instance.get_run_by_id(run_id)
        job = internals.run_reconstructable_job(run)
        instance.add_run_tags(run_id, executor_tag(process_identity(os.getpid()), run_id))
    except Exception:
        ready.send(traceback.format_exc())
        raise
    ready.send(None)
    ready.close()
    with instance:
        for _ in internals.execute_recorded_run(job, run, instance):
            pass


class LaunchedRuns:
    """The launching process's fork server, and the runs it forked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forks: multiprocessing.context.BaseContext | None = None
        self._stamp: tuple | None = None

    @staticmethod
    def why_not_here(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str | None:
        """Why the run must go to Dagster's launcher instead (None: it can be forked here)."""
        target = internals.run_python_target(run)
        if target is None:
            return "its code is not a module that a code server loaded"
        executable, module, location = target
        if module != CODE_LOCATION_MODULE:
            return f"its code location is {module}, not {CODE_LOCATION_MODULE}"
        if os.path.abspath(executable) != os.path.abspath(sys.executable):
            return f"its code location runs on {executable}, not this process's {sys.executable}"
        if internals.location_env(instance, location):
            return f"the instance sets environment variables for {location} (.env)"
        if process_identity(os.getpid()) is None:
            return "this system has no /proc, by which the launcher tells a run's process apart"
        return None

    def _fork_server(self) -> multiprocessing.context.BaseContext:
        stamp = code_stamp()
        if self._forks is None or stamp != self._stamp:
            if self._forks is not None:
                stop_fork_server()  # its runs go on; the next ones import the code on disk
            self._forks, self._stamp = start_fork_server(preload=(STEP_PRELOAD,)), stamp
        return self._forks

    def launch(self, instance: dg.DagsterInstance, run: dg.DagsterRun) -> None:
        """Forks the run's process; returns once it has loaded the run's job (raises
        ``LaunchFailed`` if it could not)."""
        with self._lock:  # one launch at a time: the server is shared
            forks = self._fork_server()
            receiving, sending = forks.Pipe(duplex=False)
            child = forks.Process(target=_execute_launched_run, name=f"run {run.run_id[:8]}",
                                  args=(internals.instance_ref(instance), run.run_id, sending))
            try:
                child.start()
            except (OSError, EOFError) as error:  # the server is gone (its preload crashed?): start a new one next
                receiving.close()
                sending.close()
                self.dispose()
                raise LaunchFailed(f"the fork server could not fork the run: {error!r}") from None
        sending.close()
        with receiving:
            try:
                error = receiving.recv() if receiving.poll(READY_TIMEOUT_S) else f"no answer in {READY_TIMEOUT_S} s"
            except EOFError:  # it died before it could answer
                child.join()
                error = f"its process exited with code {child.exitcode}"
        if error is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            child.join()
            raise LaunchFailed(f"the run's process could not start it: {error}")
        threading.Thread(target=self._watch, args=(instance, run.run_id, child), daemon=True,
                         name=f"watch run {run.run_id[:8]}").start()

    @staticmethod
    def _watch(instance: dg.DagsterInstance, run_id: str, child: multiprocessing.process.BaseProcess) -> None:
        """Waits for the run's process; ends the run if the process left it unfinished."""
        child.join()
        run = instance.get_run_by_id(run_id)
        if run is None:  # deleted meanwhile
            return
        executor = recorded_executor(run)
        exited = f"exited with code {child.exitcode}"
        # a fork server stopped for new code reports its runs as exited: wait for the process itself
        while executor is not None and executor_alive(executor):
            exited = "exited"  # with a code only its server knew
            time.sleep(1)
        end_unfinished(instance, run_id, f"the process that ran it ({executor}) {exited} without ending it")

    @staticmethod
    def terminate(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool | None:
        """Marks the run canceling and interrupts its process; a run whose process is gone is
        ended CANCELED at once. None: no process of this machine was recorded as running it
        (Dagster's launcher terminates it)."""
        executor = recorded_executor(run)
        alive = executor_alive(executor) if executor is not None else None
        if alive is None:
            return None
        internals.mark_run_canceling(instance, run, "terminated from the UI")
        if alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(executor.split(":")[1]), signal.SIGTERM)
        else:
            end_unfinished(instance, run.run_id, f"terminated; the process that ran it ({executor}) was gone")
        return True

    def dispose(self) -> None:
        if self._forks is not None:
            stop_fork_server()
            self._forks = None


class LaunchFailed(Exception):
    pass


class PreloadedRunLauncher(dg.DefaultRunLauncher):
    """Dagster's default run launcher, except that the runs of this project's code location
    are forked from a server that already imported it (``LaunchedRuns``): a launch takes a
    fork, not a new interpreter that imports the code location. Named in dagster.yaml's
    ``run_launcher``."""

    def __init__(self, inst_data=None):
        super().__init__(inst_data=inst_data)
        self._forked = LaunchedRuns()

    def launch_run(self, context) -> None:
        run = context.dagster_run
        reason = self._forked.why_not_here(self._instance, run)
        if reason is not None:
            self._instance.report_engine_event(f"Launched through the code server: {reason}.", run, cls=type(self))
            return super().launch_run(context)
        try:
            self._forked.launch(self._instance, run)
        except LaunchFailed as error:
            raise internals.launch_failed(str(error)) from None
        internals.track_launched_run(self, run.run_id)  # what join() waits for

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        handled = self._forked.terminate(self._instance, run)
        return super().terminate(run_id) if handled is None else handled

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun):
        executor = recorded_executor(run)
        alive = executor_alive(executor) if executor is not None else None
        if alive is None:  # as for Dagster's launcher, which checks none: run monitoring fails any other status
            return internals.run_worker_health(True, "not forked by this launcher on this machine: "
                                               "its process is not checked")
        return internals.run_worker_health(alive, None if alive else f"its process ({executor}) is gone")

    def dispose(self) -> None:
        self._forked.dispose()
        super().dispose()
