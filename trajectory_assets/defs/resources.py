"""Resources: where rollouts come from, where outputs go, and the curation config."""


import dagster as dg

from trajectory_assets.config import ConfigError, PipelineConfig, load_config
from trajectory_assets.io.storage import Storage


class RolloutSources(dg.ConfigurableResource):
    """Folders (searched recursively for *.jsonl / *.jsonl.gz) or single files."""

    paths: list[str]


class TrajectoryStorage(dg.ConfigurableResource):
    """Root folder (or fsspec URL) that every asset writes under."""

    root: str

    def open(self) -> Storage:
        return Storage(self.root)


class PipelineSettings(dg.ConfigurableResource):
    """Curation and export settings, from an optional YAML file (see config.example.yaml)."""

    config_file: str | None = None

    def load(self) -> PipelineConfig:
        """The config, or a failure that is never retried: the same file would fail again."""
        try:
            return load_config(self.config_file)
        except ConfigError as error:
            raise dg.Failure(description=str(error), allow_retries=False) from None
