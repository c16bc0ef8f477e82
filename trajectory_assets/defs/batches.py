"""How the cross-batch assets see every registered batch (dynamic partition) at once."""

import dagster as dg

from trajectory_assets import layout
from trajectory_assets.ingest import merge_summaries
from trajectory_assets.io.storage import NotMaterializedError, Storage
from trajectory_assets.io.trajectory_table import StoredTrajectories


def registered_batches(context: dg.AssetExecutionContext) -> list[str]:
    """Sorted, so the datasets do not depend on the order in which batches arrived."""
    return sorted(context.instance.get_dynamic_partitions(layout.BATCH_PARTITIONS))


def stored_trajectories(store: Storage, batches: list[str]) -> StoredTrajectories:
    try:
        return StoredTrajectories(store, batches)
    except NotMaterializedError as error:  # a registered batch not ingested yet: retrying won't ingest it
        raise dg.Failure(description=str(error), allow_retries=False) from None


def read_summary(store: Storage, batches: list[str]) -> dict:
    """Every batch's ingest counts and sources as one summary."""
    return merge_summaries([store.read_json(layout.batch_summary(key)) for key in batches])
