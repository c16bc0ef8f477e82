"""What pyarrow-backed strings would save in the trajectory contract.

    python -m bench.contract_strings STORAGE [--rows 1000] [--repeats 10]

STORAGE is the output folder of a `trajectory-assets run` (for example a benchmark run's,
under /tmp/trajectory-assets-bench/). The first batch's first ``--rows`` trajectories are
validated against ``TrajectorySchema`` three ways, each after one warm-up call, in this
process: through ``schemas.validation.validate`` (what ingest calls), the schema alone over
the object-dtype strings pandas gives, and the schema with every string column declared and
cast as ``string[pyarrow]`` (the dtype check is then a comparison, not an ``isinstance`` per
element). Prints the mean milliseconds of each.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pyarrow.parquet as pq

from schemas.trajectory import TrajectorySchema
from schemas.validation import validate

ARROW_STRING = "string[pyarrow]"


def mean_ms(call, repeats: int) -> float:
    call()  # warm-up: compiled regexes, cached schema objects
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("storage", type=Path)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    batch = sorted((args.storage / "trajectories" / "batches").glob("*.parquet"))[0]
    schema = TrajectorySchema.to_schema()
    frame = pq.read_table(batch, columns=list(schema.columns)).slice(0, args.rows).to_pandas()
    strings = [name for name in schema.columns if frame[name].dtype == object]
    arrow_frame = frame.astype({name: ARROW_STRING for name in strings})
    arrow_schema = schema.update_columns({name: {"dtype": ARROW_STRING} for name in strings})

    timings = {
        "validate() (as ingest calls it)": mean_ms(lambda: validate(TrajectorySchema, frame), args.repeats),
        "schema, object strings": mean_ms(lambda: schema.validate(frame, lazy=True), args.repeats),
        "schema, string[pyarrow]": mean_ms(lambda: arrow_schema.validate(arrow_frame, lazy=True), args.repeats),
    }
    print(f"{len(frame)} rows of {batch.name}, {len(strings)} string columns, mean of {args.repeats}:")
    for name, milliseconds in timings.items():
        print(f"  {name:34} {milliseconds:7.1f} ms")


if __name__ == "__main__":
    main()
