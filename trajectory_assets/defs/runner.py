"""Running the whole graph in-process (the CLI and the tests), as the UI's sensor would."""

from dataclasses import dataclass, field

import dagster as dg

from trajectory_assets import layout
from trajectory_assets.defs.automation import INGEST_JOB, MAIN_JOB


@dataclass
class PipelineRun:
    batch_results: dict[str, dg.ExecuteInProcessResult] = field(default_factory=dict)
    datasets_result: dg.ExecuteInProcessResult | None = None

    @property
    def success(self) -> bool:
        return all(r.success for r in self.batch_results.values()) and bool(
            self.datasets_result and self.datasets_result.success
        )

    @property
    def results(self) -> list[dg.ExecuteInProcessResult]:
        return [*self.batch_results.values(), *([self.datasets_result] if self.datasets_result else [])]


def sync_batches(instance: dg.DagsterInstance, batches: list[str]) -> None:
    """Make the registered batch partitions exactly the given batches."""
    registered = set(instance.get_dynamic_partitions(layout.BATCH_PARTITIONS))
    for stale in sorted(registered - set(batches)):
        instance.delete_dynamic_partition(layout.BATCH_PARTITIONS, stale)
    missing = [key for key in batches if key not in registered]
    if missing:
        instance.add_dynamic_partitions(layout.BATCH_PARTITIONS, missing)


def run_pipeline(
    defs: dg.Definitions, instance: dg.DagsterInstance, batches: list[str], run_config: dict | None = None
) -> PipelineRun:
    """One run per batch (a bad batch never blocks the others), then the datasets job."""
    sync_batches(instance, batches)
    run = PipelineRun()
    ingest_job = defs.resolve_job_def(INGEST_JOB)
    for key in batches:
        run.batch_results[key] = ingest_job.execute_in_process(
            run_config=run_config, instance=instance, partition_key=key, raise_on_error=False
        )
    run.datasets_result = defs.resolve_job_def(MAIN_JOB).execute_in_process(
        run_config=run_config, instance=instance, raise_on_error=False
    )
    return run
