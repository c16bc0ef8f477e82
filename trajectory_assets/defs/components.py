"""Sources and datasets declared in YAML, one ``defs.yaml`` per instance (Dagster Components),
read into a validated ``project.Project``.

A catalog folder holds the declarations; the names of its sub-folders are free::

    catalog/
      sources/<any>/defs.yaml     type: trajectory_assets.defs.components.RolloutSource
      datasets/<any>/defs.yaml    type: trajectory_assets.defs.components.TrainingDataset

Dagster reads each file: its ``type``, its ``attributes`` against the component's fields (an
unknown or missing attribute, a wrong type, each with its file and line) and the templates in
its strings (``"s3://{{ env.ROLLOUT_BUCKET }}/swe"``). ``load_catalog`` then checks what one
file declares (export names, config sections, the cron) and what spans files
(``project.validate``), and makes relative paths absolute against the project folder (the
catalog's parent). Every error is a ``ProjectError`` of one line naming the file, the line
and the attribute.
"""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from pydantic import BaseModel, Field, ValidationError

from trajectory_assets.config import ConfigError, ConversionConfig, PipelineConfig, RedactionConfig, load_config
from trajectory_assets.project import (
    DEFAULT_FRESHNESS_MINUTES,
    DEFAULT_REFRESH_CRON,
    DatasetSpec,
    Project,
    ProjectError,
    SourceSpec,
    declaration_site,
    shown,
    validate,
)

# what Dagster reads as a component's declaration in a folder (its component.yaml is deprecated)
DECLARATION_FILES = ("defs.yaml", "defs.yml")
# the config sections a source's settings hold; every other section is a dataset's
SOURCE_SECTIONS = ("conversion", "redaction")


class RolloutSource(dg.Component, dg.Model, dg.Resolvable):
    """Rollout files ingested once, into their own storage, whatever datasets read them."""

    name: str = Field(description="its assets' key prefix and its partitions' name: letters, digits and "
                                  "underscores, starting with a letter; unique in the catalog")
    uris: list[str] | str = Field(description="its rollouts: folders, files or s3:// prefixes (one or a list); "
                                              "a relative path is relative to the project folder")
    storage: str = Field(description="where its raw records, validated trajectories and quarantine are written "
                                     "(a folder or an s3:// prefix)")
    conversion: dict[str, Any] | None = Field(None, description="how its rollouts are read: the config file's "
                                                                "conversion section (config.ConversionConfig)")
    redaction: dict[str, Any] | None = Field(None, description="which secrets are replaced before anything is "
                                                               "stored: the config file's redaction section")

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """Nothing of its own: a source's ingest checks its batches against the benchmarks of
        every dataset reading it, and those are declared in other files, so the code location
        builds all assets from the whole catalog (``load_catalog``) instead."""
        return dg.Definitions()


class TrainingDataset(dg.Component, dg.Model, dg.Resolvable):
    """Exports and a report built from one or more sources, with their own schedule."""

    name: str = Field(description="its assets' key prefix and group: letters, digits and underscores, starting "
                                  "with a letter; unique in the catalog")
    sources: list[str] = Field(description="the names of the sources it reads")
    storage: str = Field(description="where its exports and report are written (a folder or an s3:// prefix); "
                                     "no other dataset's")
    exports: list[str] | None = Field(None, description="the exports it builds (exports/registry.py); "
                                                        "omitted: every one")
    config: dict[str, Any] | None = Field(
        None, description="its curation: the config file's sections but conversion and redaction (the source's)")
    config_file: str | None = Field(None, description="a config file holding those sections instead of config")
    refresh_cron: str = Field(DEFAULT_REFRESH_CRON, description="when it is rebuilt (cron, five fields)")
    freshness_minutes: int = Field(DEFAULT_FRESHNESS_MINUTES,
                                   description="how old its exports may be before they count as overdue")

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """Nothing of its own: its assets depend on the ingest assets of sources declared in
        other files, so the code location builds all assets from the whole catalog
        (``load_catalog``) instead."""
        return dg.Definitions()


