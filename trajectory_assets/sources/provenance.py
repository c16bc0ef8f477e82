"""Where a source's rewards came from, as its files say (issue 41, items 5 and 6): the run's
resolved config beside it, and whether it is a re-verification (``gym eval reverify``) of
another rollouts file, forced or not. No Dagster here.

The rows' own part (the verifier, the judge models) is ``nemo_gym.reward_provenance_of``;
ingest joins the two into each trajectory's ``reward_provenance``.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from typing import Any

from trajectory_assets.markdown import table
from trajectory_assets.io.source_files import SourceFile, file_sha256, reverification_of

# nemo_gym/utils/path_utils.py ``resolved_config_path_for``: results/rollouts.jsonl ->
# results/rollouts_resolved_config.yaml, the config the run was collected (and scored) with
RESOLVED_CONFIG_SUFFIX = "_resolved_config.yaml"
# what a forced re-verification's rows are quarantined as, unless the config reads them
UNSAFE_REASON = "ng_reverify_unsafe"


def source_provenance(source: SourceFile) -> dict[str, Any]:
    """The source's part of its trajectories' ``reward_provenance``: ``resolved_config`` (its
    name and SHA-256, when the run wrote one beside the rollouts), ``reverified`` (a
    re-verification output: its reward was recomputed by ``gym eval reverify`` from the rows of
    ``reverifies``, the original rollouts file), ``forced`` (written under ``--force``, the
    ``unsafe_`` prefix: the verifier did not declare itself safe to re-run)."""
    name = posixpath.basename(source.uri)
    stem = name.removesuffix(".gz").removesuffix(".jsonl")
    config = next((uri for uri in source.side_uris if posixpath.basename(uri) == stem + RESOLVED_CONFIG_SUFFIX), None)
    reverification = reverification_of(source)
    return {
        "resolved_config": None if config is None else {"name": posixpath.basename(config),
                                                        "sha256": file_sha256(config)[0]},
        "reverified": reverification is not None,
        "forced": reverification is not None and reverification[1],
        "reverifies": None if reverification is None else posixpath.join(posixpath.dirname(source.source_id),
                                                                          reverification[0] + ".jsonl"),
    }


def reward_provenance_summary(provenances: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One source's trajectories' ``reward_provenance`` in a few counts (its batch summary, the
    manifests, cards and report): how many trajectories each verifier and judge model scored,
    and the source's own part. None: no trajectory of it has one.

    >>> reward_provenance_summary([{"verifier": "v", "judge_models": ["j"], "resolved_config": None,
    ...     "reverified": False, "forced": False, "reverifies": None}])["verifiers"]
    {'v': 1}
    """
    if not provenances:
        return None
    verifiers = Counter(str(p["verifier"]) for p in provenances if p.get("verifier"))
    judges = Counter(model for p in provenances for model in p.get("judge_models") or [])
    first = provenances[0]
    return {"trajectories": len(provenances), "verifiers": dict(sorted(verifiers.items())),
            "judge_models": dict(sorted(judges.items())),
            **{key: first.get(key) for key in ("resolved_config", "reverified", "forced", "reverifies")}}


def reward_provenance_lines(sources: list[dict[str, Any]]) -> list[str]:
    """Where the rewards came from, per source that says (``reward_provenance``): its verifiers
    and judge models (with how many trajectories each scored), the run's resolved config and
    whether the rewards were re-verified (forced or not). Nothing when no source says."""
    said = [s for s in sources if s.get("reward_provenance")]
    if not said:
        return []

    def counts(named: dict[str, int]) -> str:
        return ", ".join(f"{name} ({count})" for name, count in named.items()) or "none"

    rows = []
    for source in said:
        p = source["reward_provenance"]
        config = p.get("resolved_config")
        rows.append([source["source_id"], counts(p["verifiers"]), counts(p["judge_models"]),
                     f"{config['name']} ({config['sha256'][:12]})" if config else "not beside it",
                     ("forced " if p.get("forced") else "") + f"re-verification of {p['reverifies']}"
                     if p.get("reverified") else "as collected"])
    return ["", "## Where the rewards came from", "",
            *table(["source", "verifier (trajectories)", "judge models", "resolved config", "reward"], rows)]
