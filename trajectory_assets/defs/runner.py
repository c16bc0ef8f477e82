"""The CLI's runs, through the instance: the UI's jobs, launched by the instance's own run
launcher from a code server of the project's code location (``workspace.yaml``), and
recorded in ``DAGSTER_HOME`` like any run started from the UI.

The batches become runs of the ingest job, each a range of batches (``run_plan.py``), as
many at once as the instance's run queue allows; when every one has succeeded, one run of
the datasets job builds the exports (its family steps in parallel processes) and the
report. The sources, storage and config of the call go into each run's config, so the
runs say in the UI what they read and wrote, and the code location needs no environment.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
from dagster._core.events import DagsterEventType
from dagster._core.remote_representation.external import RemoteJob, RemoteRepository
from dagster._core.storage.dagster_run import DagsterRunStatus
from dagster._core.workspace.context import BaseWorkspaceRequestContext, WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster._core.definitions.selector import JobSubsetSelector

from trajectory_assets import PROJECT_ROOT, layout
from trajectory_assets.defs.retries import initialize_storage_pool
from trajectory_assets.defs.run_plan import INGEST_JOB, MAIN_JOB, batch_run_tags, group_batches
from trajectory_assets.io.storage import Storage

WORKSPACE = PROJECT_ROOT / "workspace.yaml"
POLL_SECONDS = 0.5
FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


@dataclass
class RunOutcome:
    label: str  # what the run did: "batches a .. b (n)", or "datasets"
    run_id: str
    success: bool
    failure: str | None = None  # one line, when the run failed


@dataclass
class PipelineRun:
    batches: list[RunOutcome] = field(default_factory=list)
    datasets: list[RunOutcome] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return bool(self.datasets) and all(o.success for o in [*self.batches, *self.datasets])

    @property
    def first_failure(self) -> str | None:
        return next((o.failure for o in [*self.batches, *self.datasets] if not o.success), None)

    @property
    def run_ids(self) -> list[str]:
        return [o.run_id for o in [*self.batches, *self.datasets]]


class Progress:
    """What the runs report while they go (the CLI shows it; the default shows nothing)."""

    def batches_started(self, total: int) -> None: ...

    def batch_done(self, key: str, records: int) -> None: ...

    def export_written(self, name: str, rows: int, uri: str | None) -> None: ...


def sync_batches(instance: dg.DagsterInstance, batches: list[str]) -> None:
    """Make the registered batch partitions exactly the given batches."""
    registered = set(instance.get_dynamic_partitions(layout.BATCH_PARTITIONS))
    for stale in sorted(registered - set(batches)):
        instance.delete_dynamic_partition(layout.BATCH_PARTITIONS, stale)
    missing = [key for key in batches if key not in registered]
    if missing:
        instance.add_dynamic_partitions(layout.BATCH_PARTITIONS, missing)


def failure_reason(instance: dg.DagsterInstance, run_id: str) -> str:
    """The error raised by our code in the run's first failed step (under Dagster's wrappers),
    or why the run itself failed, in one line."""
    for record in instance.all_logs(run_id, of_type=DagsterEventType.STEP_FAILURE):
        event = record.dagster_event
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
    for record in instance.all_logs(run_id, of_type=DagsterEventType.RUN_FAILURE):
        return " ".join((record.message or "the run failed").split())
    return "unknown failure (rerun with --verbose)"


def unreadable_sources(store: Storage, batches: list[str]) -> list[tuple[str, str]]:
    """(URI, error) of every source that could not be read at all: its read failed before
    it gave a single record, and not because the stream was cut. A source that was cut
    (wherever: even inside its first record) or broke after some records is not among them
    (what it held is kept; its failure is an ``unreadable_source`` quarantine row)."""
    summaries = [store.read_json(layout.batch_summary(key)) for key in batches]
    return [
        (source["uri"], " ".join(str(source["error"]).split()))
        for summary in summaries
        for source in summary["sources"]
        if source.get("error") and not source.get("records") and not source.get("truncated")
    ]


@contextlib.contextmanager
def _inherited_output(log: Path | None) -> Iterator[None]:
    """Processes started inside the block write their stdout and stderr to ``log`` (None:
    to ours). The code server and the run processes it starts keep what they inherit."""
    if log is None:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log, "ab") as target:
        os.dup2(target.fileno(), 1)
        os.dup2(target.fileno(), 2)
        try:
            yield
        finally:
            for fd, original in zip((1, 2), saved):
                os.dup2(original, fd)
                os.close(original)


@contextlib.contextmanager
def code_location(instance: dg.DagsterInstance, log_level: str,
                  log: Path | None = None) -> Iterator[tuple[BaseWorkspaceRequestContext, str]]:
    """A code server of the project's code location (as ``dagster dev -w workspace.yaml``
    loads it), and the location's name. The server's output and its runs' (Dagster's own
    logging, warnings) go to ``log`` when one is given."""
    with _inherited_output(log):
        process = WorkspaceProcessContext(instance, WorkspaceFileTarget(paths=[str(WORKSPACE)]),
                                          code_server_log_level=log_level)
    with process:
        workspace = process.create_request_context()
        (name,) = workspace.code_location_names
        error = workspace.get_code_location_error(name)
        if error is not None:
            raise RuntimeError(f"the code location {name} does not load: {error.message.strip().splitlines()[-1]}")
        yield workspace, name


class _Launcher:
    def __init__(self, instance: dg.DagsterInstance, workspace: BaseWorkspaceRequestContext, location_name: str,
                 run_config: dict) -> None:
        self.instance, self.workspace, self.run_config = instance, workspace, run_config
        self.location = workspace.get_code_location(location_name)
        (self.repository,) = self.location.get_repositories().values()
        self.plans: dict[tuple, tuple] = {}
        self.launched: list[str] = []

    def _plan(self, job_name: str, assets: list[dg.AssetKey] | None) -> tuple:
        """The job subset and its execution plan, asked of the code server once per selection
        (every ingest run has the same plan; only its tags differ)."""
        key = (job_name, tuple(assets or ()))
        if key not in self.plans:
            remote_job: RemoteJob = self.location.get_job(JobSubsetSelector(
                location_name=self.location.name, repository_name=self.repository.name, job_name=job_name,
                op_selection=None, asset_selection=assets,
            ))
            plan = self.location.get_execution_plan(remote_job, self.run_config, step_keys_to_execute=None,
                                                    known_state=None, instance=self.instance)
            self.plans[key] = (remote_job, plan.execution_plan_snapshot)
        return self.plans[key]

    def launch(self, job_name: str, tags_of_runs: list[dict[str, str]], assets: list[dg.AssetKey] | None = None
               ) -> list[str]:
        """Creates a run per tag set as the UI's launch does (job subset, execution plan,
        origins) and hands them to the instance's run launcher together: a launch returns
        once its run's process has imported the code location (about 1.5 s here), so runs
        launched one after the other would each wait for the one before."""
        repository: RemoteRepository = self.repository
        remote_job, plan = self._plan(job_name, assets)
        run_ids = []
        for tags in tags_of_runs:
            run = self.instance.create_run(
                job_name=job_name, run_id=None, run_config=self.run_config, resolved_op_selection=None,
                step_keys_to_execute=plan.step_keys_to_execute, op_selection=None,
                status=DagsterRunStatus.NOT_STARTED, root_run_id=None, parent_run_id=None,
                tags={**remote_job.tags, **tags}, job_snapshot=remote_job.job_snapshot,
                execution_plan_snapshot=plan, parent_job_snapshot=remote_job.parent_job_snapshot,
                asset_selection=frozenset(assets) if assets else None, asset_check_selection=None,
                remote_job_origin=remote_job.get_remote_origin(), job_code_origin=remote_job.get_python_origin(),
                asset_graph=repository.asset_graph,
            )
            self.launched.append(run.run_id)
            run_ids.append(run.run_id)
        with ThreadPoolExecutor(len(run_ids), thread_name_prefix="launch") as launches:
            for launched in [launches.submit(self.instance.launch_run, run_id, self.workspace) for run_id in run_ids]:
                launched.result()  # a launch that failed raises here
        return run_ids

    def terminate_unfinished(self) -> None:
        """Stops the runs still going (the CLI was interrupted or failed)."""
        for run_id in self.launched:
            if self.instance.get_run_by_id(run_id).status not in FINISHED:
                self.instance.run_launcher.terminate(run_id)


class _Watcher:
    """Follows runs through their events in the instance, for progress and completion."""

    def __init__(self, instance: dg.DagsterInstance, progress: Progress) -> None:
        self.instance, self.progress = instance, progress
        self.cursors: dict[str, str | None] = {}

    def poll(self, run_id: str) -> bool:
        """Reports the run's new materializations; whether it has finished."""
        finished = self.instance.get_run_by_id(run_id).status in FINISHED  # read first: no event is missed
        connection = self.instance.get_records_for_run(
            run_id, cursor=self.cursors.get(run_id), of_type=DagsterEventType.ASSET_MATERIALIZATION, limit=1000
        )
        self.cursors[run_id] = connection.cursor
        for record in connection.records:
            materialization = record.event_log_entry.asset_materialization
            name, metadata = materialization.asset_key.to_user_string(), materialization.metadata
            if name == "validated_trajectories":
                self.progress.batch_done(materialization.partition, metadata["records_read"].value)
            elif name.endswith("_dataset"):
                uri = metadata.get("dagster/uri")
                self.progress.export_written(name.removesuffix("_dataset"), metadata["dagster/row_count"].value,
                                             uri.value if uri else None)
        return finished and not connection.has_more

    def wait(self, run_ids: list[str], on_finished: Callable[[str], None]) -> None:
        running = list(run_ids)
        while running:
            for run_id in [run_id for run_id in running if self.poll(run_id)]:
                running.remove(run_id)
                on_finished(run_id)
            if running:
                time.sleep(POLL_SECONDS)


