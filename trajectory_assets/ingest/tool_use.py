"""Tool use per trajectory, recorded beside each batch as it is ingested, from conversations
ingest has decoded anyway; the report reads the records (``report/tool_use.py``)."""

from __future__ import annotations

from typing import Any

from trajectory_assets.chat.messages import tool_use

# raised whenever ``chat.messages.tool_use`` counts differently, so older records are read again
TOOL_USE_RULE = 1

# trajectory_id -> tool name -> [calls, failed results]
ToolUse = dict[str, dict[str, list[int]]]


class ToolUseRecorder:
    """Gathers a batch's tool use as ingest converts it (``ingest(on_trajectory=...)``): only
    trajectories that called a tool, the ones the report counts."""

    def __init__(self) -> None:
        self.trajectories: ToolUse = {}

    def add(self, trajectory_id: str, trajectory: Any) -> None:
        used = tool_use(trajectory.messages)
        if any(calls for calls, _ in used.values()):
            self.trajectories[trajectory_id] = used

    def result(self) -> dict[str, Any]:
        return record(self.trajectories)


def record(trajectories: ToolUse) -> dict[str, Any]:
    """What is stored beside a batch."""
    return {"rule": TOOL_USE_RULE, "trajectories": trajectories}
