"""Export manifests: which sources, under which config and code, made a dataset.

No timestamps: re-running on unchanged inputs writes a byte-identical manifest.
"""

from __future__ import annotations

from typing import Any

from trajectory_assets import __version__
from trajectory_assets.formats.jsonutil import sha256_hex


def build_manifest(
    *,
    export: str,
    batches: list[str],
    config: dict[str, Any],
    sources: list[dict[str, Any]],
    trajectories: int,
    rows: dict[str, int],
    excluded: dict[str, int],
    files: dict[str, bytes],
) -> dict[str, Any]:
    return {
        "export": export,
        "producer": "trajectory-assets",
        "code_version": __version__,
        "config": config,
        "batches": batches,
        "sources": [
            {"uri": s["uri"], "source_id": s["source_id"], "sha256": s["sha256"], "records": s["records"]}
            for s in sources
        ],
        "trajectories_considered": trajectories,
        "rows": rows,
        "excluded": dict(sorted(excluded.items())),
        "files": {
            name: {"sha256": sha256_hex(data), "bytes": len(data), "lines": data.count(b"\n")}
            for name, data in files.items()
        },
    }
