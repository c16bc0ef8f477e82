"""Where a run's steps execute: in the run's own process when its data is small, else each
step in a process forked from a fork server that already imported everything a step needs.

A step in a process of its own pays a fork and the instance's connection (the fork
server preloaded the code location and the instance's storage modules, see
``step_preload.py``); a run whose steps go to processes also pays the fork server's
start-up, which imports the code location once more (about 1.5 s here). On two cores the
three export families running side by side win that back only once they hold enough data
(``DATASETS_IN_PROCESS_MAX_BYTES``, measured by ``python -m bench.executors``). So each
run chooses (``execution: config: steps:`` in its run config): ``in_process``,
``multiprocess``, or ``auto`` (the default), which measures the stored trajectories of the
registered batches when the run starts.
"""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg

from trajectory_assets import layout
from trajectory_assets.runs.processes import STEP_PRELOAD
from trajectory_assets.io.storage import Storage
from trajectory_assets.project import partitions_name

# Trajectory Parquet (compressed) of every registered batch up to which the datasets run's
# steps run in its own process: below it, starting a fork server and a process per step
# costs more than the two cores give back. Measured with `python -m bench.executors`
# (docs/performance.md).
DATASETS_IN_PROCESS_MAX_BYTES = 8 * 1024 * 1024
STEP_MODES = ("auto", "in_process", "multiprocess")


def forked_steps_config(max_concurrent: int = 0) -> dict:
    """The multiprocess executor's config: steps forked from a server that preloaded
    ``STEP_PRELOAD`` (0: one step per CPU at once)."""
    return {"max_concurrent": max_concurrent, "start_method": {"forkserver": {"preload_modules": [STEP_PRELOAD]}}}


class _SizedExecutor(dg.Executor):
    """In process or forked, as the run's config says or (``auto``) as its data size says."""

    def __init__(self, init_context: dg.InitExecutorContext, mode: str, max_concurrent: int,
                 sources: dict[str, str]) -> None:
        def build(executor_def: dg.ExecutorDefinition, config: dict) -> dg.Executor:
            return executor_def.executor_creation_fn(dg.InitExecutorContext(
                job=init_context.job, executor_def=executor_def, executor_config=config,
                instance=init_context.instance))

        self.mode, self.sources = mode, sources
        self.in_process = build(dg.in_process_executor, {"retries": {"enabled": {}}})
        self.forked = build(dg.multiprocess_executor, {**forked_steps_config(max_concurrent),
                                                       "retries": {"enabled": {}}})

    @property
    def retries(self):
        return self.forked.retries

    def execute(self, plan_context, execution_plan) -> Iterator[dg.DagsterEvent]:
        in_process = self.mode == "in_process" or (self.mode == "auto" and self._small(plan_context))
        return (self.in_process if in_process else self.forked).execute(plan_context, execution_plan)

    def _small(self, plan_context) -> bool:
        instance = plan_context.instance
        return trajectories_fit_in_process({
            storage: instance.get_dynamic_partitions(partitions_name(source))
            for source, storage in self.sources.items()})


def trajectories_fit_in_process(batches_by_storage: dict[str, list[str]]) -> bool:
    """Whether the stored trajectories of the batches (by the storage root holding them) are
    small enough for the datasets run's steps to run in its own process (a storage that cannot
    be listed counts as large: the steps report the fault)."""
    size = 0
    for storage, batches in batches_by_storage.items():
        try:
            size += Storage(storage).total_size([layout.batch_trajectories(key) for key in batches])
        except OSError:
            return False
    return size <= DATASETS_IN_PROCESS_MAX_BYTES


def sized_executor(sources: dict[str, str]) -> dg.ExecutorDefinition:
    """A dataset job's executor; ``sources``: each of its sources' name -> storage root, where
    ``auto`` measures the stored trajectories."""

    @dg.executor(
        name="sized_executor",
        config_schema={
            "steps": dg.Field(dg.Enum("StepProcesses", [dg.EnumValue(mode) for mode in STEP_MODES]),
                              default_value="auto",
                              description="in_process: every step in the run's process; multiprocess: each step "
                              "forked from a preloaded server; auto: in process while the stored trajectories "
                              f"are at most {DATASETS_IN_PROCESS_MAX_BYTES} bytes"),
            "max_concurrent": dg.Field(int, default_value=0,
                                       description="forked steps at once (0: one per CPU)"),
        },
        requirements=dg.multiple_process_executor_requirements(),
    )
    def _sized(init_context: dg.InitExecutorContext) -> dg.Executor:
        config = init_context.executor_config
        return _SizedExecutor(init_context, config["steps"], config["max_concurrent"], sources)

    return _sized
