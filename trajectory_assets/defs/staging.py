"""What a dataset's export steps hand each other, kept in the dataset's storage.

The plan step's shards and each shard step's summary are small JSON values passed through
an IO manager, :class:`StagingValues`. It keeps them under the dataset's root (not in
``DAGSTER_HOME``, as Dagster's default does), so a step running on another machine (a pod of
``k8s_job_executor``) reads what the step before it wrote, with no shared disk between them.
The plans and each shard's part of each export live beside them (``exports/shard_phase.py``).

A run's staging folder is removed by a later run's plan step once the run is over
(:func:`remove_finished_runs`): re-executing a failed run from its failure works until the
dataset runs again.
"""

from __future__ import annotations

import dagster as dg
import orjson

from trajectory_assets import layout
from trajectory_assets.io.storage import Storage

STAGING = "staging"
FINISHED = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


class StagingValues(dg.ConfigurableIOManager):
    """The small JSON outputs of a dataset's export steps, under ``root``'s staging folder."""

    root: str

    def handle_output(self, context: dg.OutputContext, obj: dict) -> None:
        Storage(self.root).write_bytes(_path(context), orjson.dumps(obj))

    def load_input(self, context: dg.InputContext) -> dict:
        return orjson.loads(Storage(self.root).read_bytes(_path(context.upstream_output)))


def _path(context: dg.OutputContext) -> str:
    """Where an output (of one mapping of a dynamic step, too) is kept: the run that made it
    (a re-execution reads its parent's), the step, the output."""
    run, step, output, *mapping = context.get_identifier()
    return layout.staging_value(run, step, "/".join([output, *mapping]))


def remove_finished_runs(store: Storage, instance: dg.DagsterInstance, current: str) -> list[str]:
    """Removes the staging folders of the dataset's runs that are over (or unknown to the
    instance), never those of the ``current`` run or of the runs it re-executes: a
    re-execution from failure loads what its ancestors' steps kept there (the report's part
    over the trajectories, made beside a plan step that failed); returns the runs removed."""
    kept = {current}
    run = instance.get_run_by_id(current)
    while run is not None and run.parent_run_id and run.parent_run_id not in kept:
        kept.add(run.parent_run_id)
        run = instance.get_run_by_id(run.parent_run_id)
    removed = []
    for run in store.folder_names(STAGING):
        if run in kept:
            continue
        record = instance.get_run_by_id(run)
        if record is None or record.status in FINISHED:
            store.remove_folder(layout.staging_run(run))
            removed.append(run)
    return removed
