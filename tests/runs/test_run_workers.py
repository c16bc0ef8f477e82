"""The process recorded on a run (runs/run_workers.py): pure rules, no instance."""

from __future__ import annotations

import os
import socket

import dagster as dg

from trajectory_assets.runs.run_workers import (EXECUTOR_TAG, executor_alive, executor_tag, process_identity,
                                                recorded_executor)


def test_a_process_is_named_by_host_pid_and_start_time():
    identity = process_identity(os.getpid())
    host, pid, start = identity.split(":")
    assert (host, pid) == (socket.gethostname(), str(os.getpid())) and start.isdigit()
    assert process_identity(2**22 + 1) is None  # above Linux's largest pid


def test_whether_the_recorded_process_still_runs():
    me = process_identity(os.getpid())
    assert executor_alive(me) is True
    host, pid, start = me.split(":")
    assert executor_alive(f"{host}:{pid}:{int(start) + 1}") is False  # the pid, reused by a later process
    assert executor_alive(f"{host}:{2**22 + 1}:1") is False
    assert executor_alive(f"another-{host}:{pid}:{start}") is None  # another machine: not ours to judge
    assert executor_alive("None") is None  # what a system without /proc records


def test_a_tag_copied_from_the_run_a_re_execution_repeats_names_no_process():
    me = process_identity(os.getpid())
    run = dg.DagsterRun(job_name="job", run_id="run-2", tags=executor_tag(me, "run-1"))
    assert recorded_executor(run) is None
    assert recorded_executor(dg.DagsterRun(job_name="job", run_id="run-1", tags=executor_tag(me, "run-1"))) == me
    assert recorded_executor(dg.DagsterRun(job_name="job", run_id="run-1")) is None
    assert EXECUTOR_TAG in executor_tag(me, "run-1")