COMPONENT_TYPES: dict[str, type[RolloutSource | TrainingDataset]] = {
    f"{__name__}.{component.__name__}": component for component in (RolloutSource, TrainingDataset)}


def load_catalog(folder: Path) -> Project:
    """The sources and datasets declared under ``folder``, checked; relative paths in them are
    relative to the project folder, ``folder``'s parent."""
    folder = Path(os.path.abspath(folder))
    if not folder.is_dir():
        raise ProjectError(f"{shown(folder)}: there is no catalog folder there")
    files = _declaration_files(folder)
    if not files:
        raise ProjectError(f"{shown(folder)}: the catalog declares nothing (no defs.yaml under it)")
    declared = [(file, _component(file, folder.parent)) for file in files]
    sources = tuple(_source(file, component, folder.parent) for file, component in declared
                    if isinstance(component, RolloutSource))
    validate(Project(sources, ()))  # their names first: the datasets name them
    by_name = {source.name: source for source in sources}
    datasets = tuple(_dataset(file, component, folder.parent, by_name) for file, component in declared
                     if isinstance(component, TrainingDataset))
    project = Project(sources, datasets)
    validate(project)
    return project


def _declaration_files(folder: Path) -> list[Path]:
    files = sorted(path for name in DECLARATION_FILES for path in folder.rglob(name))
    for file in files:
        for other in files:
            if other.parent == file.parent and other != file:
                raise ProjectError(f"{shown(file)}: its folder also holds {other.name}; one declaration per folder")
            if other.parent in file.parents[1:]:
                # Dagster reads a folder with a defs.yaml as one component and nothing below it
                raise ProjectError(f"{shown(file)}: it is inside the folder of {shown(other)}, and a folder "
                                   "declaring a component holds none below it; give it a folder of its own")
    return files


def _component(file: Path, project_folder: Path) -> RolloutSource | TrainingDataset:
    component_type = _component_type(file)
    # Dagster reads a defs module, a package whose path is a folder: one per file, so each
    # file is read alone and its errors are its own. Only its own YAML is read: a catalog
    # holds no Python
    package = types.ModuleType("trajectory_assets_catalog")
    package.__path__, package.__file__ = [str(file.parent)], None
    try:
        component = dg.ComponentTree.from_module(package, project_folder).load_component(file.parent)
    except Exception as error:  # Dagster raises its own classes, wrapped; the cause says what is wrong
        raise ProjectError(_dagster_error(file, COMPONENT_TYPES[component_type], error)) from error
    assert isinstance(component, COMPONENT_TYPES[component_type])
    return component


