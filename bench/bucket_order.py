"""What storing a batch in bucket order costs ingest: peak memory and CPU per variant.

    python -m bench.bucket_order [--mb 64] [--repeats 2] [--budgets 16,1024] [--before TREE]

Builds one batch of about ``--mb`` MB from the benchmark corpus's rollouts (``bench.corpus``),
then ingests it (``ingest.batch.ingest_batch``) once per variant and repeat, each in a new
process, the variants rotated: this checkout with each in-memory budget of
``ingest/bucket_order.py`` (MiB; a budget above the batch's Arrow size sorts it wholly in
memory), and with ``--before`` the same step of another checkout's tree (for example
``git archive <rev> | tar -x -C TREE``), run by this environment. Prints each run's peak RSS,
Arrow's peak allocation and the CPU seconds of the ingest call.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]

ONE_RUN = """
import resource, sys, tempfile, time
import pyarrow as pa
from trajectory_assets.config import PipelineConfig
from trajectory_assets.ingest.batch import ingest_batch, write_source_record
from trajectory_assets.io.source_files import SourceFile
from trajectory_assets.io.storage import Storage
if sys.argv[2] != "before":
    from trajectory_assets.ingest import bucket_order
    bucket_order.SORT_IN_MEMORY_BYTES = int(sys.argv[2]) << 20
with tempfile.TemporaryDirectory() as out:
    store = Storage(out)
    write_source_record("batch", store, SourceFile(sys.argv[1], "batch.jsonl"))
    start = time.process_time()
    ingest_batch("batch", store, PipelineConfig())
    cpu = time.process_time() - start
print(f"rss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, "
      f"arrow {pa.default_memory_pool().max_memory() / 2**20:.0f} MiB, cpu {cpu:.2f} s")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--budgets", default="16,1024", help="in-memory budgets to try, MiB, comma-separated")
    parser.add_argument("--before", type=Path, help="another checkout's tree, run as the variant 'before'")
    arguments = parser.parse_args()

    from bench.corpus import build_corpus

    with tempfile.TemporaryDirectory() as folder:
        built = build_corpus(arguments.mb << 20, Path(folder), REPOSITORY.parent / "shared" / "corpus" / "nemo_gym",
                             file_bytes=(arguments.mb + 1) << 20)
        print(f"one batch: {built['bytes'] / 2**20:.0f} MB, {built['rows']} rows")
        variants = [budget.strip() for budget in arguments.budgets.split(",")]
        if arguments.before is not None:
            variants.append("before")
        for repeat in range(arguments.repeats):
            for variant in variants:
                env_path = str(arguments.before.resolve()) if variant == "before" else str(REPOSITORY)
                done = subprocess.run([sys.executable, "-c", ONE_RUN, str(Path(folder) / "batch_000.jsonl"), variant],
                                      capture_output=True, text=True, check=True, cwd=env_path,
                                      env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
                label = "before" if variant == "before" else f"budget {variant} MiB"
                print(f"{repeat + 1}  {label:>17}: {done.stdout.strip()}")


if __name__ == "__main__":
    main()
