"""The sources and datasets of a deployment, as plain values the definitions are built from.

A *source* is rollout files (folders, files, ``s3://`` prefixes) ingested once into its own
storage, one batch partition per file, whatever reads it. A *dataset* reads one or more
sources and writes its exports and report under its own storage root. They are declared in
YAML (``defs/components.py`` reads them) or come from the environment: the environment's
setup is one source and one dataset, both named ``""``, whose assets keep their unprefixed
keys (``validated_trajectories``, ``sft_dataset``) and whose batches keep the partitions
definition ``rollout_batches``, so an existing instance keeps its history.

No Dagster here: ``validate`` checks a whole project before anything is built, so an error
names the file and field it comes from.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from trajectory_assets import PROJECT_ROOT, layout
from trajectory_assets.config import ConfigError, DecontaminationConfig, PipelineConfig, load_config

ENVIRONMENT = ""  # the name of the environment's source and dataset (unprefixed keys)
# a name becomes an asset key prefix, a partitions definition's and a job's name: Dagster
# allows letters, digits and underscores there
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
DEFAULT_REFRESH_CRON = "0 3 * * *"
# a day and an hour: the nightly refresh plus its margin (change it with the cron)
DEFAULT_FRESHNESS_MINUTES = 25 * 60
BUNDLED_SAMPLE = PROJECT_ROOT / "samples" / "rollouts"


def partitions_name(source: str) -> str:
    """The dynamic partitions definition of a source's batches (one partition per file)."""
    return layout.BATCH_PARTITIONS if source == ENVIRONMENT else f"{source}_batches"


class ProjectError(Exception):
    """A declaration that cannot be built; the message is one line naming the file and field."""


@dataclass(frozen=True)
class SourceSpec:
    name: str
    uris: tuple[str, ...]
    storage: str  # where its raw records, validated trajectories and quarantine are written
    # the settings of its conversion and redaction (the other sections are the datasets')
    config_file: str | None = None
    config: PipelineConfig = field(default_factory=PipelineConfig, compare=False)
    declared_in: str | None = None

    @property
    def partitions(self) -> str:
        return partitions_name(self.name)

    @property
    def key_prefix(self) -> list[str]:
        return [self.name] if self.name else []

    def where(self, attribute: str) -> str:
        return _where(self.declared_in, attribute, "source", self.name)


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    sources: tuple[SourceSpec, ...]
    storage: str  # its exports, report and gathered quarantine
    config_file: str | None = None
    config: PipelineConfig = field(default_factory=PipelineConfig, compare=False)
    exports: tuple[str, ...] | None = None  # None: every export of the registry
    refresh_cron: str = DEFAULT_REFRESH_CRON
    freshness_minutes: int = DEFAULT_FRESHNESS_MINUTES
    declared_in: str | None = None

    @property
    def key_prefix(self) -> list[str]:
        return [self.name] if self.name else []

    def where(self, attribute: str) -> str:
        return _where(self.declared_in, attribute, "dataset", self.name)


@dataclass(frozen=True)
class Project:
    sources: tuple[SourceSpec, ...]
    datasets: tuple[DatasetSpec, ...]

    def readers(self, source: SourceSpec) -> list[DatasetSpec]:
        """The datasets that read ``source``."""
        return [dataset for dataset in self.datasets if source in dataset.sources]

    def benchmark_sets(self, source: SourceSpec) -> list[DecontaminationConfig]:
        """The decontamination settings of every dataset reading ``source``, each once: ingest
        flags a batch against each, and each dataset uses its own."""
        sets: list[DecontaminationConfig] = []
        for dataset in self.readers(source):
            if dataset.config.decontamination.benchmarks and dataset.config.decontamination not in sets:
                sets.append(dataset.config.decontamination)
        return sets

    def near_dedup(self, source: SourceSpec) -> bool:
        """Whether a dataset reading ``source`` uses ``dedup: near`` in a family: ingest then
        stores its trajectories' MinHash signatures."""
        return any(dataset.config.near_dedup for dataset in self.readers(source))

    def source(self, name: str) -> SourceSpec:
        return next(source for source in self.sources if source.name == name)

    def dataset(self, name: str) -> DatasetSpec:
        return next(dataset for dataset in self.datasets if dataset.name == name)


