"""Export manifests: which sources, under which config and code, made a dataset.

No timestamps: re-running on unchanged inputs writes a byte-identical manifest.
"""

from __future__ import annotations

from typing import Any

from trajectory_assets import __version__


def build_manifest(
    *,
    export: str,
    batches: list[str],
    config: dict[str, Any],
    sources: list[dict[str, Any]],
    rows: dict[str, int],
    excluded: dict[str, int],
    files: dict[str, dict[str, Any]],
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
        "rows": rows,
        "excluded": dict(sorted(excluded.items())),
        "files": files,  # name -> sha256, bytes, lines of what was written
    }
