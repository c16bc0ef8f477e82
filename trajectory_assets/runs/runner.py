"""The CLI's runs: the UI's jobs, recorded in the instance and executed in the CLI's process.

Each run is created in ``DAGSTER_HOME`` with the origins a code server of the project's
code location would give it (``workspace.yaml``), so the UI shows it like any run it
started and can re-execute it from the run page; then it is executed here, with no code
server and no run worker:

- **small inputs** (one ingest run is enough, ``run_plan.ingest_runs``): every run in this
  process, one after the other: the ingest run, then the datasets run;
- **large inputs**: a fork server, forked from the CLI once it has imported the code location
  and the instance's storage modules (``processes.cli_fork_server``); the ingest runs (about
  one per core) are forked from it, and so are the datasets run's steps when the stored
  trajectories are large (``executors.py``; its executor forks from the same server, so two
  export families run at once on two cores).

The batches become ranges of ingest runs (``run_plan.py``); when every one has succeeded,
one run of the datasets job builds the exports and the report. The sources, storage and
config of the call go into each run's config, so the runs say in the UI what they read and
wrote.

Ctrl-C cancels: SIGINT is taken by a thread of this process (the others block it), which
marks every unfinished run canceling before the runs are interrupted, so Dagster ends them
CANCELED instead of failed. A forked run whose process dies without ending its run is marked
failed here; a run of a CLI process that died (killed, or crashed in a step run in its own
process) is marked failed by the next CLI call on the same machine.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import fcntl
import os
import signal
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from trajectory_assets import PROJECT_ROOT, layout
from trajectory_assets import dagster_internals as internals
from trajectory_assets.runs.executors import trajectories_fit_in_process
from trajectory_assets.runs.processes import Interrupts, start_fork_server
from trajectory_assets.defs.retries import initialize_storage_pool
from trajectory_assets.runs.run_plan import (DatasetCall, SourceCall, batch_run_tags, datasets_job_name, group_batches,
                                            ingest_job_name)
from trajectory_assets.runs.run_workers import (UNFINISHED, end_unfinished, executor_tag, fail_abandoned_runs,
                                                process_identity)
from trajectory_assets.io.storage import Storage
from trajectory_assets.project import partitions_name

WORKSPACE = PROJECT_ROOT / "workspace.yaml"


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
    # the named sources none of whose records any format recognised (``unrecognised_sources``):
    # the datasets run was not started, so no export was replaced
    unrecognised: list[str] = field(default_factory=list)

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


def sync_batches(instance: dg.DagsterInstance, batches: list[str], partitions: str = layout.BATCH_PARTITIONS) -> None:
    """Make the registered batch partitions of one source (``partitions``) exactly the given
    batches: the source's files now. Another source's partitions are never touched."""
    registered = set(instance.get_dynamic_partitions(partitions))
    for stale in sorted(registered - set(batches)):
        instance.delete_dynamic_partition(partitions, stale)
    missing = [key for key in batches if key not in registered]
    if missing:
        instance.add_dynamic_partitions(partitions, missing)


@contextlib.contextmanager
def sources_locked(sources: list[SourceCall]):
    """Holds a lock per source (a file in ``DAGSTER_HOME``, taken in name order) while its
    batches are registered and ingested: two calls sharing a source on one machine take
    turns, and the second finds the batches ingested. (Calls on several machines sharing a
    database do not see each other's locks, nor does the UI's sensor take one: docs/datasets.md.)"""
    home = os.environ.get("DAGSTER_HOME")
    with contextlib.ExitStack() as held:
        if home:
            folder = Path(home) / "locks"
            folder.mkdir(parents=True, exist_ok=True)
            for name in sorted({partitions_name(source.name) for source in sources}):
                lock = held.enter_context(open(folder / f"{name}.lock", "a"))
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def batches_to_ingest(instance: dg.DagsterInstance, source: SourceCall, code_version: str | None) -> list[str]:
    """The source's batches that need an ingest run: all of them for an ad hoc call; else those
    whose stored trajectories were not made from the file as it is now (``ingested_as_is``) or
    were made by other code or config (``code_version``, the ingest assets' now)."""
    if source.found is None:
        return list(source.batches)
    from trajectory_assets.defs.automation import ingested_as_is, latest_code_version

    store = Storage(source.storage)
    return [key for key in source.batches
            if not ingested_as_is(instance, store, key, source.found[key], source.name)
            or latest_code_version(instance, source.name, key) != code_version]


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


def unrecognised_sources(store: Storage, batches_by_source: dict[str, list[str]]) -> list[str]:
    """The named sources (``--source``) that recognised no record at all: every record of theirs
    quarantined as of no known format (``sources.recognised_records``). A source that could
    not be read, or held no record, is not among them (today's rules report those)."""
    from trajectory_assets.sources import recognised_records

    return [source for source, batches in batches_by_source.items()
            if recognised_records([store.read_json(layout.batch_summary(key)) for key in batches]) == 0]


# What runs report while they execute ------------------------------------------------------------


def failure_reason(event: dg.DagsterEvent) -> str:
    """The error our code raised in a failed step (under Dagster's wrappers), or why the
    run itself failed, in one line."""
    if not event.is_step_failure:
        return " ".join((event.message or "the run failed").split())
    data = event.step_failure_data
    if data.user_failure_data is not None and data.user_failure_data.description:
        return f"{event.step_key}: {data.user_failure_data.description}"
    error = data.error
    # under Dagster's wrappers, and under the retry policy's "Exceeded max_retries"
    while error is not None and error.cause is not None and (
        error.cls_name.startswith("Dagster") or error.cls_name.startswith("RetryRequested")
    ):
        error = error.cause
    if error is None:
        return f"{event.step_key}: failed"
    lines = error.message.strip().splitlines()
    return f"{event.step_key}: {lines[-1] if lines else error.cls_name}"


def run_report(event: dg.DagsterEvent) -> tuple | None:
    """What the CLI shows of one of a run's events: ("batch", key, records) when a batch's
    trajectories are written, ("export", name, rows, uri) when an export is, ("failure",
    reason) for the first failure of a step or of the run; None for anything else."""
    if event.is_step_materialization:
        materialization = event.step_materialization_data.materialization
        name, metadata = materialization.asset_key.path[-1], materialization.metadata
        if name == "validated_trajectories":
            return ("batch", materialization.partition, metadata["records_read"].value)
        if name.endswith("_dataset"):
            uri = metadata.get("dagster/uri")
            return ("export", name.removesuffix("_dataset"), metadata["dagster/row_count"].value,
                    uri.value if uri else None)
    elif event.is_step_failure or event.event_type == dg.DagsterEventType.RUN_FAILURE:
        return ("failure", failure_reason(event))
    return None


class _Reports:
    """Applies run reports to the progress display, and keeps each run's first failure."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.failures: dict[str, str] = {}

    def apply(self, run_id: str, report: tuple) -> None:
        kind, *values = report
        if kind == "batch":
            self.progress.batch_done(*values)
        elif kind == "export":
            self.progress.export_written(*values)
        elif kind == "failure":
            self.failures.setdefault(run_id, values[0])


# Jobs and runs ---------------------------------------------------------------------------------


class _Jobs:
    """The code location's jobs, as this process loaded them, and how runs of them are made."""

    def __init__(self, call: str | None) -> None:
        # the code location, loaded once per CLI call, or an ad hoc call's own definitions
        from trajectory_assets.definitions import call_definitions, defs

        self.call = call
        self.defs = defs if call is None else call_definitions(call)
        self.repository = defs.get_repository_def().name

    def reconstructable(self, job_name: str):
        """How a process forked from the fork server (an ingest run, a step) loads the job."""
        return reconstructable_job(job_name, self.call)

    def code_version(self, source: str) -> str | None:
        """The code version the source's trajectories are computed with now."""
        from trajectory_assets.defs.ingest import IngestKeys

        key = IngestKeys(source).trajectories
        return self.defs.resolve_assets_def(key).code_versions_by_key.get(key)

    def create_run(self, instance: dg.DagsterInstance, job_name: str, run_config: dict, tags: dict[str, str],
                   assets: list[dg.AssetKey] | None, executed_by: str) -> dg.DagsterRun:
        run_id = str(uuid.uuid4())
        return internals.create_recorded_run(
            instance, self.defs.resolve_job_def(job_name), self.reconstructable(job_name),
            internals.code_location_job_origin(str(WORKSPACE), self.repository, job_name),
            run_config, {**tags, **executor_tag(executed_by, run_id)}, assets, run_id=run_id)


def reconstructable_job(job_name: str, call: str | None):
    """How a process (this one, or one forked from the fork server) loads a job: from the code
    location, or from an ad hoc call's definitions (``definitions.job_by_name``)."""
    return dg.build_reconstructable_job("trajectory_assets.definitions", "job_by_name",
                                        (job_name,) if call is None else (job_name, call),
                                        reconstructor_working_directory=str(PROJECT_ROOT))


def _execute_forked_run(instance_ref: Any, run_id: str, call: str | None,
                        reports: multiprocessing.connection.Connection) -> None:
    """An ingest run in a process forked from the fork server: it sends its reports to the
    CLI. SIGINT stays blocked here: the CLI marks the run canceling, then stops this
    process with SIGTERM, which Dagster takes as an interrupt."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    with internals.instance_from_ref(instance_ref) as instance:
        run = instance.get_run_by_id(run_id)
        for event in internals.execute_recorded_run(reconstructable_job(run.job_name, call), run, instance):
            report = run_report(event)
            if report is not None:
                reports.send(report)
    reports.close()


# The pipeline ----------------------------------------------------------------------------------


class _Pipeline:
    def __init__(self, instance: dg.DagsterInstance, run_config: dict, progress: Progress,
                 forks: multiprocessing.context.BaseContext | None, taken: Interrupts, call: str | None) -> None:
        self.instance, self.run_config, self.forks = instance, run_config, forks
        self.reports = _Reports(progress)
        self.jobs = _Jobs(call)
        self.executed_by = process_identity(os.getpid())
        self.created: list[dg.DagsterRun] = []
        self.children: dict[str, multiprocessing.process.BaseProcess] = {}
        self.lock = threading.Lock()
        self.canceling = False
        # the interrupt thread's own connection, opened now: a Ctrl-C must mark the runs at once,
        # before the interrupted runs read their status back
        self.cancel_instance = internals.instance_from_ref(internals.instance_ref(instance))
        taken.on_interrupt = self.cancel

    def cancel(self) -> None:
        """(The interrupt thread.) Marks every unfinished run canceling, then stops the forked
        runs; the main thread is interrupted next."""
        with self.lock:
            self.canceling = True
            runs, children = list(self.created), list(self.children.values())
        for run in runs:
            current = self.cancel_instance.get_run_by_id(run.run_id)
            if current is not None and current.status in UNFINISHED:
                internals.mark_run_canceling(self.cancel_instance, current, "interrupted (Ctrl-C) in the CLI")
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)

    def create(self, job_name: str, tags: dict[str, str], run_config: dict,
               assets: list[dg.AssetKey] | None = None) -> dg.DagsterRun:
        with self.lock:
            if self.canceling:
                raise KeyboardInterrupt
            run = self.jobs.create_run(self.instance, job_name, run_config, tags, assets, self.executed_by)
            self.created.append(run)
        return run

    def execute_here(self, run: dg.DagsterRun) -> None:
        """A run in this process, its steps as its executor says."""
        for event in internals.execute_recorded_run(self.jobs.reconstructable(run.job_name), run, self.instance):
            report = run_report(event)
            if report is not None:
                self.reports.apply(run.run_id, report)
        self._raise_if_canceled()

    def _raise_if_canceled(self) -> None:
        """A run that took the interrupt ends (CANCELED) instead of raising it: the call stops here."""
        if self.canceling:
            raise KeyboardInterrupt

    def execute_forked(self, runs: list[dg.DagsterRun], slots: int) -> None:
        """Runs, each in a process forked from the fork server, at most ``slots`` at once."""
        pending, running = list(runs), {}  # connection -> run
        ref = internals.instance_ref(self.instance)
        while pending or running:
            while pending and len(running) < slots:
                run = pending.pop(0)
                receiving, sending = self.forks.Pipe(duplex=False)
                child = self.forks.Process(target=_execute_forked_run, args=(ref, run.run_id, self.jobs.call, sending),
                                           name=f"run {run.run_id[:8]}")
                with self.lock:
                    if self.canceling:
                        raise KeyboardInterrupt
                    child.start()
                    self.children[run.run_id] = child
                sending.close()
                running[receiving] = run
            for ready in multiprocessing.connection.wait(list(running)):
                run = running[ready]
                try:
                    self.reports.apply(run.run_id, ready.recv())
                except EOFError:  # the run's process is done
                    del running[ready]
                    self._reap(run)
        self._raise_if_canceled()

    def _reap(self, run: dg.DagsterRun) -> None:
        child = self.children.pop(run.run_id)
        child.join()
        message = f"the process that ran it exited with code {child.exitcode} without ending it"
        if end_unfinished(self.instance, run.run_id, message):  # it died without ending its run
            self.reports.failures.setdefault(run.run_id, message)

    def stop(self) -> None:
        """After an interrupt or an error: waits for the forked runs to stop, then ends every
        run this call created that is still unfinished (canceled)."""
        for child in list(self.children.values()):
            child.join(timeout=60)
            if child.is_alive():
                child.kill()
                child.join()
        self.children.clear()
        for run in self.created:
            current = self.instance.get_run_by_id(run.run_id)
            if current is not None and current.status in UNFINISHED:
                internals.mark_run_canceled(self.instance, current, "the CLI stopped before the run ended")

    def outcome(self, label: str, run: dg.DagsterRun) -> RunOutcome:
        status = self.instance.get_run_by_id(run.run_id).status
        success = status == dg.DagsterRunStatus.SUCCESS
        failure = None if success else self.reports.failures.get(run.run_id, f"the run ended {status.value}")
        return RunOutcome(label, run.run_id, success, failure)


def run_pipeline(
    instance: dg.DagsterInstance,
    target: DatasetCall,
    run_config: dict,
    slots: int,
    runs: int = 1,
    assets: list[str] | None = None,
    progress: Progress | None = None,
    forks: multiprocessing.context.BaseContext | None = None,
    steps: str = "auto",
    taken: Interrupts | None = None,
    batches_by_source: dict[str, list[str]] | None = None,
) -> PipelineRun:
    """``runs`` ingest runs over ranges of each source's batches that need one (a bad batch
    never blocks the others), then the dataset's run: its whole job (its exports and report),
    or only the given ``assets`` of it (names without the dataset's prefix). Each source's
    batches are registered and ingested under its lock (``sources_locked``). With ``forks``
    (a fork server's context, see ``processes.cli_fork_server``) the ingest runs are forked,
    ``slots`` at a time; without, they execute in this process, one after the other. The
    datasets run executes in this process, its steps as ``steps`` says (``executors.py``:
    in_process, multiprocess or auto). With ``batches_by_source`` (each named path's batches),
    a path that recognised no record stops the call before the datasets run: its exports
    would replace the stored ones with nothing."""
    progress = progress or Progress()
    fail_abandoned_runs(instance)
    initialize_storage_pool(instance)  # before runs that start together claim it
    taken = taken or Interrupts()  # (one not entered takes no signal)
    pipeline = _Pipeline(instance, run_config, progress, forks, taken, target.call)
    # what the code location's import made lives as long as the call: the export steps'
    # garbage collections (one per chunk, memory.py) then walk only what the runs make
    froze = gc.get_freeze_count() == 0
    gc.freeze()
    result = PipelineRun()
    try:
        with sources_locked(target.sources):
            planned = []  # (ingest job, batches of one run)
            for source in target.sources:
                partitions = partitions_name(source.name)
                sync_batches(instance, source.batches, partitions)
                job = ingest_job_name(source.name)
                wanted = batches_to_ingest(instance, source, pipeline.jobs.code_version(source.name))
                planned.extend((job, group) for group in group_batches(instance.get_dynamic_partitions(partitions),
                                                                       wanted, runs))
            progress.batches_started(sum(len(group) for _, group in planned))
            ingest_runs = [(group, pipeline.create(job, batch_run_tags(group), run_config)) for job, group in planned]
            if forks is not None:
                pipeline.execute_forked([run for _, run in ingest_runs], slots)
            else:
                for _, run in ingest_runs:
                    pipeline.execute_here(run)
        for group, run in ingest_runs:
            label = group[0] if len(group) == 1 else f"{group[0]} .. {group[-1]} ({len(group)} batches)"
            result.batches.append(pipeline.outcome(label, run))
        if not all(outcome.success for outcome in result.batches):
            return result  # the exports need every batch
        if batches_by_source:
            result.unrecognised = unrecognised_sources(target.store(), batches_by_source)
            if result.unrecognised:
                return result
        if steps == "auto":  # decided here, as the executor would: the fork server is started from this thread
            by_storage: dict[str, list[str]] = {}
            for source in target.sources:
                by_storage.setdefault(source.storage, []).extend(source.batches)
            steps = "in_process" if trajectories_fit_in_process(by_storage) else "multiprocess"
        if steps == "multiprocess" and pipeline.forks is None:
            pipeline.forks = start_fork_server()  # this process has run the ingest: not forked from it
        execution = {"config": {"steps": steps, "max_concurrent": slots}}
        prefix = [target.dataset] if target.dataset else []
        datasets = pipeline.create(datasets_job_name(target.dataset), {}, {**run_config, "execution": execution},
                                   None if assets is None else [dg.AssetKey([*prefix, name]) for name in assets])
        pipeline.execute_here(datasets)
        result.datasets.append(pipeline.outcome("datasets", datasets))
    except BaseException:  # interrupted, or the instance failed us: no run is left going
        pipeline.stop()
        raise
    finally:
        taken.on_interrupt = lambda: None  # nothing of this call is left to cancel
        pipeline.cancel_instance.dispose()
        if froze:
            gc.unfreeze()
    return result