def _component_type(file: Path) -> str:
    """The file's component type, checked before Dagster imports what it names."""
    try:
        document = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise ProjectError(f"{shown(file)}:{mark.line + 1 if mark else 1}: not valid YAML: "
                           f"{error.problem or error.context}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ProjectError(f"{shown(file)}: cannot be read: {_one_line(str(error))}") from None
    if not isinstance(document, dict):
        raise ProjectError(f"{shown(file)}:1: a declaration is a mapping of type and attributes")
    component_type = document.get("type")
    if component_type not in COMPONENT_TYPES:
        problem = f"unknown component type {component_type!r}" if component_type else "missing"
        raise ProjectError(f"{declaration_site(file, 'type')}: {problem}; a catalog declares "
                           f"{' or '.join(COMPONENT_TYPES)}")
    return component_type


def _dagster_error(file: Path, component: type[BaseModel], error: BaseException) -> str:
    """One line naming the file, line and attribute of what Dagster raised while loading."""
    cause: BaseException | None = error
    while cause is not None:
        innermost = cause
        if isinstance(cause, ValidationError):
            first = cause.errors()[0]
            if "source_position" in first.get("ctx", {}):
                # Dagster's: the location and its line ("attributes.exports.list[str].1 at f:7")
                path = _attribute_path(str(first["loc"][0]).rsplit(" at ", 1)[0].split("."))
            else:  # the component's own fields, checked once templates are rendered
                path = _attribute_path(["attributes", *first["loc"]])
            attributes = component if path.startswith("attributes.") else None
            return f"{declaration_site(file, path)}: {_problem(first, attributes)}"
        template = _template_error(str(cause))
        if template:
            return f"{declaration_site(file, template[0])}: {template[1]}"
        cause = cause.__cause__ or cause.__context__
    # a template's own error (an environment variable env('NAME') names that is not set) has
    # no location: its message names what is missing
    return f"{shown(file)}: {_one_line(str(innermost))}"


def _template_error(message: str) -> tuple[str, str] | None:
    """A template that failed to render: Dagster's message starts ``file:line - path``, its
    last line says why."""
    lines = [line for line in message.splitlines() if line.strip()]
    head = lines[0].rsplit(" - ", 1) if lines else []
    if len(head) != 2 or not head[1].startswith("attributes"):
        return None
    return head[1], _one_line(lines[-1])


def _attribute_path(parts: list[Any]) -> str:
    """A pydantic location as the YAML path it points at, without the names of the union's
    types that pydantic puts in it (``list[str]``, ``str``: every attribute may be a template)."""
    path = ""
    for part in parts:
        if isinstance(part, int) or (isinstance(part, str) and part.isdigit()):
            path += f"[{part}]"
        elif not _is_type_tag(part):
            path += f".{part}" if path else part
    return path


def _is_type_tag(part: str) -> bool:
    return part in ("str", "int", "float", "bool", "none") or part.startswith(("list[", "dict[", "tuple["))


def _problem(error: dict[str, Any], component: type[BaseModel] | None = None,
             unknown: str = "not a key Dagster reads here") -> str:
    """What is wrong, in one line; an unknown attribute of ``component`` with the ones it takes."""
    if error["type"] == "extra_forbidden":
        if component:
            return f"unknown attribute; {component.__name__} takes {', '.join(component.model_fields)}"
        return unknown
    if error["type"] == "missing":
        return "required, and missing"
    got = repr(error["input"])
    return f"{error['msg']} (got {got if len(got) <= 60 else got[:57] + '...'})"


def _source(file: Path, component: RolloutSource, project_folder: Path) -> SourceSpec:
    uris = [component.uris] if isinstance(component.uris, str) else component.uris
    config = PipelineConfig(conversion=_section(file, "attributes.conversion", ConversionConfig,
                                                component.conversion or {}),
                            redaction=_section(file, "attributes.redaction", RedactionConfig,
                                               component.redaction or {}))
    return SourceSpec(component.name, tuple(_located(file, f"uris[{index}]", uri, project_folder)
                                            for index, uri in enumerate(uris)),
                      _located(file, "storage", component.storage, project_folder), config=config,
                      declared_in=str(file))


def _dataset(file: Path, component: TrainingDataset, project_folder: Path,
             sources: dict[str, SourceSpec]) -> DatasetSpec:
    read = []
    for index, name in enumerate(component.sources):
        where = declaration_site(file, f"attributes.sources[{index}]")
        if name not in sources:
            raise ProjectError(f"{where}: unknown source {name!r}; the catalog declares "
                               f"{', '.join(sources) or 'no source'}")
        if name in component.sources[:index]:
            raise ProjectError(f"{where}: source {name!r} is listed twice")
        read.append(sources[name])
    config_file, config = _dataset_config(file, component, project_folder)
    if component.freshness_minutes < 1:
        raise ProjectError(f"{declaration_site(file, 'attributes.freshness_minutes')}: a number of minutes, "
                           f"at least 1 (got {component.freshness_minutes})")
    return DatasetSpec(component.name, tuple(read), _located(file, "storage", component.storage, project_folder),
                       config_file, config, _exports(file, component.exports),
                       _refresh_cron(file, component.refresh_cron), component.freshness_minutes,
                       declared_in=str(file))


def _exports(file: Path, exports: list[str] | None) -> tuple[str, ...] | None:
    if exports is None:
        return None
    from trajectory_assets.exports.registry import EXPORTS_BY_NAME  # pandas and every export module

    if not exports:
        raise ProjectError(f"{declaration_site(file, 'attributes.exports')}: an empty list builds no export; "
                           "leave exports out for every one")
    for index, name in enumerate(exports):
        where = declaration_site(file, f"attributes.exports[{index}]")
        if name not in EXPORTS_BY_NAME:
            raise ProjectError(f"{where}: unknown export {name!r}; choose from {', '.join(EXPORTS_BY_NAME)}")
        if name in exports[:index]:
            raise ProjectError(f"{where}: export {name!r} is listed twice")
    return tuple(exports)


def _dataset_config(file: Path, component: TrainingDataset, project_folder: Path) -> tuple[str | None, PipelineConfig]:
    if component.config_file is None:
        stray = next((section for section in SOURCE_SECTIONS if section in (component.config or {})), None)
        if stray:
            raise ProjectError(f"{declaration_site(file, f'attributes.config.{stray}')}: {stray} belongs to the "
                               "source: set it in the attributes of the RolloutSource")
        config = _section(file, "attributes.config", PipelineConfig, component.config or {})
        return None, _local_benchmarks(file, config, project_folder, "config.decontamination.benchmarks[{}].path")
    where = declaration_site(file, "attributes.config_file")
    if component.config is not None:
        raise ProjectError(f"{where}: a dataset takes config or config_file, not both")
    config_file = _located(file, "config_file", component.config_file, project_folder)
    try:
        config = load_config(config_file)
    except ConfigError as error:
        raise ProjectError(f"{where}: {_one_line(str(error))}") from None
    stray = [section for section in SOURCE_SECTIONS if section in config.model_fields_set]
    if stray:
        raise ProjectError(f"{where}: {shown(config_file)} sets {' and '.join(stray)}, which belong to the source: "
                           "set them in the attributes of the RolloutSource")
    return config_file, _local_benchmarks(file, config, project_folder, "config_file")


def _section(file: Path, path: str, model: type[BaseModel], value: dict[str, Any]) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        location = _attribute_path([*path.split("."), *first["loc"]])
        raise ProjectError(f"{declaration_site(file, location)}: "
                           f"{_problem(first, unknown='unknown key (config.example.yaml lists every key)')}") from None


def _local_benchmarks(file: Path, config: PipelineConfig, project_folder: Path, attribute: str) -> PipelineConfig:
    """The benchmarks' paths, like every path of the catalog, relative to the project folder
    (``attribute``: where each is declared, formatted with its index)."""
    decontamination = config.decontamination
    if not decontamination.benchmarks:
        return config
    benchmarks = [benchmark.model_copy(update={"path": _located(
        file, attribute.format(index), benchmark.path, project_folder)})
        for index, benchmark in enumerate(decontamination.benchmarks)]
    return config.model_copy(update={"decontamination": decontamination.model_copy(update={"benchmarks": benchmarks})})


def _located(file: Path, attribute: str, value: str, project_folder: Path) -> str:
    """A path made absolute against the project folder; a URI (``s3://...``) as it is."""
    if not value.strip():
        raise ProjectError(f"{declaration_site(file, f'attributes.{attribute}')}: empty; name a folder, a file "
                           "or an s3:// prefix")
    if "://" in value:
        return value
    return os.path.normpath(project_folder / os.path.expanduser(value))


def _refresh_cron(file: Path, cron: str) -> str:
    try:  # Dagster's own check of a schedule's cron
        dg.ScheduleDefinition(name="refresh", cron_schedule=cron, job_name="refresh")
    except dg.DagsterInvalidDefinitionError:
        raise ProjectError(f"{declaration_site(file, 'attributes.refresh_cron')}: {cron!r} is not a cron schedule "
                           "Dagster runs: five fields, minute hour day month weekday (e.g. '0 3 * * *')") from None
    return cron


def _one_line(text: str) -> str:
    return " ".join(text.split())
