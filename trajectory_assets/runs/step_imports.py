"""What a process sets up before it forks runs or steps: Arrow's allocator setting, the code
location and the instance's storage modules. A fork server started as a new interpreter does
it as it starts (``step_preload.py``); the CLI does it before it forks its server from itself
(``processes.fork_server_from_here``). Apart from ``processes.py``, which the assets' own code
reaches (through the UI's run launcher), so that importing the code location here does not
make every asset's code version depend on every module (``code_versions.py``)."""

from __future__ import annotations

import os

# How long Arrow's allocator (mimalloc) keeps memory it freed before handing it back to the
# system. It reads this when pyarrow loads, so a process that runs steps sets it before its
# first import of pyarrow, and the processes forked from it have it too. Its own default here
# is 1000 ms. At 0 (before) the steps faulted in again the pages of every chunk they read from
# Parquet: a run of every export on the 1 GB benchmark corpus took 2.0-2.5 s and 3.8-4.7 s of
# CPU more than at 10 ms (2.2-2.4 s of it system time), for 8-71 MiB less in each step's
# working set (docs/performance.md).
ARROW_PURGE_DELAY_MS = "10"


def set_arrow_purge_delay() -> None:
    """``ARROW_PURGE_DELAY_MS`` for this process's pyarrow, unless the environment sets one."""
    os.environ.setdefault("MIMALLOC_PURGE_DELAY", ARROW_PURGE_DELAY_MS)


def import_what_steps_need() -> None:
    """The code location, pandera's backends, the default redactor, and the instance's
    storage modules: each step connects to the instance (``DagsterInstance.from_ref``), which
    imports several hundred of them (SQLAlchemy, Alembic and Dagster's storages), 1.5 to 3 s
    of CPU per step when its server had not. Opening and closing the instance of
    ``DAGSTER_HOME`` imports exactly the ones it needs."""
    # Not the report's plots: Altair and vl-convert would take 0.2-0.5 s of CPU off the report
    # step (one per datasets run), but add 32 MiB to the memory of the whole tree, which the
    # 1 GB benchmark then took past 1 GiB (docs/performance.md).
    import trajectory_assets.definitions  # noqa: F401  (what the steps run)
    from trajectory_assets.runs.instance import open_instance

    register_contract_backends()
    build_default_redactor()
    if os.environ.get("DAGSTER_HOME"):
        with open_instance():  # connects to nothing that stays open
            pass


def register_contract_backends() -> None:
    """Pandera's pandas backends, which it imports and registers at a process's first
    validation: about 125 modules (its builtin checks import its Hypothesis strategies), 0.19 s
    of CPU in every forked step that checks a contract (each merge does) when its server had
    not. Validating a one-row frame against a schema with a column check registers what a
    ``DataFrameModel``'s validation would (``tests/runs/test_step_imports.py``)."""
    import pandas as pd
    import pandera.pandas as pa

    pa.DataFrameSchema({"x": pa.Column(int, pa.Check.ge(0))}).validate(pd.DataFrame({"x": [0]}))


def build_default_redactor() -> None:
    """The redactor of the default ``redaction`` config, kept by ``Redactor.from_config`` for
    the process: compiling its rules (Hyperscan's database, each rule's required literals) is
    0.13 s of CPU that every ingest run would pay again. A config with other rules builds its
    own in the run."""
    from trajectory_assets.config import RedactionConfig
    from trajectory_assets.redaction.redactor import Redactor

    Redactor.from_config(RedactionConfig())
