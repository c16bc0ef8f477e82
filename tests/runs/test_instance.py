"""Processes opening one fresh DAGSTER_HOME at once: every one opens it, and each database
keeps a single Alembic revision (without the lock, most of them fail and some homes are
left unusable; see trajectory_assets/runs/instance.py)."""

import os
import sqlite3
import subprocess
import sys
import time

from tests.conftest import PROJECT_ROOT
from trajectory_assets.runs.instance import LOCK_FILE, open_instance

OPEN_AT = """
import time
from trajectory_assets.runs.instance import open_instance
while time.time() < {start}:
    time.sleep(0.001)
with open_instance():
    pass
"""


def test_processes_opening_a_fresh_home_together_all_succeed_and_leave_one_revision(tmp_path):
    for attempt in range(2):
        home = tmp_path / f"home{attempt}"
        home.mkdir()
        start = time.time() + 5  # after every process has imported Dagster
        processes = [
            subprocess.Popen([sys.executable, "-c", OPEN_AT.format(start=start)], cwd=PROJECT_ROOT,
                             env={**os.environ, "DAGSTER_HOME": str(home)}, stderr=subprocess.PIPE)
            for _ in range(4)
        ]
        errors = [process.communicate(timeout=120)[1].decode() for process in processes]
        assert [process.returncode for process in processes] == [0] * 4, errors
        for database in ("history/runs.db", "history/runs/index.db", "schedules/schedules.db"):
            with sqlite3.connect(home / database) as connection:
                (revisions,) = connection.execute("select count(*) from alembic_version").fetchone()
            assert revisions == 1, database


def test_a_home_where_the_lock_cannot_be_written_is_opened_without_it(tmp_path, monkeypatch):
    # the lock file's path is taken by a folder: opening it for writing fails, as on a read-only mount
    (tmp_path / LOCK_FILE).mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with open_instance() as instance:
        assert instance.get_runs() == []
    assert (tmp_path / "history" / "runs.db").is_file()


def test_an_index_left_empty_by_a_killed_process_is_made_ready_by_the_next(tmp_path):
    """A process killed after SQLite created the event log's index file and before Dagster
    created its tables leaves an empty file, which Dagster's start-up does not initialize (it
    exists): the next process must still register and read dynamic partitions."""
    import shutil

    import dagster as dg

    home = tmp_path / "home"
    (home / "history" / "runs").mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    (home / "history" / "runs" / "index.db").touch()  # what the killed process left
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("batches", ["a", "b"])
        assert instance.get_dynamic_partitions("batches") == ["a", "b"]
