"""Headless CLI: runs the same asset jobs as the UI (ingest runs over ranges of batches,
then the datasets job), like the sensor and automation do in `dagster dev`, in this one
process (forking from a preloaded server when the inputs are large: ``runs/runner.py``).
Every run is recorded in DAGSTER_HOME (the project's dagster_home/ unless set), so `make ui`
shows them and can re-execute them.

    trajectory-assets run --source SRC [--source SRC ...] --storage DEST [--config FILE]
                          [--exports NAME,NAME,...] [--workers N]
                          [--execution auto|in-process|forked] [--verbose]
    trajectory-assets run --dataset NAME [--exports ...] [--workers N] [--execution ...]
    trajectory-assets list

``--dataset`` builds a declared dataset (``catalog/``): it ingests what of its sources is not
ingested yet, under a lock per source, so calls sharing a source ingest each batch once. ``--source/--storage`` is an ad hoc call: its batches and assets have a
namespace of their own, derived from its sources and storage (``adhoc_<hash>/...``), so it
never meets a declared source or another call; a call whose sources, storage and config are
the environment's dataset's (``make run``) is that dataset, unprefixed. ``list`` shows the
declared sources and datasets with their last materialization.

Exit code 0 when the run completes (quarantined records are not failures); 2 with a
one-line reason when the arguments, a source, the config or storage cannot be used; 1 when
a step fails (for example a blocking contract check). A source that cannot be read at all
(its read fails before its first record, e.g. a plain-text file named ``.jsonl.gz``) does
not stop the run: every other batch and the exports are still written, then the exit code
is 2 with the unreadable sources named. A source that breaks after some records keeps
them (its failure is an ``unreadable_source`` quarantine row) and is not a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXIT_STEP_FAILED = 1
EXIT_UNUSABLE_INPUT = 2
EXIT_INTERRUPTED = 130


class _Help(argparse.HelpFormatter):
    """Names the exports only when the help is shown: the registry imports every contract
    (pandera, pandas, pyarrow), which this process needs for nothing else."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.dest == "exports":
            from trajectory_assets.exports.registry import EXPORTS

            return f"{action.help}: {', '.join(export.name for export in EXPORTS)}"
        return super()._get_help_string(action)


def main(argv: list[str] | None = None, single_call_process: bool = False) -> int:
    """``single_call_process``: this process exists for this one call (the console script), so
    its fork server may be forked from it (``runs/processes.py``, ``cli_fork_server``)."""
    parser = argparse.ArgumentParser(prog="trajectory-assets", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="materialize every asset (trajectories, exports, stats)",
                              formatter_class=_Help)
    run.add_argument("--source", action="append",
                     help="folder, .jsonl/.jsonl.gz file or s3://bucket/prefix; repeatable")
    run.add_argument("--storage", help="output folder or s3://bucket/prefix")
    run.add_argument("--dataset", help="a declared dataset (instead of --source/--storage/--config)")
    run.add_argument("--config", help="YAML config (see config.example.yaml)")
    run.add_argument(
        "--workers", type=int, default=None,
        help="forked processes at once: ingest runs, then the datasets run's steps (default: the CPUs "
             "this process may use)",
    )
    run.add_argument("--exports", help="comma-separated exports to build (default: all)")
    run.add_argument(
        "--execution", choices=("auto", "in-process", "forked"), default="auto",
        help="in-process: every run in this process; forked: ingest runs and the datasets run's steps in "
             "processes forked from a preloaded server; auto (default): in process for small inputs",
    )
    run.add_argument("--verbose", action="store_true", help="show Dagster's event log")
    commands.add_parser("list", help="the declared sources and datasets, with their last materialization")
    args = parser.parse_args(argv)
    if args.command == "list":
        return _list()
    if args.dataset is not None and (args.source or args.storage or args.config):
        parser.error("--dataset reads its sources, storage and config from its declaration: "
                     "give it without --source, --storage and --config")
    if args.dataset is None and not (args.source and args.storage):
        parser.error("give --source and --storage, or --dataset")
    return _run(args, single_call_process)