def environment_project(uris: list[str], storage: str, config_file: str | None, config: PipelineConfig,
                        refresh_cron: str = DEFAULT_REFRESH_CRON,
                        freshness_minutes: int = DEFAULT_FRESHNESS_MINUTES, name: str = ENVIRONMENT) -> Project:
    """One source and one dataset of that source, into one storage root (today's setup: the
    environment's, or an ad hoc CLI call's under its own ``name``)."""
    source = SourceSpec(name, tuple(uris), storage, config_file, config)
    dataset = DatasetSpec(name, (source,), storage, config_file, config, refresh_cron=refresh_cron,
                          freshness_minutes=freshness_minutes)
    return Project((source,), (dataset,))


@dataclass(frozen=True)
class RunSettings:
    """One source read into one dataset in one storage root: the environment's setup (named
    ``""``, unprefixed keys) or an ad hoc CLI call's (named ``project.call_name``); and the
    deployment's sensor interval and executor."""

    sources: list[str]
    storage: str
    config_file: str | None = None
    # how often the batch sensor lists the sources and the automation looks for changed inputs:
    # a few seconds, so that `dagster dev` keeps pace with the CLI (the listing gives every
    # file's fingerprint: an unchanged file costs no request of its own)
    sensor_interval_seconds: int = 3
    refresh_cron: str = DEFAULT_REFRESH_CRON
    executor: str = "multiprocess"  # how the datasets jobs' steps run: "multiprocess", or "k8s" (a pod each)
    # the exports and the report fail their freshness policy when not rebuilt for this long
    freshness_minutes: int = DEFAULT_FRESHNESS_MINUTES
    name: str = ENVIRONMENT

    @classmethod
    def from_env(cls) -> "RunSettings":
        """TRAJECTORY_SOURCE (comma-separated), TRAJECTORY_STORAGE, TRAJECTORY_CONFIG,
        TRAJECTORY_SENSOR_INTERVAL (seconds), TRAJECTORY_REFRESH_CRON, TRAJECTORY_EXECUTOR,
        TRAJECTORY_FRESHNESS_MINUTES."""
        sources = [s.strip() for s in os.environ.get("TRAJECTORY_SOURCE", "").split(",") if s.strip()]
        return cls(
            sources=sources or [str(BUNDLED_SAMPLE)],
            storage=os.environ.get("TRAJECTORY_STORAGE") or str(Path.cwd() / "data"),
            config_file=os.environ.get("TRAJECTORY_CONFIG") or None,
            sensor_interval_seconds=int(os.environ.get("TRAJECTORY_SENSOR_INTERVAL") or 3),
            refresh_cron=os.environ.get("TRAJECTORY_REFRESH_CRON") or DEFAULT_REFRESH_CRON,
            executor=os.environ.get("TRAJECTORY_EXECUTOR") or "multiprocess",
            freshness_minutes=int(os.environ.get("TRAJECTORY_FRESHNESS_MINUTES") or DEFAULT_FRESHNESS_MINUTES),
        )

    def project(self) -> Project:
        try:
            config = load_config(self.config_file)
        except ConfigError:  # the runs fail on it, saying why; the code location still loads
            config = PipelineConfig()
        return environment_project(self.sources, self.storage, self.config_file, config, self.refresh_cron,
                                   self.freshness_minutes, name=self.name)


def resource_key(name: str, kind: str) -> str:
    """The key of a source's or dataset's resource of ``kind`` (sources, storage, settings): the
    environment's keep today's unprefixed keys.

    >>> resource_key("", "storage"), resource_key("swe_sft", "storage")
    ('storage', 'swe_sft__storage')
    """
    return f"{name}__{kind}" if name else kind


def call_settings(settings: RunSettings) -> str:
    """An ad hoc call's settings as the JSON its forked processes rebuild its definitions from."""
    return json.dumps(asdict(settings), sort_keys=True)


def call_name(uris: list[str], storage: str) -> str:
    """An ad hoc CLI call's namespace, derived from its sources and storage: two calls on the
    same rollouts into the same storage share their batches, any other two never collide.

    >>> call_name(["/data/a"], "/out") == call_name(["/data/a"], "/out/")
    True
    >>> call_name(["/data/a"], "/out") == call_name(["/data/b"], "/out")
    False
    """
    identity = "\n".join([*sorted(uri.rstrip("/") for uri in uris), "->", storage.rstrip("/")])
    return "adhoc_" + hashlib.sha256(identity.encode()).hexdigest()[:10]


def merged(*projects: Project) -> Project:
    return Project(tuple(s for p in projects for s in p.sources), tuple(d for p in projects for d in p.datasets))


