"""How batches are grouped into runs: one rule for the sensor, the CLI and UI backfills.

A run pays a fixed start-up (a fork from a preloaded server, in the UI as in the CLI: about
0.25 s of CPU here), so one run per small file would spend most of its time starting. A run
takes a contiguous range of batch partitions instead. The batches of a tick (or of a CLI
call) go into one run when ingesting them is quick, else into ranges of about
``SECONDS_PER_RUN`` of estimated work each, and never fewer ranges than runs may run at once
(``ingest_runs``): how many runs there are follows the data, how many run at once follows the
machine, so a machine or a cluster with more run slots finishes the ingest sooner. The batch
step reports each batch's own events (``batch_events.py``), so grouping changes nothing that
the UI shows per batch.
"""

import math
import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from trajectory_assets.io.storage import Storage
from trajectory_assets.dagster_internals import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
    run_queue_limit,
)

# The jobs' names: here, not beside the jobs (automation.py), so that the CLI can launch
# them without importing the code location, which its code server already holds.
INGEST_JOB = "ingest_rollout_batch"
MAIN_JOB = "build_training_datasets"


def ingest_job_name(source: str) -> str:
    """The ingest job of a source (the environment's, named "", keeps its name)."""
    return f"ingest_{source}" if source else INGEST_JOB


def datasets_job_name(dataset: str) -> str:
    """The job that builds a dataset's exports and report."""
    return f"build_{dataset}" if dataset else MAIN_JOB


# the most batches one run takes (also the batch assets' backfill policy, for backfills
# launched from the UI): enough to amortise start-up, few enough that a failed run is cheap
# to redo and that a large backlog still spreads over every run slot
BATCHES_PER_RUN = 50
BATCHES_TAG = "trajectory/batches"  # every run that ingests batches names them
# What ingesting costs in one process, fitted to `python -m bench.executors`
# (docs/performance.md; with the instance's pooled SQLite storage): about 0.05 s per batch
# (Dagster records a materialization and check results per asset and batch; 0.11 s when each event
# opened its own connection) plus 0.012 s per MB of JSON lines. One process won the whole call
# at an estimate of 1.17 s (64 MB in 8 files), forking at 1.94 s (128 MB in 8 files) and 2.4 s
# (the 47 files of ../shared/corpus/nemo_gym): splitting starts between them.
INGEST_SECONDS_PER_BATCH = 0.05
INGEST_SECONDS_PER_MB = 0.012
SPLIT_FROM_SECONDS = 1.5
# Once split, a run holds about this much estimated work (a 64 MB file of the benchmark
# corpus is 0.82 s): the runs follow the data, not this machine's run slots, so a machine or a
# cluster with more slots than this one runs them all at once, and the longest chain of a
# datasets build starts with one file's ingest. A run's own start costs about 0.25 s of CPU
# here (forked from the CLI's server): measured in docs/performance.md.
SECONDS_PER_RUN = 0.8


def ingest_runs(batches: int, work_bytes: int, slots: int) -> int:
    """How many runs to spread ``batches`` batches holding ``work_bytes`` bytes of JSON lines
    over: one unless the ingest is long enough for more to pay, else one per
    ``SECONDS_PER_RUN`` of estimated work, and at least one per slot (``slots`` run at once).

    >>> ingest_runs(8, 64 * 10**6, slots=2), ingest_runs(16, 1049 * 10**6, slots=2)
    (1, 16)
    >>> ingest_runs(4, 4 * 400 * 10**6, slots=8)  # never more runs than batches
    4
    """
    estimate = batches * INGEST_SECONDS_PER_BATCH + work_bytes / 1e6 * INGEST_SECONDS_PER_MB
    if estimate < SPLIT_FROM_SECONDS:
        return 1
    return max(1, min(batches, max(slots, math.ceil(estimate / SECONDS_PER_RUN))))


def group_batches(order: Sequence[str], wanted: Collection[str], runs: int) -> list[list[str]]:
    """Ranges of ``order`` (the partitions as the instance orders them, which is how Dagster
    resolves a range) that hold exactly the ``wanted`` batches: the contiguous stretches of
    them, cut into pieces of equal size so that there are about ``runs`` pieces, none longer
    than ``BATCHES_PER_RUN``."""
    wanted = set(wanted)
    stretches: list[list[str]] = [[]]
    for key in order:
        if key in wanted:
            stretches[-1].append(key)
        elif stretches[-1]:
            stretches.append([])
    stretches = [stretch for stretch in stretches if stretch]
    total = sum(len(stretch) for stretch in stretches)
    size = max(1, min(BATCHES_PER_RUN, math.ceil(total / max(1, runs))))
    return [stretch[start:start + size] for stretch in stretches for start in range(0, len(stretch), size)]


def batch_run_tags(group: Sequence[str]) -> dict[str, str]:
    """The tags of a run of these batches: Dagster's partition (one batch) or partition range
    tags, and the batches by name."""
    if len(group) == 1:
        partition = {PARTITION_NAME_TAG: group[0]}
    else:
        partition = {ASSET_PARTITION_RANGE_START_TAG: group[0], ASSET_PARTITION_RANGE_END_TAG: group[-1]}
    return {**partition, BATCHES_TAG: ",".join(group)}


def run_slots(instance) -> int:
    """How many runs the instance lets run at once (its run queue's limit, in dagster.yaml);
    one per CPU where it sets none."""
    return run_queue_limit(instance) or os.cpu_count() or 1


@dataclass
class SourceCall:
    """One source of a call: its batches now, and those of them that need an ingest run."""

    name: str  # the source's (``""``: the environment's; an ad hoc call's namespace)
    storage: str
    batches: list[str]  # every batch of its files, as discovered now
    # key -> SourceFile: with it, a batch whose stored trajectories were made from its file as
    # it is now, by this code and config, is not ingested again (a declared source, which
    # other calls and the UI's sensor share); without, every batch is (an ad hoc call's)
    found: dict[str, Any] | None = None


@dataclass
class DatasetCall:
    """What one CLI call builds: a dataset of its sources."""

    dataset: str
    storage: str
    sources: list[SourceCall]
    call: str | None = None  # an ad hoc call's definitions (``definitions.call_settings``); None: the code location's

    @property
    def batches(self) -> list[str]:
        return sorted(key for source in self.sources for key in source.batches)

    def store(self) -> Storage:
        """The dataset's storage, reading each batch where its source keeps it."""
        from trajectory_assets.io.dataset_storage import DatasetStorage

        return DatasetStorage.reading(self.storage, {key: source.storage for source in self.sources
                                                     for key in source.batches})
