"""The code and config each asset is computed with: its code version (``code_versions.py``
hashes them), set on every asset when the definitions are built."""

from __future__ import annotations

import dagster as dg

from trajectory_assets.code_versions import code_version
from trajectory_assets.config import ConfigError, PipelineConfig, load_config
from trajectory_assets.exports.registry import EXPORTS

INGEST_ASSETS = ("raw_rollouts", "validated_trajectories", "quarantined_records")
# asset -> (the modules that compute it, the config sections it reads)
COMPUTED_BY: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # the pure module that writes and checks a batch's files (the asset in defs/ingest.py reports
    # them); it does not import decontamination, whose flags carry a version of their own
    **{name: (("trajectory_assets.ingest.batch",), ("conversion", "redaction")) for name in INGEST_ASSETS},
    **{export.asset_name: ((export.render.__module__, "trajectory_assets.exports.shard_phase"),
                           (export.family, "split", "tokenizer", "card", "decontamination", "shards"))
       for export in EXPORTS},
    "stats_report": (("trajectory_assets.defs.reports",), ("report", "grpo")),
}
def asset_code_versions(config: str | PipelineConfig | None, computed_by=None, imports=None,
                        **kwargs) -> dict[str, str]:
    """Every asset's code version under ``config`` (a config file, or a declaration's config).
    A config file that does not load is hashed as its error: the runs fail on it with a clear
    message, not the code location. ``imports``: a cache shared between calls."""
    if isinstance(config, PipelineConfig):
        dumped = config.model_dump()
    else:
        try:
            dumped = load_config(config).model_dump()
        except ConfigError as error:
            dumped = {"config_error": str(error)}
    computed_by = COMPUTED_BY if computed_by is None else computed_by
    imports = {} if imports is None else imports  # the assets share most of their modules: each is read once
    return {asset: code_version(modules, sections, dumped, imports=imports, **kwargs)
            for asset, (modules, sections) in computed_by.items()}


def with_code_versions(defs: dg.Definitions, versions: dict[str, str]) -> dg.Definitions:
    """``defs`` with the code version of every asset ``versions`` names."""
    return defs.map_resolved_asset_specs(
        func=lambda spec: spec.replace_attributes(code_version=versions.get(spec.key.to_user_string(),
                                                                            spec.code_version)))