def validate(project: Project) -> None:
    """Every rule that spans declarations, checked before anything is built; the first broken
    one is raised as a ``ProjectError`` naming the file and field."""
    names: dict[str, str] = {}
    for spec in [*project.sources, *project.datasets]:
        kind = "source" if isinstance(spec, SourceSpec) else "dataset"
        if spec.name != ENVIRONMENT and not NAME.fullmatch(spec.name):
            raise ProjectError(f"{spec.where('name')}: {spec.name!r} cannot be part of an asset key: use letters, "
                               "digits and underscores, starting with a letter")
        if spec.name in names and not _pair(project, spec.name):
            raise ProjectError(f"{spec.where('name')}: the name {spec.name!r} is already the {names[spec.name]}; "
                               "every source and dataset needs a name of its own")
        names.setdefault(spec.name, f"{kind} declared in {_declared(spec)}")
    source_roots: dict[str, SourceSpec] = {}
    for source in project.sources:
        if not source.uris:
            raise ProjectError(f"{source.where('uris')}: a source needs at least one URI")
        for other in project.sources:
            if other is source:
                continue
            for index, uri in enumerate(source.uris):
                for outer in other.uris:
                    if _inside(uri, outer):
                        raise ProjectError(f"{source.where(f'uris[{index}]')}: {uri} is inside source {other.name!r} "
                                           f"({outer}): its files would be two sources' batches")
        # two sources in one root would write their batches' files over each other's
        root = source.storage.rstrip("/")
        if root in source_roots:
            raise ProjectError(f"{source.where('storage')}: {source.storage} is already the storage of source "
                               f"{source_roots[root].name!r} ({_declared(source_roots[root])}); each source "
                               "writes its own root")
        source_roots[root] = source
    roots: dict[str, DatasetSpec] = {}
    for dataset in project.datasets:
        if not dataset.sources:
            raise ProjectError(f"{dataset.where('sources')}: a dataset reads at least one source")
        for index, source in enumerate(dataset.sources):
            if source not in project.sources:
                raise ProjectError(f"{dataset.where(f'sources[{index}]')}: unknown source {source.name!r}; the "
                                   f"project declares {', '.join(repr(s.name) for s in project.sources) or 'none'}")
        root = dataset.storage.rstrip("/")
        if root in roots:
            raise ProjectError(f"{dataset.where('storage')}: {dataset.storage} is already the storage of dataset "
                               f"{roots[root].name!r} ({_declared(roots[root])}); each dataset writes its own root")
        roots[root] = dataset


def _pair(project: Project, name: str) -> bool:
    """A source and a dataset may share a name only as one setup's pair (the environment's, or
    an ad hoc call's): one source into the storage its one dataset writes."""
    sources = [s for s in project.sources if s.name == name]
    datasets = [d for d in project.datasets if d.name == name]
    return len(sources) == len(datasets) == 1 and datasets[0].sources == (sources[0],) \
        and sources[0].declared_in is None


def _inside(uri: str, outer: str) -> bool:
    uri, outer = uri.removeprefix("file://").rstrip("/"), outer.removeprefix("file://").rstrip("/")
    return uri == outer or uri.startswith(outer + "/")


def _where(declared_in: str | None, attribute: str, kind: str, name: str) -> str:
    if declared_in is None:
        return f"the environment's {kind} ({attribute})"
    return declaration_site(declared_in, f"attributes.{attribute}")


def _declared(spec: SourceSpec | DatasetSpec) -> str:
    return shown(spec.declared_in) if spec.declared_in else "the environment"


def declaration_site(file: str | Path, path: str) -> str:
    """Where a value of a declaration file is, for an error message: ``file:line path``, the
    line of the deepest part of ``path`` (``attributes.exports[1]``) the file holds, so a
    missing attribute points at the mapping it is missing from."""
    line = _line_of(Path(file), _path_parts(path))
    return f"{shown(file)}:{line} {path}" if line else f"{shown(file)} {path}"


def shown(file: str | Path) -> str:
    """A file as messages name it: relative to the working directory when it is inside it,
    as a terminal or an editor opens it from there; else absolute."""
    relative = os.path.relpath(file)
    return str(file) if relative.startswith("..") else relative


def _path_parts(path: str) -> list[str | int]:
    """
    >>> _path_parts("attributes.config.decontamination.benchmarks[0].path")
    ['attributes', 'config', 'decontamination', 'benchmarks', 0, 'path']
    """
    return [int(part[1:-1]) if part.startswith("[") else part for part in re.findall(r"\[\d+\]|[^.\[\]]+", path)]


def _line_of(file: Path, parts: list[str | int]) -> int | None:
    try:
        node = yaml.compose(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in parts:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            entry = next(((key, value) for key, value in node.value if key.value == part), None)
            if entry is None:
                break
            line, node = entry[0].start_mark.line + 1, entry[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
