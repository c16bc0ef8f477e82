"""A batch's trajectories written ordered by bucket, in row groups cut at bucket changes.

Ingest converts a batch in blocks (``conversion.BATCH_ROWS``) in the order of its source;
the stored file holds the same rows ordered by ``bucket`` (``buckets.bucket_of(prompt_key)``),
stable (a bucket's rows keep the source's order), so that a range of buckets (an export
shard) reads only its own row groups (``io/trajectory_table.py``, ``scan(buckets=)``).

Memory stays bounded by a budget, never by the batch: the blocks are kept until they hold
:data:`SORT_IN_MEMORY_BYTES`; past it (an external sort) each block is sorted and spilled by
bucket range into :data:`SPILL_FANOUT` temporary Arrow streams on local disk (the
``tempfile`` folder: ``TMPDIR``), each read back in range order and ordered the same way (a
range still over the budget is spilled again, down to single buckets, whose rows are already
in order and are streamed). Arrow IPC streams, not Parquet, hold the spill: they are appended
block by block with no row-group overhead and read back one block at a time.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trajectory_assets.buckets import BUCKETS
from trajectory_assets.ingest.conversion import BATCH_ROWS

# The rows a row group holds at most: about what ingest wrote before the bucket order (one
# group per block). A group holds whole buckets, except a bucket with more rows than this,
# cut into groups of this many, which a range read still reads exactly.
ROW_GROUP_ROWS = BATCH_ROWS
# The Arrow bytes of the blocks sorted in memory before they are spilled to disk: a batch of
# up to about two blocks is never spilled. Spilling is cheaper than holding: on a 64 MB batch
# of the benchmark corpus (3,715 rows, about 70 MB in Arrow; `python -m bench.bucket_order`)
# ingest peaked at 287-289 MiB RSS with 16 MiB, as before the bucket order (296 MiB), against
# 487 MiB sorted wholly in memory, which also cost more CPU.
SORT_IN_MEMORY_BYTES = 16 << 20
# temporary files one range is spilled into: 32 ranges of 32 buckets, then single buckets
SPILL_FANOUT = 32
# uncompressed: the spill is read back once, soon, and takes the batch's Arrow size on disk
# for that while; lz4 cost 0.2 s more CPU and 50 MiB more RSS on that batch
_SPILL_OPTIONS = pa.ipc.IpcWriteOptions(compression=None)
# a block's rows are written as one Arrow buffer per column and buffer kind (offsets,
# validity, data): unbuffered, a 64 MB batch took about 30,000 write calls, most of them a
# few bytes; with a buffer per spill, about 3,800 (32 spills open: 2 MiB in all)
SPILL_BUFFER_BYTES = 64 << 10


@contextlib.contextmanager
def bucket_ordered(writer: pq.ParquetWriter, budget: int | None = None) -> Iterator[Callable[[pa.Table], None]]:
    """A ``write_table`` for ingest's blocks: the rows handed to it are written to ``writer``
    ordered by bucket when the ``with`` block ends normally (nothing is written otherwise).
    ``budget``: the bytes sorted in memory (a test shrinks it to make a batch spill)."""
    with tempfile.TemporaryDirectory(prefix="trajectory-buckets-") as folder:
        order = _BucketRange(0, BUCKETS, folder, budget or SORT_IN_MEMORY_BYTES)
        yield order.add
        groups = _RowGroups(writer)
        for table in order.ordered():
            groups.add(table)
        groups.close()


def _stable_order(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The row order by bucket, each bucket's rows in their order; the buckets in that order."""
    buckets = table["bucket"].to_numpy()
    order = np.argsort(buckets, kind="stable")
    return order, buckets[order]


