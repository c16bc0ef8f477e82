"""How the cross-batch assets see every registered batch (dynamic partition) at once."""


import dagster as dg
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from trajectory_assets import layout
from trajectory_assets.ingest import TRAJECTORY_ARROW_SCHEMA, merge_summaries
from trajectory_assets.io.storage import Storage


def registered_batches(context: dg.AssetExecutionContext) -> list[str]:
    """Sorted, so the datasets do not depend on the order in which batches arrived."""
    return sorted(context.instance.get_dynamic_partitions(layout.BATCH_PARTITIONS))


def _require_materialized(store: Storage, keys: list[str]) -> None:
    missing = [key for key in keys if not store.exists(layout.batch_summary(key))]
    if missing:
        raise dg.Failure(
            description=f"{len(missing)} registered batch(es) not ingested yet: {missing[:5]}; "
            "materialize validated_trajectories for them first"
        )


def read_trajectories(store: Storage, keys: list[str], columns: list[str]) -> pd.DataFrame:
    _require_materialized(store, keys)
    tables = []
    for key in keys:
        with store.fs.open(store.path(layout.batch_trajectories(key)), "rb") as handle:
            tables.append(pq.read_table(handle, columns=columns))
    if not tables:
        return TRAJECTORY_ARROW_SCHEMA.empty_table().select(columns).to_pandas()
    return pa.concat_tables(tables).to_pandas()


def read_summary(store: Storage, keys: list[str]) -> dict:
    _require_materialized(store, keys)
    return merge_summaries([orjson.loads(store.read_bytes(layout.batch_summary(key))) for key in keys])


def batch_lineage(store: Storage, keys: list[str]) -> list[dict]:
    """Per batch: its partition key, source URI and the SHA-256 of the bytes that were read."""
    lineage = []
    for key in keys:
        recorded = orjson.loads(store.read_bytes(layout.batch_source(key)))
        lineage.append({"batch": key, "uri": recorded["uri"], "source_id": recorded["source_id"],
                        "sha256": recorded["sha256"]})
    return lineage
