"""Tool use per trajectory, recorded beside each batch as it is ingested (``ingest/tool_use.py``),
so the report counts calls and failed results per tool without reading every conversation
again (no Dagster here).

Ingest holds each conversation decoded already; counting its calls there costs little. The
report otherwise decoded the messages of every trajectory that called a tool, its largest
cost after the exports' own (1.7 s of a 5.5 s report on the 1 GB benchmark corpus). A batch
without a current record (ingested before records were kept, or under an older counting
rule) has its messages read once by the next report, which stores its record for the next.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import pandas as pd

from trajectory_assets.chat.messages import tool_use
from trajectory_assets.ingest.tool_use import TOOL_USE_RULE, ToolUse, record


def counted(chunks: Iterable[pd.DataFrame]) -> ToolUse:
    """The tool use of the rows that called a tool, from chunks of ``trajectory_id``,
    ``num_tool_calls`` and ``messages``."""
    found: ToolUse = {}
    for chunk in chunks:
        for trajectory_id, calls, messages in chunk[["trajectory_id", "num_tool_calls", "messages"]].itertuples(
                index=False):
            if calls:
                found[trajectory_id] = tool_use(orjson.loads(messages))
    return found


def tool_use_of(table: Any, ids: set[str]) -> ToolUse:
    """The tool use of the trajectories of ``ids`` (each called a tool).

    A table that keeps per-batch records (``StoredTrajectories``) gives what ingest counted;
    a batch without a current record is read once and its record stored. Any other table
    (``FrameTable``) is read, only the rows of ``ids``. A record copied into two batches has
    the same id and the same conversation in both, so whichever batch counted it counts."""
    columns = ["trajectory_id", "num_tool_calls", "messages"]
    records = getattr(table, "tool_use_records", None)
    if records is None:
        return counted(table.scan(columns, ids=ids)) if ids else {}
    found, stale = records(TOOL_USE_RULE)
    for key in stale:
        batch = counted(table.batch(key).scan(columns))
        table.save_tool_use(key, record(batch))
        for trajectory_id, used in batch.items():
            found.setdefault(trajectory_id, used)
    return {trajectory_id: found[trajectory_id] for trajectory_id in ids if trajectory_id in found}
