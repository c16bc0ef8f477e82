"""How the cross-batch assets see every registered batch (dynamic partition) at once."""

import dagster as dg

from trajectory_assets import layout


def registered_batches(context: dg.AssetExecutionContext) -> list[str]:
    """Sorted, so the datasets do not depend on the order in which batches arrived."""
    return sorted(context.instance.get_dynamic_partitions(layout.BATCH_PARTITIONS))
