"""Running the whole graph in-process (the CLI and the tests), as the UI's sensor would.

Batches are independent, and so are the three export families (SFT, DPO, GRPO). With
``workers > 1`` they run in parallel worker processes, each executing the same job for its
batch, or the datasets job for its family's assets, against a temporary instance of its own
(SQLite instance storage does not take concurrent writers); the stats report then runs in
this process. With one worker everything runs here, against the caller's instance.
"""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import dagster as dg

from trajectory_assets import layout
from trajectory_assets.defs.automation import INGEST_JOB, MAIN_JOB
from trajectory_assets.defs.batches import read_summary
from trajectory_assets.defs.exports import EXPORT_KINDS
from trajectory_assets.io.storage import Storage
from trajectory_assets.memory import frozen_for_fork, release_memory


@dataclass
class RunOutcome:
    key: str  # the batch, or the datasets step ("datasets", "sft_exports", "stats_report")
    success: bool
    failure: str | None = None  # one line, when the run failed
    result: dg.ExecuteInProcessResult | None = None  # only when run in this process


@dataclass
class PipelineRun:
    batches: list[RunOutcome] = field(default_factory=list)
    datasets: list[RunOutcome] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return bool(self.datasets) and all(o.success for o in [*self.batches, *self.datasets])

    @property
    def first_failure(self) -> str | None:
        failed = next((o for o in [*self.batches, *self.datasets] if not o.success), None)
        if failed is None:
            return None
        return f"batch {failed.key}: {failed.failure}" if failed in self.batches else failed.failure

    @property
    def results(self) -> list[dg.ExecuteInProcessResult]:
        """Every in-process result (runs done in workers are not among them)."""
        return [o.result for o in [*self.batches, *self.datasets] if o.result is not None]


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
    it gave a single record, and not because the stream was cut. A source that was cut
    (wherever: even inside its first record) or broke after some records is not among them
    (what it held is kept; its failure is an ``unreadable_source`` quarantine row)."""
    return [
        (source["uri"], " ".join(str(source["error"]).split()))
        for source in read_summary(store, batches)["sources"]
        if source.get("error") and not source.get("records") and not source.get("truncated")
    ]


def _outcome(key: str, result: dg.ExecuteInProcessResult) -> RunOutcome:
    return RunOutcome(key, result.success, None if result.success else failure_reason(result), result)


def _run_batch(defs: dg.Definitions, instance: dg.DagsterInstance, key: str, run_config) -> RunOutcome:
    result = defs.resolve_job_def(INGEST_JOB).execute_in_process(
        run_config=run_config, instance=instance, partition_key=key, raise_on_error=False
    )
    return _outcome(key, result)


def _run_datasets(defs: dg.Definitions, instance: dg.DagsterInstance, key: str, assets: list[dg.AssetKey],
                  run_config) -> RunOutcome:
    result = defs.resolve_job_def(MAIN_JOB).execute_in_process(
        run_config=run_config, instance=instance, asset_selection=assets, raise_on_error=False
    )
    return _outcome(key, result)


_worker_defs: dg.Definitions | None = None


def _init_worker(defs: dg.Definitions) -> None:
    global _worker_defs
    _worker_defs = defs


def _in_worker(job: tuple[str, list[str], list[dg.AssetKey] | None, dict | None]) -> RunOutcome:
    """One batch (no assets given) or one family's exports, against a temporary instance."""
    key, batches, assets, run_config = job
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(layout.BATCH_PARTITIONS, batches)
        if assets is None:
            outcome = _run_batch(_worker_defs, instance, key, run_config)
        else:
            outcome = _run_datasets(_worker_defs, instance, key, assets, run_config)
    outcome.result = None  # results hold the instance; the outcome is what crosses back
    release_memory()  # before the worker's next job, so its peak does not stack on this one's leftovers
    return outcome


def _in_workers(defs: dg.Definitions, workers: int, jobs: list) -> list[RunOutcome]:
    """Runs the jobs in a pool of forked workers (they start with Dagster imported and the
    definitions built). A fresh pool per phase: the export workers do not carry what the
    ingest workers' memory still held."""
    context = multiprocessing.get_context("fork")
    with frozen_for_fork(), ProcessPoolExecutor(max(1, min(workers, len(jobs))), mp_context=context,
                                                initializer=_init_worker, initargs=(defs,)) as pool:
        return list(pool.map(_in_worker, jobs))


def dataset_steps(exports: list[str] | None = None) -> dict[str, list[dg.AssetKey]]:
    """The export families' steps -> the assets each materializes (all exports, or the given ones)."""
    steps: dict[str, list[dg.AssetKey]] = {}
    for kind in EXPORT_KINDS:
        if exports is None or kind.name in exports:
            steps.setdefault(f"{kind.family}_exports", []).append(dg.AssetKey(kind.asset_name))
    return steps


def run_pipeline(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    batches: list[str],
    run_config: dict | None = None,
    workers: int = 1,
    exports: list[str] | None = None,
) -> PipelineRun:
    """One run per batch (a bad batch never blocks the others), then the exports (all of
    them, or the given ones) and the stats report."""
    sync_batches(instance, batches)
    run = PipelineRun()
    steps = dataset_steps(exports)
    report = [dg.AssetKey("stats_report")]
    if workers > 1:
        run.batches = _in_workers(defs, workers, [(key, [key], None, run_config) for key in batches])
        if not all(outcome.success for outcome in run.batches):
            return run  # the exports need every batch
        run.datasets = _in_workers(defs, workers, [(step, batches, assets, run_config)
                                                   for step, assets in steps.items()])
        if all(outcome.success for outcome in run.datasets):
            run.datasets.append(_run_datasets(defs, instance, "stats_report", report, run_config))
    else:
        run.batches = [_run_batch(defs, instance, key, run_config) for key in batches]
        if all(outcome.success for outcome in run.batches):
            assets = [key for keys in steps.values() for key in keys] + report
            run.datasets = [_run_datasets(defs, instance, "datasets", assets, run_config)]
    return run
