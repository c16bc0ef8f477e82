"""Export manifests: which sources, under which config and code, made a dataset.

No timestamps: re-running on unchanged inputs writes a byte-identical manifest. The
manifest is written after the files it describes, and removed before they are replaced,
so a manifest always describes the files beside it (its SHA-256s prove it); an export
folder without one is incomplete.
"""

from __future__ import annotations

from typing import Any

import numpy as np



def describe(values: np.ndarray) -> dict[str, Any]:
    """count / min / mean / quantiles / max of the finite values (an empty one is just the count)."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {"count": 0}
    p10, p50, p90 = np.quantile(values, [0.1, 0.5, 0.9]).tolist()
    return {
        "count": int(values.size),
        "min": float(values.min()),
        "p10": round(p10, 6),
        "mean": round(float(values.mean()), 6),
        "p50": round(p50, 6),
        "p90": round(p90, 6),
        "max": float(values.max()),
    }


def build_manifest(
    *,
    export: str,
    code_version: str,
    file_format: str,
    config_section: str,
    batches: list[str],
    config: dict[str, Any],
    sources: list[dict[str, Any]],
    rows: dict[str, int],
    excluded: dict[str, int],
    distributions: dict[str, dict[str, Any]],
    files: dict[str, dict[str, Any]],
    features: list[dict[str, Any]],
    token_budget: dict[str, Any],
    decontamination: dict[str, Any] | None = None,
    dataset: dict[str, Any] | None = None,
) -> dict[str, Any]:
    manifest = {
        "export": export,
        # a declared dataset's name and its sources' names with their batches (``dataset_identity``);
        # absent for the environment's dataset and an ad hoc call, whose manifests are what they were
        **({"dataset": dataset} if dataset is not None else {}),
        "format": file_format,
        "producer": "trajectory-assets",
        "code_version": code_version,  # the export asset's (defs/code_versions.py)
        "config_section": config_section,  # the section of config that curated this export
        "config": config,  # the whole pipeline config: redaction changes the bytes too
        "batches": batches,
        "sources": [
            {"uri": s["uri"], "source_id": s["source_id"], "sha256": s["sha256"], "records": s["records"],
             "redaction": s.get("redaction"),  # the detector that scrubbed it at ingest, or None
             # where its rewards came from (sources/provenance.py): only for a format that says
             **({"reward_provenance": s["reward_provenance"]} if s.get("reward_provenance") else {})}
            for s in sources
        ],
        "rows": rows,
        "excluded": dict(sorted(excluded.items())),
        "distributions": distributions,
        # the tokenizer, budget and what it left out / cut (tokens are measured only with a tokenizer)
        "token_budget": token_budget,
        # file name -> its split, the shard it came from, sha256, bytes, rows (a split: its files in order)
        "files": files,
        "features": features,  # the types HF datasets loads the rows as (the card's dataset_info.features)
    }
    if decontamination is not None:
        # the evaluation sets checked (file hashes) and how many trajectories each left out;
        # absent when none is configured, so such a manifest is what it was before
        manifest["decontamination"] = decontamination
    return manifest


def dataset_identity(name: str, batches_by_source: dict[str, list[str]]) -> dict[str, Any]:
    """What a declared dataset's manifests say of it: its name, and each source it read with the
    batches it read of it.

    >>> dataset_identity("swe_sft", {"swe": ["b-2", "a-1"]})
    {'name': 'swe_sft', 'sources': [{'name': 'swe', 'batches': ['a-1', 'b-2']}]}
    """
    return {"name": name, "sources": [{"name": source, "batches": sorted(batches)}
                                      for source, batches in sorted(batches_by_source.items())]}
