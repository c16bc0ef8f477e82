"""Names per source and dataset, and how a dataset's assets see every batch of its sources.

The environment's source and dataset (named ``""``, ``project.ENVIRONMENT``) keep today's
unprefixed asset keys and resource keys; a declared one's are prefixed by its name
(``swe_sft/sft_dataset``, resource ``swe_sft__storage``).
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from trajectory_assets.io.dataset_storage import DatasetStorage
from trajectory_assets.io.storage import Storage
from trajectory_assets.project import partitions_name, resource_key


# the batch assets' keys, without a source's prefix
RAW, TRAJECTORIES, QUARANTINE = "raw_rollouts", "validated_trajectories", "quarantined_records"


def asset_key(name: str, base: str) -> dg.AssetKey:
    """``base`` (``validated_trajectories``, ``sft_dataset``...) of the source or dataset ``name``."""
    return dg.AssetKey([name, base] if name else [base])


def registered_batches(instance: dg.DagsterInstance, sources: Sequence[str]) -> dict[str, str]:
    """Every registered batch of the named sources, batch key -> source, sorted by key so that
    the datasets do not depend on the order in which batches arrived."""
    found = {key: source for source in sources for key in instance.get_dynamic_partitions(partitions_name(source))}
    return dict(sorted(found.items()))


def dataset_store(context: dg.OpExecutionContext, dataset: str,
                  sources: Sequence[str]) -> tuple[Storage, dict[str, str]]:
    """The dataset's storage, reading each batch where its source keeps it (``DatasetStorage``),
    and every batch of its sources (``registered_batches``: key -> source, in key order)."""
    batches = registered_batches(context.instance, sources)
    return planned_store(context, dataset, sources, batches), batches


def planned_store(context: dg.OpExecutionContext, dataset: str, sources: Sequence[str],
                  batches: dict[str, str]) -> Storage:
    """The dataset's storage reading the ``batches`` (key -> source) a step before this one
    listed: every step of a run reads the same batches, whatever was registered since."""
    roots = {source: getattr(context.resources, resource_key(source, "storage")).root for source in sources}
    root = getattr(context.resources, resource_key(dataset, "storage")).root
    return DatasetStorage.reading(root, {key: roots[source] for key, source in batches.items()})
