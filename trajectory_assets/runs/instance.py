"""Opening the Dagster instance of ``DAGSTER_HOME``, one process at a time.

The first process to open a fresh SQLite ``DAGSTER_HOME`` creates its databases and stamps
each with its Alembic revision. Two processes doing so at once (two CLI calls started by the
same cron minute, or a CLI call and its fork server's preload) race: measured here with four
processes opening one fresh home, most of them fail ("database is locked", "table already
exists"), and in two tries of five a database kept two revision rows, after which every open
of that home fails with "Version table 'alembic_version' has more than one head present".
Dagster does not guard this, so every open by this package holds an exclusive lock on a file
in ``DAGSTER_HOME`` while Dagster creates or checks the storage: a few hundred milliseconds
once, a few milliseconds afterwards. Runs themselves write concurrently, as Dagster allows.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import dagster as dg

LOCK_FILE = ".trajectory-assets-open.lock"


def open_instance() -> dg.DagsterInstance:
    """``DagsterInstance.get()``, serialized with every other open by this package on the same home."""
    home = Path(os.environ["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return dg.DagsterInstance.get()