def run_pipeline(
    instance: dg.DagsterInstance,
    batches: list[str],
    run_config: dict,
    slots: int,
    assets: list[str] | None = None,
    progress: Progress | None = None,
    log_level: str = "CRITICAL",
    log: Path | None = None,
) -> PipelineRun:
    """Ingest runs over ranges of the batches (at most ``slots`` at a time; a bad batch never
    blocks the others), then the datasets run: the whole datasets job (every export and the
    stats report), or only the given ``assets`` of it."""
    progress = progress or Progress()
    sync_batches(instance, batches)
    initialize_storage_pool(instance)  # before runs that are launched together claim it
    groups = group_batches(instance.get_dynamic_partitions(layout.BATCH_PARTITIONS), batches, slots)
    run = PipelineRun()
    watcher = _Watcher(instance, progress)
    with code_location(instance, log_level, log) as (workspace, location_name):
        launcher = _Launcher(instance, workspace, location_name, run_config)
        try:
            _run_all(instance, launcher, watcher, groups, slots, assets, run)
        except BaseException:  # interrupted, or the instance failed us: no run goes on without us
            launcher.terminate_unfinished()
            raise
    return run


def _run_all(instance: dg.DagsterInstance, launcher: _Launcher, watcher: _Watcher, groups: list[list[str]],
             slots: int, assets: list[str] | None, run: PipelineRun) -> None:
    """The ingest runs, at most ``slots`` at a time, then (if every batch succeeded) the datasets run."""
    watcher.progress.batches_started(sum(len(group) for group in groups))
    labels: dict[str, str] = {}

    def finished(run_id: str) -> None:
        status = instance.get_run_by_id(run_id).status
        success = status == DagsterRunStatus.SUCCESS
        outcome = RunOutcome(labels[run_id], run_id, success, None if success else failure_reason(instance, run_id))
        (run.datasets if labels[run_id] == "datasets" else run.batches).append(outcome)

    pending = list(groups)
    running: list[str] = []
    while pending or running:
        starting = [pending.pop(0) for _ in range(min(len(pending), slots - len(running)))]
        if starting:
            for group, run_id in zip(starting, launcher.launch(INGEST_JOB, [batch_run_tags(g) for g in starting])):
                labels[run_id] = group[0] if len(group) == 1 else f"{group[0]} .. {group[-1]} ({len(group)} batches)"
                running.append(run_id)
        done = [run_id for run_id in running if watcher.poll(run_id)]
        for run_id in done:
            running.remove(run_id)
            finished(run_id)
        if running and not done:
            time.sleep(POLL_SECONDS)
    if not all(outcome.success for outcome in run.batches):
        return  # the exports need every batch
    (run_id,) = launcher.launch(MAIN_JOB, [{}], None if assets is None else [dg.AssetKey(name) for name in assets])
    labels[run_id] = "datasets"
    watcher.wait([run_id], finished)
