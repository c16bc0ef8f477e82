"""Headless CLI: runs the same asset jobs as the UI, through the Dagster instance (ingest
runs over ranges of batches, then the datasets job), like the sensor and automation do in
`dagster dev`. Every run is recorded in DAGSTER_HOME (the project's dagster_home/ unless
set), so `make ui` shows them.

    trajectory-assets run --source SRC [--source SRC ...] --storage DEST [--config FILE]
                          [--exports NAME,NAME,...] [--workers N] [--verbose]

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
import os
import sys
import warnings
from pathlib import Path

EXIT_STEP_FAILED = 1
EXIT_UNUSABLE_INPUT = 2
EXIT_INTERRUPTED = 130


class _Help(argparse.HelpFormatter):
    """Names the exports only when the help is shown: the registry imports every contract
    (pandera, pandas, pyarrow), which this process needs for nothing else."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.dest == "exports":
            from trajectory_assets.datasets.registry import EXPORTS

            return f"{action.help}: {', '.join(spec.name for spec in EXPORTS)}"
        return super()._get_help_string(action)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trajectory-assets", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="materialize every asset (trajectories, exports, stats)",
                              formatter_class=_Help)
    run.add_argument("--source", action="append", required=True,
                     help="folder, .jsonl/.jsonl.gz file or s3://bucket/prefix; repeatable")
    run.add_argument("--storage", required=True, help="output folder or s3://bucket/prefix")
    run.add_argument("--config", help="YAML config (see config.example.yaml)")
    run.add_argument(
        "--workers", type=int, default=None,
        help="runs at once (default: the instance's run queue limit, concurrency.runs in dagster.yaml)",
    )
    run.add_argument("--exports", help="comma-separated exports to build (default: all)")
    run.add_argument("--verbose", action="store_true", help="show Dagster's event log")
    args = parser.parse_args(argv)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    if not args.verbose:
        warnings.filterwarnings("ignore")  # Dagster's beta/preview notices are for developers
    # imported here so `--help` stays instant
    import dagster as dg

    from trajectory_assets import PROJECT_ROOT, layout
    from trajectory_assets.config import ConfigError, load_config
    from trajectory_assets.datasets.token_budget import TokenizerError, check_tokenizer
    from trajectory_assets.defs.run_plan import run_slots
    from trajectory_assets.defs.runner import run_pipeline, unreadable_sources
    from trajectory_assets.io.sources import SourceError, batch_key, discover
    from trajectory_assets.progress import progress_for

    storage = args.storage if "://" in args.storage else str(Path(args.storage).resolve())
    sources = [s if "://" in s else str(Path(s).resolve()) for s in args.source]
    config_file = str(Path(args.config).resolve()) if args.config else None
    # fail fast, in one line, on what the user can fix
    exports = None if args.exports is None else [name.strip() for name in args.exports.split(",") if name.strip()]
    assets = None  # the whole datasets job: every export and the report
    if exports is not None:
        # only here: the registry imports every contract, which the CLI needs for nothing else
        from trajectory_assets.datasets.registry import EXPORTS_BY_NAME

        unknown = sorted(set(exports) - set(EXPORTS_BY_NAME))
        if unknown or not exports:
            print(f"trajectory-assets: unknown export(s) {unknown or args.exports!r}; choose from "
                  f"{', '.join(EXPORTS_BY_NAME)}", file=sys.stderr)
            return EXIT_UNUSABLE_INPUT
        assets = [EXPORTS_BY_NAME[name].asset_name for name in exports] + ["stats_report"]
    try:
        config = load_config(args.config)
        if config.tokenizer is not None:
            check_tokenizer(config.tokenizer)  # the runs' steps load it; this process only checks
        batches = sorted({batch_key(source.source_id) for source in discover(sources)})
    except (ConfigError, SourceError, TokenizerError) as error:
        print(f"trajectory-assets: {error}", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT

    # the call's sources, storage and config travel in each run's config (shown with the run in the UI)
    run_config = {
        "resources": {"sources": {"config": {"paths": sources}}, "storage": {"config": {"root": storage}},
                      "settings": {"config": {"config_file": config_file}}},
        "loggers": {"console": {"config": {"log_level": "DEBUG" if args.verbose else "CRITICAL"}}},
    }
    home = os.environ.get("DAGSTER_HOME") or str(PROJECT_ROOT / "dagster_home")
    progress = progress_for(sys.stdout)
    log = None if args.verbose else Path(home) / "logs" / "code-server.log"  # Dagster's own output
    with dg.DagsterInstance.from_config(home) as instance:
        try:
            run = run_pipeline(instance, batches, run_config, slots=args.workers or run_slots(instance),
                               assets=assets, progress=progress, log_level="DEBUG" if args.verbose else "CRITICAL",
                               log=log)
        except KeyboardInterrupt:
            print("trajectory-assets: interrupted; the runs it started were stopped", file=sys.stderr)
            return EXIT_INTERRUPTED
        except (dg.DagsterError, RuntimeError) as error:  # the instance or the code location cannot be used
            reason = " ".join(str(error).split())
            print(f"trajectory-assets: {reason}" + (f" (see {log})" if log else ""), file=sys.stderr)
            return EXIT_STEP_FAILED
        finally:
            progress.close()
    if not run.success:
        print(f"trajectory-assets: run failed: {run.first_failure}", file=sys.stderr)
        return EXIT_STEP_FAILED

    from trajectory_assets.io.storage import Storage

    store = Storage(storage)
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


if __name__ == "__main__":
    sys.exit(main())
