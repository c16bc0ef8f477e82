"""Preloaded first by the CLI's fork server when it is started as a new interpreter
(``processes.start_fork_server``); a server forked from the CLI does the same itself:
``processes.enter_cli_session``."""

from trajectory_assets.runs.processes import enter_cli_session

enter_cli_session()
