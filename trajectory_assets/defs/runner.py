"""Running the whole graph in-process (the CLI and the tests), as the UI's sensor would.

Batches are independent, so with ``workers > 1`` they run in parallel worker processes,
each executing the same ``ingest_rollout_batch`` job for its batch against a temporary
instance of its own (SQLite instance storage does not take concurrent writers). The
datasets job then runs once, in this process, against the caller's instance.
"""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import dagster as dg

from trajectory_assets import layout
from trajectory_assets.defs.automation import INGEST_JOB, MAIN_JOB
from trajectory_assets.defs.batches import read_summary
from trajectory_assets.io.storage import Storage


@dataclass
class BatchOutcome:
    key: str
    success: bool
    failure: str | None = None  # one line, when the batch run failed
    result: dg.ExecuteInProcessResult | None = None  # only when run in this process


@dataclass
class PipelineRun:
    batches: list[BatchOutcome] = field(default_factory=list)
    datasets_result: dg.ExecuteInProcessResult | None = None

    @property
    def success(self) -> bool:
        return all(b.success for b in self.batches) and bool(self.datasets_result and self.datasets_result.success)

    @property
    def results(self) -> list[dg.ExecuteInProcessResult]:
        """Every in-process result (batch runs done in workers are not among them)."""
        in_process = [b.result for b in self.batches if b.result is not None]
        return [*in_process, *([self.datasets_result] if self.datasets_result else [])]


def sync_batches(instance: dg.DagsterInstance, batches: list[str]) -> None:
    """Make the registered batch partitions exactly the given batches."""
    registered = set(instance.get_dynamic_partitions(layout.BATCH_PARTITIONS))
    for stale in sorted(registered - set(batches)):
        instance.delete_dynamic_partition(layout.BATCH_PARTITIONS, stale)
    missing = [key for key in batches if key not in registered]
    if missing:
        instance.add_dynamic_partitions(layout.BATCH_PARTITIONS, missing)


def failure_reason(result: dg.ExecuteInProcessResult) -> str:
    """The error raised by our code in the first failed step (under Dagster's wrappers), in one line."""
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        data = event.step_failure_data
        if data.user_failure_data is not None and data.user_failure_data.description:
            return f"{event.step_key}: {data.user_failure_data.description}"
        error = data.error
        # under Dagster's wrappers, and under the retry policy's "Exceeded max_retries"
        while error is not None and error.cause is not None and (
            error.cls_name.startswith("Dagster") or error.cls_name.startswith("RetryRequested")
        ):
            error = error.cause
        if error is not None:
            lines = error.message.strip().splitlines()
            return f"{event.step_key}: {lines[-1] if lines else error.cls_name}"
    return "unknown failure (rerun with --verbose)"


def unreadable_sources(store: Storage, batches: list[str]) -> list[tuple[str, str]]:
    """(URI, error) of every source that could not be read at all: its read failed before
    it gave a single record. A source that broke after some records is not among them (its
    records are kept; its failure is an ``unreadable_source`` quarantine row)."""
    return [
        (source["uri"], " ".join(str(source["error"]).split()))
        for source in read_summary(store, batches)["sources"]
        if source.get("error") and not source.get("records")
    ]


def _run_batch(defs: dg.Definitions, instance: dg.DagsterInstance, key: str, run_config) -> BatchOutcome:
    result = defs.resolve_job_def(INGEST_JOB).execute_in_process(
        run_config=run_config, instance=instance, partition_key=key, raise_on_error=False
    )
    return BatchOutcome(key, result.success, None if result.success else failure_reason(result), result)


_worker_defs: dg.Definitions | None = None


def _init_worker(defs: dg.Definitions) -> None:
    global _worker_defs
    _worker_defs = defs


def _run_batch_in_worker(job: tuple[str, dict | None]) -> BatchOutcome:
    key, run_config = job
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(layout.BATCH_PARTITIONS, [key])
        outcome = _run_batch(_worker_defs, instance, key, run_config)
    outcome.result = None  # results hold the instance; the outcome is what crosses back
    return outcome


def run_pipeline(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    batches: list[str],
    run_config: dict | None = None,
    workers: int = 1,
) -> PipelineRun:
    """One run per batch (a bad batch never blocks the others), then the datasets job."""
    sync_batches(instance, batches)
    run = PipelineRun()
    if workers > 1 and len(batches) > 1:
        # fork: the workers start with Dagster already imported and the definitions built
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(workers, len(batches)), mp_context=context,
                                 initializer=_init_worker, initargs=(defs,)) as pool:
            run.batches = list(pool.map(_run_batch_in_worker, [(key, run_config) for key in batches]))
    else:
        run.batches = [_run_batch(defs, instance, key, run_config) for key in batches]
    run.datasets_result = defs.resolve_job_def(MAIN_JOB).execute_in_process(
        run_config=run_config, instance=instance, raise_on_error=False
    )
    return run
