"""Resources: where rollouts come from, where outputs go, and the curation config."""


import dagster as dg

from trajectory_assets.config import ConfigError, DecontaminationConfig, PipelineConfig, load_config
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
    """Curation and export settings: an optional YAML file (see config.example.yaml), or the
    sections a declaration gives (``inline``, JSON). A source's settings also name the
    benchmark sets of every dataset that reads it (``benchmark_sets``, JSON each; None: the
    config's own), which its ingest flags trajectories against, and whether one of them uses
    ``dedup: near`` (``near_signatures``; None: the config's own), for which its ingest signs them."""

    config_file: str | None = None
    inline: str | None = None
    benchmark_sets: list[str] | None = None
    near_signatures: bool | None = None

    def load(self) -> PipelineConfig:
        """The config, or a failure that is never retried: the same file would fail again."""
        try:
            if self.inline is not None:
                return PipelineConfig.model_validate_json(self.inline)
            return load_config(self.config_file)
        except ConfigError as error:
            raise dg.Failure(description=str(error), allow_retries=False) from None

    def ingest_benchmarks(self, config: PipelineConfig) -> list[DecontaminationConfig]:
        """The benchmark sets a batch of the source is flagged against at ingest."""
        if self.benchmark_sets is None:
            return [config.decontamination]
        return [DecontaminationConfig.model_validate_json(found) for found in self.benchmark_sets]

    def ingest_near_signatures(self, config: PipelineConfig) -> bool:
        """Whether ingest stores a batch's MinHash signatures (a dataset reading the source uses ``dedup: near``)."""
        return config.near_dedup if self.near_signatures is None else self.near_signatures
