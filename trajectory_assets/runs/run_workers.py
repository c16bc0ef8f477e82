"""The process that executes a run, as recorded on the run (the CLI's runs and the runs
``launcher.py`` forks), and how a run its process left unfinished is ended.

A run executed by one of this package's processes carries ``EXECUTOR_TAG``:
``"<host>:<pid>:<process start time> <run id>"``. The start time tells a reused pid apart;
the run's id tells the run apart from a re-execution of it launched from the UI, which copies
its tags. A run whose process is gone while the run is unfinished is ended here: failed, or
canceled if it was being canceled.
"""

from __future__ import annotations

import socket

import dagster as dg

from trajectory_assets import dagster_internals as internals

EXECUTOR_TAG = "trajectory/executed_by"
UNFINISHED = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
              dg.DagsterRunStatus.CANCELING]


def process_identity(pid: int) -> str | None:
    """``<host>:<pid>:<start time>`` of a live process on this machine (None: gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            start = stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None
    return f"{socket.gethostname()}:{pid}:{start}"


def executor_tag(identity: str, run_id: str) -> dict[str, str]:
    """The tag that records ``identity`` (``process_identity``) as the process executing ``run_id``."""
    return {EXECUTOR_TAG: f"{identity} {run_id}"}


def recorded_executor(run: dg.DagsterRun) -> str | None:
    """The identity of the process recorded as executing ``run`` (None: none is, or the tag
    was copied from the run this one re-executes)."""
    executor, _, run_id = run.tags.get(EXECUTOR_TAG, "").partition(" ")
    return executor if executor and run_id == run.run_id else None


def executor_alive(executor: str) -> bool | None:
    """Whether the recorded process still runs (None: it is on another machine, or the tag
    names none, as on a system without ``/proc``)."""
    host, _, rest = executor.partition(":")
    pid, _, _ = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    return process_identity(int(pid)) == executor


def end_unfinished(instance: dg.DagsterInstance, run_id: str, message: str) -> bool:
    """Ends the run if it is unfinished: canceled if it was being canceled, else failed.
    Whether it was unfinished."""
    current = instance.get_run_by_id(run_id)
    if current is None or current.status not in UNFINISHED:
        return False
    if current.status == dg.DagsterRunStatus.CANCELING:
        internals.mark_run_canceled(instance, current, message)
    else:
        internals.mark_run_failed(instance, current, message)
    return True


def fail_abandoned_runs(instance: dg.DagsterInstance) -> list[str]:
    """Ends the runs a process on this machine started and left unfinished when it died:
    failed (canceled if they were being canceled). Returns their ids."""
    ended = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=UNFINISHED)):
        executor = recorded_executor(record.dagster_run)
        if executor is None or executor_alive(executor) is not False:
            continue  # not ours (a UI run, maybe one that copied the tag), elsewhere, or still running it
        if end_unfinished(instance, record.dagster_run.run_id,
                          f"the process that ran it ({executor}) exited without ending it"):
            ended.append(record.dagster_run.run_id)
    return ended
