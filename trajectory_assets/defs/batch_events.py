"""Each batch's own Dagster events, from a step that ingests several batches in one run.

One run per source file pays a run's start-up (a new process importing the code location)
for every file, so the batch step takes a range of batch partitions per run. Dagster gives
all the partitions of such a step one data version (it is a property of the output, not of
the partition: dagster-io/dagster#18649, #34013), and records a partitioned check result
yielded by the step for no partition at all. So the step's outputs are optional
(``can_subset``) and it reports each batch's events itself, through ``context.log_event``:
the tags Dagster writes for a one-partition run (the batch's SHA-256 as the data version of
``raw_rollouts``; for an asset made from it the code version, the input's data version and
event pointer, and the derived data version) and one check evaluation per batch. A batch
in a run of twenty looks in the UI, the lineage and the staleness view exactly as it would
in a run of its own.
"""

from collections.abc import Mapping
from typing import Any

import dagster as dg

from trajectory_assets.dagster_internals import check_target, materialization_version_tags


def _latest(context: dg.AssetExecutionContext, key: dg.AssetKey, partition: str) -> dg.EventLogRecord | None:
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
    ).records
    return records[0] if records else None


def report_materialization(
    context: dg.AssetExecutionContext,
    key: dg.AssetKey,
    partition: str,
    metadata: Mapping[str, Any],
    data_version: str | None = None,
) -> None:
    """One partition's materialization. ``data_version`` is the content's own version (given
    by the asset); without it the version derives from the code version and the current
    versions of the partition's inputs, as Dagster derives it."""
    spec = context.assets_def.specs_by_key[key]
    inputs = {} if data_version is not None else {dep.asset_key: _latest(context, dep.asset_key, partition)
                                                  for dep in spec.deps}
    tags = materialization_version_tags(spec.code_version or context.run_id, data_version, inputs)
    context.log_event(dg.AssetMaterialization(asset_key=key, partition=partition, metadata=dict(metadata), tags=tags))


def report_check(
    context: dg.AssetExecutionContext,
    check: dg.AssetCheckKey,
    partition: str,
    passed: bool,
    metadata: Mapping[str, Any],
    description: str | None = None,
) -> None:
    """One partition's check evaluation, pointing at the partition's latest materialization."""
    spec = context.assets_def.get_spec_for_check_key(check)
    target = _latest(context, check.asset_key, partition)
    context.log_event(dg.AssetCheckEvaluation(
        asset_key=check.asset_key,
        check_name=check.name,
        passed=passed,
        metadata=dict(metadata),
        description=description,
        blocking=spec.blocking,
        partition=partition,
        target_materialization_data=check_target(target),
    ))


def batches_reported(context: dg.AssetExecutionContext, key: dg.AssetKey) -> set[str]:
    """The step's partitions for which this run already reported ``key`` (a retried step
    resumes after them instead of ingesting them again)."""
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=list(context.partition_keys)),
        limit=len(context.partition_keys) * (context.retry_number + 1),
    ).records
    return {record.partition_key for record in records if record.run_id == context.run_id}
