"""Preloaded first by the CLI's fork server (``processes.start_fork_server``):

- the server and every process it forks leave the terminal's process group: a Ctrl-C then
  reaches the CLI alone, which marks its runs canceling before it stops the forked runs and
  steps itself, so that none of them ends as an interrupted failure first;
- every process it forks is killed when its parent exits (Linux's parent-death signal): the
  server exits when the CLI does, so a killed CLI leaves no forked run or step writing on
  without it (the next CLI call then fails the runs it left started).
"""

import contextlib
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


os.setpgrp()
os.register_at_fork(after_in_child=_die_with_parent)
