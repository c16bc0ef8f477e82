"""The CLI's fork server (runs/processes.py), forked from a process that imported the code
location: what it forks shares that import, leaves the terminal's process group, and the
server stops with its call; with another thread running, nothing is forked. Each case runs
in a fresh interpreter (the server is forked from the process that asks for it), with no
DAGSTER_HOME, so no instance is opened."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import PROJECT_ROOT

SCRIPT = '''
import json, multiprocessing.forkserver, os, sys, threading, time
from trajectory_assets.runs import processes, step_imports


def report(sending):
    sending.send((os.getpid(), os.getppid(), os.getpgrp(), "trajectory_assets.definitions" in sys.modules))


if __name__ == "__main__":
    if sys.argv[1] == "thread":
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    step_imports.import_what_steps_need()
    context = processes.fork_server_from_here()
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    if context is None:
        print(json.dumps({"context": None, "server": server}))
        sys.exit(0)
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=report, args=(sending,))
    child.start()
    pid, parent, group, imported = receiving.recv()
    child.join()
    with open(f"/proc/{server}/stat", "rb") as stat:
        server_parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
    processes.stop_fork_server()
    print(json.dumps({"context": context.get_start_method(), "server": server, "server_parent": server_parent,
                      "child_parent": parent, "child_group": group, "imported": imported, "exit": child.exitcode,
                      "me": os.getpid(), "my_group": os.getpgrp(), "server_alive": os.path.exists(f"/proc/{server}"),
                      "after_stop": multiprocessing.forkserver._forkserver._forkserver_pid}))
'''


def run_script(tmp_path, mode: str) -> dict:
    script = tmp_path / "ask_for_a_server.py"
    script.write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    done = subprocess.run([sys.executable, str(script), mode], cwd=PROJECT_ROOT, env=env, capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout.decode().splitlines()[-1])


def test_the_server_is_forked_from_the_cli_and_what_it_forks_shares_its_import(tmp_path):
    seen = run_script(tmp_path, "alone")
    assert seen["context"] == "forkserver"  # Dagster's multiprocess executor forks its steps from the same server
    assert seen["server_parent"] == seen["me"]  # forked from the asking process, not a new interpreter
    assert seen["child_parent"] == seen["server"] and seen["exit"] == 0
    assert seen["imported"]  # the code location was already there: nothing imported it again
    assert seen["child_group"] != seen["my_group"]  # out of the terminal's group: Ctrl-C reaches the CLI alone
    assert seen["after_stop"] is None and not seen["server_alive"]  # stopped and reaped with its call


def test_with_another_thread_running_nothing_is_forked(tmp_path):
    """A fork copies the calling thread only: a lock another thread held would never be
    released in the server. The caller then starts a server as a new interpreter."""
    seen = run_script(tmp_path, "thread")
    assert seen == {"context": None, "server": None}


def test_the_standard_library_still_has_what_the_forked_server_registers_itself_in():
    """``fork_server_from_here`` runs ``forkserver.main`` and fills the private fields where
    ``ensure_running`` looks for a running server; ``stop_fork_server`` calls ``_stop``. A
    Python upgrade that renames one must fail here, not in a run."""
    import inspect
    import multiprocessing.forkserver as forkserver

    server = forkserver.ForkServer()
    for name in ("_lock", "_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_stop"):
        assert hasattr(server, name), f"multiprocessing.forkserver.ForkServer has no {name} any more"
    assert isinstance(forkserver._forkserver, forkserver.ForkServer), "no module-level _forkserver any more"
    parameters = list(inspect.signature(forkserver.main).parameters)
    assert parameters[:3] == ["listener_fd", "alive_r", "preload"], f"forkserver.main takes {parameters} now"
    source = inspect.getsource(forkserver.ForkServer.ensure_running)
    assert "self._forkserver_pid is not None" in source, "ensure_running no longer reuses a registered server"