class _Spill:
    """A temporary Arrow stream of the rows of buckets ``first`` to ``stop`` (exclusive)."""

    def __init__(self, folder: str, first: int, stop: int, schema: pa.Schema) -> None:
        self.first, self.stop = first, stop
        self.path = os.path.join(folder, f"{first:04d}-{stop:04d}-{id(self):x}.arrows")
        self._sink = pa.BufferedOutputStream(pa.OSFile(self.path, "wb"), SPILL_BUFFER_BYTES)
        self._writer = pa.ipc.new_stream(self._sink, schema, options=_SPILL_OPTIONS)

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table)

    def read(self) -> Iterator[pa.Table]:
        """Its rows, as the blocks they were written in; the file is gone afterwards."""
        self._writer.close()
        self._sink.close()
        try:
            with pa.OSFile(self.path, "rb") as source:
                for batch in pa.ipc.open_stream(source):
                    yield pa.Table.from_batches([batch])
        finally:
            os.remove(self.path)


class _BucketRange:
    """The rows of buckets ``first`` to ``stop`` (exclusive), taken block by block and given
    back ordered by bucket (stable), holding at most ``budget`` bytes of them in memory."""

    def __init__(self, first: int, stop: int, folder: str, budget: int) -> None:
        self.first, self.stop, self.folder, self.budget = first, stop, folder, budget
        self.held: list[pa.Table] = []
        self.held_bytes = 0
        self.spills: list[_Spill] | None = None  # once over the budget

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        if self.spills is not None:
            self._spill(table)
            return
        self.held.append(table)
        self.held_bytes += table.nbytes
        if self.held_bytes > self.budget:
            step = -(-(self.stop - self.first) // SPILL_FANOUT)
            self.spills = [_Spill(self.folder, first, min(first + step, self.stop), table.schema)
                           for first in range(self.first, self.stop, step)]
            held, self.held = self.held, []
            for block in held:
                self._spill(block)

    def _spill(self, table: pa.Table) -> None:
        if len(self.spills) == 1:  # one bucket: its rows are in order as they come
            self.spills[0].write(table)
            return
        order, buckets = _stable_order(table)
        ordered = table.take(order)
        bounds = np.searchsorted(buckets, [spill.first for spill in self.spills] + [self.stop])
        for spill, start, end in zip(self.spills, bounds, bounds[1:]):
            if end > start:
                spill.write(ordered.slice(start, end - start))

    def ordered(self) -> Iterator[pa.Table]:
        if self.spills is None:
            if self.held:
                held = pa.concat_tables(self.held)
                order, _ = _stable_order(held)
                # copied a group at a time, so the held rows are never held twice
                for start in range(0, len(order), ROW_GROUP_ROWS):
                    yield held.take(order[start:start + ROW_GROUP_ROWS])
            return
        for spill in self.spills:
            if spill.stop - spill.first == 1:
                yield from spill.read()
                continue
            inner = _BucketRange(spill.first, spill.stop, self.folder, self.budget)
            for table in spill.read():
                inner.add(table)
            yield from inner.ordered()


class _RowGroups:
    """Writes tables ordered by bucket as row groups of whole buckets, each as many as fit in
    ROW_GROUP_ROWS rows; a bucket with more rows than that is cut into groups of that many
    (its last rows may share a group with the next buckets). Each group is a slice of the
    rows as they came, so its columns are written without being copied into one piece."""

    def __init__(self, writer: pq.ParquetWriter) -> None:
        self.writer = writer
        self.carried: pa.Table | None = None  # the rows after the last cut, ended by the next table

    def add(self, table: pa.Table) -> None:
        if self.carried is not None:
            table = pa.concat_tables([self.carried, table])
        buckets = table["bucket"].to_numpy()
        changes = np.flatnonzero(np.diff(buckets)) + 1  # where a bucket starts
        start = 0
        # a group is cut only when more rows follow than fit: the last bucket may go on
        while table.num_rows - start > ROW_GROUP_ROWS:
            fitting = changes[(changes > start) & (changes <= start + ROW_GROUP_ROWS)]
            end = int(fitting[-1]) if len(fitting) else start + ROW_GROUP_ROWS  # else one bucket is too big
            self._write(table.slice(start, end - start))
            start = end
        self.carried = table.slice(start)

    def _write(self, group: pa.Table) -> None:
        self.writer.write_table(group, row_group_size=group.num_rows)

    def close(self) -> None:
        if self.carried is not None and self.carried.num_rows:
            self._write(self.carried)
        self.carried = None
