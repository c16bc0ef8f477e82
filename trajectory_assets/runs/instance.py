"""Opening the Dagster instance of ``DAGSTER_HOME``, one process at a time.

The first process to open a fresh SQLite ``DAGSTER_HOME`` creates its databases and stamps
each with its Alembic revision. Two processes doing so at once (two CLI calls started by the
same cron minute, or a CLI call and its fork server's preload) race: measured here with four
processes opening one fresh home at the same instant, one to three of them failed in almost
every try (SQLAlchemy's operational and integrity errors, or an Alembic migration that found
no row to update), and in two tries of five a database kept two revision rows, after which
every open of that home fails with "Version table 'alembic_version' has more than one head
present". Dagster does not guard this, so every open by this package holds an exclusive lock
on a file in ``DAGSTER_HOME`` while Dagster creates or checks the storage: about 0.6 s once,
0.03 s afterwards. Runs themselves write concurrently, as Dagster allows. ``dagster dev``
does not take this lock: start it on a home that a CLI call has created, or before one.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import dagster as dg

LOCK_FILE = ".trajectory-assets-open.lock"


def open_instance() -> dg.DagsterInstance:
    """``DagsterInstance.get()``, serialized with every other open by this package on the same
    home. A home where the lock file cannot be written (a read-only mount of ``dagster.yaml``
    in a container, whose storage is then a database server) is opened without it: there is
    no local storage to create there."""
    home = Path(os.environ["DAGSTER_HOME"])
    try:
        lock = open(home / LOCK_FILE, "a")
    except OSError:
        return dg.DagsterInstance.get()
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return dg.DagsterInstance.get()
