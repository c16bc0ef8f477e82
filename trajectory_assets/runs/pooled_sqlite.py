"""SQLite storage that keeps its connections: the project's instance class.

Dagster's SQLite run, event log and schedule storages call ``create_engine(..., poolclass=
NullPool)`` on every operation: a new engine, a new connection, SQLAlchemy's dialect set-up
queries, then ``dispose()``. That costs about 1.3 ms an operation, and an asset event takes two
or three (the run's own database, then the index). The subclasses here differ from Dagster's in
that one thing: each process keeps one engine per database file, with its pool of open
connections. The files, the schema, the migrations and the queries are Dagster's own (the
classes come from ``dagster_internals.sqlite_storage_parts``; ``tests/test_dagster_internals.py``
checks that the methods overridden here still open a connection per operation). Postgres
(deploy/postgres) pools its connections already and does not use this. What it saves is in
ARCHITECTURE.md ("Dagster's private API").

``PooledSqliteInstance`` is named in ``dagster_home/dagster.yaml``'s ``instance_class``.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg

from trajectory_assets import dagster_internals as internals


class PooledSqliteInstance(dg.DagsterInstance):
    """A Dagster instance whose default storage, when dagster.yaml has no ``storage:`` key, is
    ``PooledSqliteStorage`` in the instance's own folder, where Dagster's SQLite storage would
    be. An instance class (dagster.yaml's ``instance_class``), not a ``storage: custom:`` block,
    because only an instance class is told the folder of the dagster.yaml it was loaded from: a
    storage block would have to name it through ``DAGSTER_HOME``, and
    ``DagsterInstance.from_config(folder)`` would then write to whatever instance that variable
    named."""

    @classmethod
    def config_schema(cls) -> dict:
        return {}

    @staticmethod
    def config_defaults(base_dir: str) -> dict:
        return internals.instance_defaults(base_dir, storage=(__name__, "PooledSqliteStorage", {"base_dir": base_dir}))


class _Engines:
    """SQLAlchemy engines, one per SQLite file, for this process only.

    A forked child never uses (or closes) its parent's connections: SQLite forbids carrying an
    open connection across ``fork()``. It gets engines of its own, and the inherited ones are
    kept referenced so that garbage collection never closes them under the parent. At most
    ``capacity`` files stay open (a webserver reads one event database per run it shows); the
    least recently used engine is disposed beyond that.
    """

    def __init__(self, capacity: int = 16, **engine_args: Any):
        self._capacity = capacity
        self._engine_args = engine_args
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._engines: OrderedDict[str, Any] = OrderedDict()
        self._inherited: list[OrderedDict[str, Any]] = []

    def get(self, conn_string: str):
        with self._lock:
            self._adopt()
            engine = self._engines.get(conn_string)
            if engine is None:
                from sqlalchemy import create_engine

                # unbounded overflow: as many connections at once as NullPool allowed, and
                # five kept open between operations
                engine = create_engine(conn_string, max_overflow=-1, **self._engine_args)
                self._engines[conn_string] = engine
                while len(self._engines) > self._capacity:
                    self._engines.popitem(last=False)[1].dispose()
            self._engines.move_to_end(conn_string)
            return engine

    def dispose(self) -> None:
        with self._lock:
            self._adopt()
            for engine in self._engines.values():
                engine.dispose()
            self._engines = OrderedDict()

    def _adopt(self) -> None:
        """In a process forked since the engines were made: set the parent's aside, untouched."""
        if os.getpid() != self._pid:
            self._inherited.append(self._engines)
            self._engines, self._pid = OrderedDict(), os.getpid()


@contextmanager
def _transaction(engine) -> Iterator[Any]:
    with engine.connect() as conn:
        with conn.begin():
            yield conn


def _pooled_storage_classes():
    """The three pooled storages and the unified one, defined on first use so that importing
    this module does not import Dagster's storage modules (SQLAlchemy, Alembic)."""
    dagsters = internals.sqlite_storage_parts()
    internals.remember_migration_scripts()

    class KeptConnections:
        """``connect()`` of Dagster's SQLite run and schedule storages, on a kept engine."""

        _conn_string: str

        def __init__(self, *args, **kwargs):
            self._pooled_engines = _Engines()
            super().__init__(*args, **kwargs)

        @contextmanager
        def connect(self) -> Iterator[Any]:
            with _transaction(self._pooled_engines.get(self._conn_string)) as conn:
                yield conn

        def dispose(self) -> None:
            self._pooled_engines.dispose()
            super().dispose()

    class PooledSqliteRunStorage(KeptConnections, dagsters.runs):
        pass

    class PooledSqliteScheduleStorage(KeptConnections, dagsters.schedules):
        pass

    class PooledSqliteEventLogStorage(dagsters.event_logs):
        def __init__(self, base_dir: str, inst_data=None):
            self._pooled_engines = _Engines(connect_args={"timeout": dagsters.busy_timeout_s})
            super().__init__(base_dir, inst_data=inst_data)

        @contextmanager
        def _connect(self, shard: str) -> Iterator[Any]:
            # as Dagster's, one operation at a time per storage, less the engine per call
            with self._db_lock:
                engine = self._pooled_engines.get(self.conn_string_for_shard(shard))
                if shard not in self._initialized_dbs:
                    self._initdb(engine)
                    self._initialized_dbs.add(shard)
                with _transaction(engine) as conn:
                    yield conn

        def has_table(self, table_name: str) -> bool:
            # Asked of the index at every tagged asset event. The index is made ready first, as
            # a connection to it is: a process killed after SQLite created the file and before
            # Dagster created its tables leaves an empty index, which Dagster's start-up skips
            # (the file exists), so every later process would be told "no dynamic partitions
            # table" (tests/runs/test_instance.py). Not under the lock, which the caller may hold.
            index = dagsters.index_shard
            engine = self._pooled_engines.get(self.conn_string_for_shard(index))
            if index not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(index)
            with engine.connect() as conn:
                return bool(engine.dialect.has_table(conn, table_name))

        def wipe(self) -> None:
            # wiping deletes the database files: no connection may outlive them
            self._pooled_engines.dispose()
            super().wipe()

        def dispose(self) -> None:
            self._pooled_engines.dispose()
            super().dispose()

    class PooledSqliteStorage(dagsters.unified):
        """Dagster's SQLite storage, files and layout unchanged, with pooled connections."""

        def __init__(self, base_dir: str, inst_data=None):
            self.base_dir = base_dir
            self._run_storage = PooledSqliteRunStorage.from_local(dagsters.runs_directory(base_dir))
            self._event_log_storage = PooledSqliteEventLogStorage(dagsters.event_logs_directory(base_dir))
            self._schedule_storage = PooledSqliteScheduleStorage.from_local(dagsters.schedules_directory(base_dir))
            self._inst_data = inst_data
            super(dagsters.unified, self).__init__()

        @classmethod
        def from_config_value(cls, inst_data, config_value):
            return cls(config_value["base_dir"], inst_data=inst_data)

    PooledSqliteStorage.__module__ = __name__
    return PooledSqliteStorage


def __getattr__(name: str):
    # ``PooledSqliteStorage`` is looked up by name when Dagster opens the instance
    if name == "PooledSqliteStorage":
        globals()[name] = _pooled_storage_classes()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
