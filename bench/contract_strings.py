"""What pyarrow-backed strings save in the trajectory contract, as ingest runs it.

    python -m bench.contract_strings STORAGE [--rows 4096] [--repeats 10]

STORAGE is the output folder of a `trajectory-assets run` (for example a benchmark run's,
under /tmp/trajectory-assets-bench/). The first batch's first ``--rows`` trajectories (one
ingest block: ``BATCH_ROWS``) are turned into a frame and checked against
``TrajectorySchema`` two ways, each after one warm-up call, in this process:

- **Arrow strings** (what ingest does): ``contract_frame`` keeps the strings Arrow-backed,
  so the dtype check is a comparison and the ``str_*`` checks run in Arrow compute;
- **object strings** (what ingest did before): ``to_pandas()`` makes a Python ``str`` per
  value and the same contract, its string columns declared ``str``, tests each one.

Prints the mean milliseconds of each and their ratio.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pyarrow.parquet as pq

from schemas.trajectory import TrajectorySchema
from schemas.validation import ARROW_STRING, contract_frame, validate
from trajectory_assets.ingest.conversion import BATCH_ROWS


def mean_ms(call, repeats: int) -> float:
    call()  # warm-up: compiled regexes, cached schema objects
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("storage", type=Path)
    parser.add_argument("--rows", type=int, default=BATCH_ROWS)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    batch = sorted((args.storage / "trajectories" / "batches").glob("*.parquet"))[0]
    schema = TrajectorySchema.to_schema()
    table = pq.read_table(batch, columns=list(schema.columns)).slice(0, args.rows)
    strings = [name for name, column in schema.columns.items() if column.dtype.type == ARROW_STRING]
    object_schema = schema.update_columns({name: {"dtype": str} for name in strings})

    def arrow_strings() -> None:
        assert validate(TrajectorySchema, contract_frame(table)).passed

    def object_strings() -> None:
        object_schema.validate(table.to_pandas(), lazy=True)

    arrow_ms, object_ms = mean_ms(arrow_strings, args.repeats), mean_ms(object_strings, args.repeats)
    print(f"{table.num_rows} rows of {batch.name}, {len(strings)} string columns, mean of {args.repeats}:")
    print(f"  Arrow strings (ingest now)     {arrow_ms:7.1f} ms")
    print(f"  object strings (ingest before) {object_ms:7.1f} ms")
    print(f"  object / Arrow                 {object_ms / arrow_ms:7.2f}x")


if __name__ == "__main__":
    main()
