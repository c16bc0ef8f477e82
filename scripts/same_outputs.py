"""Are the outputs of two revisions the same? Runs the CLI of each on the same sources and
compares every file it wrote, byte for byte.

    .venv/bin/python scripts/same_outputs.py <base revision> [--source ../shared/corpus] [--config FILE]

The base revision is checked out into a temporary git worktree and run with this checkout's
environment (the two must share a lock file); the working tree is the other side. Manifests
(``manifest.json``) and dataset cards (``README.md``) name the code version that wrote them,
so in those files a difference is allowed on code-version lines only. Prints every file that
differs and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# files that record the code version that wrote them, and how such a line reads
VERSIONED = {"manifest.json": '"code_version":', "README.md": "made by trajectory-assets "}


def run_cli(checkout: Path, source: Path, storage: Path, config: str | None = None) -> None:
    """The CLI of ``checkout`` over ``source`` into ``storage`` (with ``config``, a YAML file),
    with an instance of its own."""
    home = storage.parent / f"{storage.name}-dagster-home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("")
    env = {**os.environ, "PYTHONPATH": str(checkout), "DAGSTER_HOME": str(home)}
    subprocess.run([sys.executable, "-m", "trajectory_assets.cli", "run", "--source", str(source),
                    "--storage", str(storage), *(["--config", config] if config else [])],
                   cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL)


# what a build keeps for the next one, not an output: the shards' tallies a refresh reuses
# (``layout.export_parts``), whose bytes name the run and the storage's file checksums; the
# last run's staging folder, named by its run id (the next run removes it)
BUILD_STATE = ("parts", "staging")


def differences(base: Path, head: Path) -> tuple[list[str], int]:
    """Every file that differs (or is only on one side) beyond code-version lines, and how
    many differ in code-version lines only."""
    base_files, head_files = _outputs(base), _outputs(head)
    found = [f"only in the base: {path}" for path in sorted(base_files - head_files)]
    found += [f"only in the working tree: {path}" for path in sorted(head_files - base_files)]
    versions_only = 0
    for path in sorted(base_files & head_files):
        old, new = (base / path).read_bytes(), (head / path).read_bytes()
        if old == new:
            continue
        marker = VERSIONED.get(path.name)
        if marker is not None:
            changed = [line for line in difflib.unified_diff(old.decode().splitlines(), new.decode().splitlines(),
                                                            lineterm="", n=0)
                       if line[:1] in "+-" and not line.startswith(("+++", "---"))]
            if all(marker in line for line in changed):
                versions_only += 1
                continue
            found.append(f"differs beyond its code version: {path}\n  " + "\n  ".join(changed[:6]))
        else:
            found.append(f"differs: {path}")
    return found, versions_only


# the same, beside the batches: the MinHash signatures ingest stores for the plans of dedup: near
BUILD_STATE_SUFFIXES = (".minhash.parquet",)


def _outputs(storage: Path) -> set[Path]:
    return {p.relative_to(storage) for p in storage.rglob("*")
            if p.is_file() and p.relative_to(storage).parts[0] not in BUILD_STATE
            and not p.name.endswith(BUILD_STATE_SUFFIXES)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the revision to compare the working tree with (e.g. a commit)")
    parser.add_argument("--source", default=str(ROOT.parent / "shared" / "corpus"))
    parser.add_argument("--config", help="a YAML config both revisions run with (e.g. dedup: near)")
    args = parser.parse_args()
    source = Path(args.source).resolve()
    with tempfile.TemporaryDirectory(prefix="same-outputs-") as work:
        work = Path(work)
        checkout = work / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(checkout), args.base], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            config = str(Path(args.config).resolve()) if args.config else None
            run_cli(checkout, source, work / "base-out", config)
            run_cli(ROOT, source, work / "head-out", config)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(checkout)], cwd=ROOT, check=True)
        found, versions_only = differences(work / "base-out", work / "head-out")
        files = sum(1 for p in (work / "head-out").rglob("*") if p.is_file())
    for line in found:
        print(line)
    print(f"{files} files compared with {args.base}: {versions_only} differ in their code version only, "
          + ("every other byte is the same" if not found else f"{len(found)} differ"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
