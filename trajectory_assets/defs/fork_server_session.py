"""Preloaded first by the CLI's fork server (``processes.start_fork_server``): the server
and every process it forks leave the terminal's process group. A Ctrl-C then reaches the
CLI alone, which marks its runs canceling before it stops the forked runs and steps
itself, so that none of them ends as an interrupted failure first."""

import os

os.setpgrp()