def _run(args: argparse.Namespace, single_call_process: bool) -> int:
    if not args.verbose:
        warnings.filterwarnings("ignore")  # Dagster's beta/preview notices are for developers
        os.environ["PYTHONWARNINGS"] = "ignore"  # and the fork server's processes'
    from trajectory_assets.runs.processes import Interrupts, stop_fork_server
    from trajectory_assets.runs.step_imports import set_arrow_purge_delay

    set_arrow_purge_delay()  # before pyarrow loads: the runs and steps forked from this process have it

    # first: every thread started from here on blocks SIGINT, which Interrupts takes
    with Interrupts() as interrupts:
        try:
            return _run_calls(args, interrupts, single_call_process)
        except KeyboardInterrupt:
            print("trajectory-assets: interrupted; its runs were canceled", file=sys.stderr)
            return EXIT_INTERRUPTED
        finally:
            stop_fork_server()


def _run_calls(args: argparse.Namespace, interrupts, single_call_process: bool) -> int:
    from trajectory_assets import PROJECT_ROOT, layout
    from trajectory_assets.config import ConfigError, load_config
    from trajectory_assets.ingest.decontamination import BenchmarkError, cached_index
    from trajectory_assets.redaction.redactor import check_rules
    from trajectory_assets.exports.token_budget import TokenizerError, check_tokenizer
    from trajectory_assets.runs.processes import cli_fork_server
    from trajectory_assets.runs.step_imports import import_what_steps_need
    from trajectory_assets.io.source_files import SourceError, batch_key, work_bytes
    from trajectory_assets.sources import discover_sources
    from trajectory_assets.progress import progress_for

    try:
        target, configs, named = (_declared_call(args.dataset) if args.dataset is not None else _ad_hoc_call(args))
    except CallError as error:
        print(f"trajectory-assets: {error}", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT
    storage = target.storage
    # fail fast, in one line, on what the user can fix
    exports = None if args.exports is None else [name.strip() for name in args.exports.split(",") if name.strip()]
    assets = None  # the whole datasets job: every export and the report
    if exports is not None:
        from trajectory_assets.exports.registry import EXPORTS_BY_NAME

        available = configs.exports or list(EXPORTS_BY_NAME)
        unknown = sorted(set(exports) - set(available))
        if unknown or not exports:
            print(f"trajectory-assets: unknown export(s) {unknown or args.exports!r}; choose from "
                  f"{', '.join(available)}", file=sys.stderr)
            return EXIT_UNUSABLE_INPUT
        assets = [EXPORTS_BY_NAME[name].asset_name for name in exports] + ["stats_report"]
    try:
        for config in configs.sources:
            check_rules(config.redaction)  # the ingest steps check them again before they redact
        if configs.dataset.tokenizer is not None:
            check_tokenizer(configs.dataset.tokenizer)  # the runs' steps load it; this process only checks
        cached_index(configs.dataset.decontamination)  # every benchmark readable (kept for in-process runs)
        found = discover_sources(named)
    except (ConfigError, SourceError, TokenizerError, BenchmarkError) as error:
        print(f"trajectory-assets: {error}", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT
    for source in target.sources:
        source_found = [found_source for found_source in found if any(_covers(found_source, uri)
                                                                         for uri in configs.uris[source.name])]
        source.batches = sorted({batch_key(found_source.source_id) for found_source in source_found})
        if source.found is not None:
            source.found = {batch_key(found_source.source_id): found_source for found_source in source_found}
    batches = target.batches
    batches_by_source = {path: sorted({batch_key(source.source_id) for source in found if _covers(source, path)})
                         for path in named}
    if empty := [path for path, keys in batches_by_source.items() if not keys]:
        from trajectory_assets.sources import formats_tried

        print(f"trajectory-assets: no file of a known kind in {', '.join(empty)} (a .jsonl/.jsonl.gz file of "
              f"records, or a folder of Harbor trials); the formats tried: {formats_tried()}", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT
    # open_instance() and the fork server's processes read it from the environment
    home = os.environ.setdefault("DAGSTER_HOME", str(PROJECT_ROOT / "dagster_home"))
    log = None if args.verbose else Path(home) / "logs" / "cli.log"  # Dagster's own output, the steps' too
    with _output_to(log):
        progress = progress_for(sys.stdout)
        from trajectory_assets.runs.run_plan import ingest_runs

        slots = args.workers or _cpu_count()
        runs = {"auto": ingest_runs(len(batches), work_bytes(found), slots), "in-process": 1,
                "forked": slots}[args.execution]
        forks = None
        if runs > 1:  # a fork server: forked from this process once it has imported the code location
            if single_call_process:
                import_what_steps_need()
                if target.call is not None:  # an ad hoc call's definitions, built once for every forked run
                    from trajectory_assets.definitions import call_definitions

                    call_definitions(target.call)
            forks = cli_fork_server(from_here=single_call_process)
        steps = {"auto": "auto", "in-process": "in_process", "forked": "multiprocess"}[args.execution]
        import dagster as dg

        from trajectory_assets.runs.runner import run_pipeline, unreadable_sources

        run_config = {
            **configs.run_config,
            "loggers": {"console": {"config": {"log_level": "DEBUG" if args.verbose else "CRITICAL"}}},
        }
        from trajectory_assets.runs.instance import open_instance

        with open_instance() as instance:
            try:
                run = run_pipeline(instance, target, run_config, slots=slots, runs=runs, assets=assets,
                                   progress=progress, forks=forks, steps=steps, taken=interrupts,
                                   batches_by_source=batches_by_source)
            except (dg.DagsterError, RuntimeError) as error:  # the instance or the code location cannot be used
                reason = " ".join(str(error).split())
                return _fail(f"trajectory-assets: {reason}" + (f" (see {log})" if log else ""))
            finally:
                progress.close()
    if run.unrecognised:
        from trajectory_assets.sources import formats_tried

        print(f"trajectory-assets: nothing could be read from {', '.join(run.unrecognised)}: no record of a known "
              f"format (every one is quarantined in {storage.rstrip('/')}/quarantine/batches/); the formats tried: {formats_tried()}; "
              "no export was written", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT
    if not run.success:
        print(f"trajectory-assets: run failed: {run.first_failure}", file=sys.stderr)
        return EXIT_STEP_FAILED

    store = target.store()
    stats = store.read_json(layout.STATS_JSON)
    print(
        f"records: {stats['records_read']} read = {stats['records_valid']} valid"
        f" + {stats['records_rejected']} quarantined"
    )
    for name, rows in stats["exports"].items():
        if exports is not None and name not in exports:
            continue  # another run's export, still in the storage
        print(f"{name}: {rows['train']} train, {rows['validation']} validation -> {store.uri(layout.export_folder(name))}")
    print(f"quarantine: {store.uri(layout.QUARANTINE)}")
    print(f"report: {store.uri(layout.STATS_MARKDOWN)}")
    print(f"page:   {store.uri(layout.REPORT_PAGE)} (plots, samples of every export, quarantine)")
    unreadable = unreadable_sources(store, batches)
    if unreadable:
        named = "; ".join(f"{uri} ({error})" for uri, error in unreadable)
        print(f"trajectory-assets: cannot read {len(unreadable)} source(s) at all: {named}", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT
    return 0


class CallError(Exception):
    """A call that cannot start (an unknown dataset, a catalog that does not load): one line."""


@dataclass
class _Configs:
    """What a call checks before any run, and what its runs' config says."""

    sources: list  # each source's PipelineConfig (its conversion and redaction)
    dataset: Any  # the dataset's PipelineConfig
    uris: dict[str, list[str]]  # source name -> its URIs
    run_config: dict = field(default_factory=dict)
    exports: list[str] | None = None  # the dataset's exports (None: every one)


def _ad_hoc_call(args: argparse.Namespace):
    """``--source/--storage``: the environment's dataset when they (and the config) are its,
    else a source and dataset of the call's own namespace (``project.call_name``)."""
    from trajectory_assets.config import ConfigError, load_config
    from trajectory_assets.defs.declared import declared_project
    from trajectory_assets.project import ENVIRONMENT, ProjectError, RunSettings, call_name, call_settings, resource_key
    from trajectory_assets.runs.run_plan import DatasetCall, SourceCall

    storage = args.storage if "://" in args.storage else str(Path(args.storage).resolve())
    sources = [s if "://" in s else str(Path(s).resolve()) for s in args.source]
    config_file = str(Path(args.config).resolve()) if args.config else None
    environment = RunSettings.from_env()
    try:
        built = declared_project()[1]
    except ProjectError as error:
        raise CallError(str(error)) from None
    if built and (sources, storage, config_file) == (environment.sources, environment.storage,
                                                     environment.config_file):
        name, call = ENVIRONMENT, None
    else:
        name = call_name(sources, storage)
        call = call_settings(RunSettings(sources, storage, config_file, name=name))
    try:
        config = load_config(config_file)
    except ConfigError as error:
        raise CallError(str(error)) from None
    # the call's sources, storage and config travel in each run's config (shown with the run in the UI)
    run_config = {"resources": {resource_key(name, "sources"): {"config": {"paths": sources}},
                                resource_key(name, "storage"): {"config": {"root": storage}},
                                resource_key(name, "settings"): {"config": {"config_file": config_file}}}}
    target = DatasetCall(name, storage, [SourceCall(name, storage, [])], call)
    return target, _Configs([config], config, {name: sources}, run_config), sources


def _declared_call(dataset_name: str):
    """``--dataset NAME``: a declared dataset and its sources, whose batches already ingested
    as they are now are not ingested again."""
    from trajectory_assets.defs.declared import declared_project
    from trajectory_assets.project import ProjectError
    from trajectory_assets.runs.run_plan import DatasetCall, SourceCall

    try:
        declared, _ = declared_project()
    except ProjectError as error:
        raise CallError(str(error)) from None
    datasets = {dataset.name: dataset for dataset in (declared.datasets if declared else ())}
    if dataset_name not in datasets:
        raise CallError(f"no dataset {dataset_name!r} is declared; declared: {', '.join(sorted(datasets)) or 'none'}"
                        " (trajectory-assets list)")
    dataset = datasets[dataset_name]
    target = DatasetCall(dataset.name, dataset.storage,
                         [SourceCall(source.name, source.storage, [], found={}) for source in dataset.sources])
    # the config its declaration's loading checked (a config_file is read then, as its defs.yaml is)
    configs = _Configs([source.config for source in dataset.sources], dataset.config,
                       {source.name: list(source.uris) for source in dataset.sources},
                       exports=list(dataset.exports) if dataset.exports else None)
    return target, configs, [uri for source in dataset.sources for uri in source.uris]


def _list() -> int:
    """The declared sources and datasets, each with its last materialization in the instance."""
    from trajectory_assets import PROJECT_ROOT
    from trajectory_assets.defs.declared import declared_project
    from trajectory_assets.project import ProjectError

    try:
        declared, environment = declared_project()
    except ProjectError as error:
        print(f"trajectory-assets: {error}", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT
    if declared is None or not (declared.sources or declared.datasets):
        print("no sources or datasets are declared (catalog/, or TRAJECTORY_CATALOG); the environment's dataset "
              "is built from TRAJECTORY_SOURCE")
        return 0
    os.environ.setdefault("DAGSTER_HOME", str(PROJECT_ROOT / "dagster_home"))
    import dagster as dg

    from trajectory_assets.defs.batches import asset_key
    from trajectory_assets.runs.instance import open_instance

    warnings.filterwarnings("ignore")
    with open_instance() as instance:
        def last(key) -> str:
            records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1).records
            if not records:
                return "never materialized"
            from datetime import datetime, timezone

            when = datetime.fromtimestamp(records[0].timestamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
            return f"last materialized {when}"

        print("sources:")
        for source in declared.sources:
            batches = len(instance.get_dynamic_partitions(source.partitions))
            print(f"  {source.name}: {', '.join(source.uris)} -> {source.storage}; {batches} batch(es); "
                  f"{last(asset_key(source.name, 'validated_trajectories'))}")
        print("datasets:")
        for dataset in declared.datasets:
            exports = ", ".join(dataset.exports) if dataset.exports else "every export"
            print(f"  {dataset.name}: reads {', '.join(s.name for s in dataset.sources)} -> {dataset.storage}; "
                  f"{exports}; report {last(asset_key(dataset.name, 'stats_report'))}")
    if environment:
        print("(the environment's dataset is built too: TRAJECTORY_SOURCE is set)")
    return 0


def _covers(source, path: str) -> bool:
    """Whether a discovered batch reads what the named path names: one of its files (its
    source, inputs or side files, a record's files) is the path or lies under it, or the path
    lies inside the batch (a trial named inside the job folder that is its batch)."""
    path = path.removeprefix("file://").rstrip("/")
    files = [source.uri, source.inputs_uri, *source.side_uris, *(f for r in source.records for f in r.files)]
    return any(uri == path or uri.startswith(path + "/") or path.startswith(uri + "/")
               for uri in (f.removeprefix("file://") for f in files if f))


def _cpu_count() -> int:
    """The CPUs this process may use (a container's or a taskset's limit, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _fail(message: str) -> int:
    print(message, file=sys.stderr)
    return EXIT_STEP_FAILED


@contextlib.contextmanager
def _output_to(log: Path | None) -> Iterator[None]:
    """Inside the block, what this process and the processes it starts write to stdout and
    stderr (Dagster's own logging, warnings, the steps' output Dagster mirrors back) goes to
    ``log``; None: to the terminal, as it is. ``sys.stdout`` and ``sys.stderr`` (the progress
    display, the CLI's own messages) keep writing where they wrote before."""
    if log is None:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {"stdout": sys.stdout, "stderr": sys.stderr}
    originals = [os.dup(1), os.dup(2)]
    for (name, stream), fd, original in zip(saved.items(), (1, 2), originals):
        if _fileno(stream) == fd:  # a stream of the descriptor about to move: one of its own (a test's is not)
            setattr(sys, name, os.fdopen(os.dup(original), "w", buffering=1, encoding=stream.encoding,
                                         errors="replace"))
    with open(log, "ab") as target:
        os.dup2(target.fileno(), 1)
        os.dup2(target.fileno(), 2)
        try:
            yield
        finally:
            for name, stream in saved.items():
                if getattr(sys, name) is not stream:
                    getattr(sys, name).close()
                    setattr(sys, name, stream)
            for fd, original in zip((1, 2), originals):
                os.dup2(original, fd)
                os.close(original)


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def entry() -> None:
    """The console script: ``main()`` in a process of its own (so its fork server is forked
    from it), then an exit that skips tearing the interpreter down.

    Once ``main()`` has returned, every output is closed and every run recorded; what is left
    is freeing, one by one, the objects of the code location, Dagster's storage and the
    datasets' libraries. That took 0.5 to 0.75 s of a 6 s run of the bundled sample on this
    2-core machine (``bench.run``'s bundled-sample line measures the whole call). The exit handlers
    still run first (logging's shutdown, rich's terminal restore, multiprocessing's), and so
    do the flushes of stdout and stderr. ``atexit._run_exitfuncs`` is CPython's own (what
    ``sys.exit`` calls before finalizing); a test runs the CLI as a process and checks its
    whole output and exit code. An exception leaves through the normal path."""
    code = main(single_call_process=True)
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
