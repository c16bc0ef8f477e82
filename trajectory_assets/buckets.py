"""Buckets and shards: how the export phase divides a dataset by prompt.

Ingest gives every trajectory a *bucket*, a stable hash of its ``prompt_key`` into
:data:`BUCKETS` buckets, and writes each batch's rows ordered by bucket. So everything that
belongs to one prompt (its rollouts, its GRPO task, its DPO pairs, its exact duplicates, its
split) is in one bucket, and a contiguous range of buckets reads only its own rows.

A *shard* is such a range, ``(first, stop)`` with ``stop`` exclusive. How many shards a
dataset has comes from a target size (trajectories per shard) and the number of trajectories
in each bucket, never from the batches' files: changing the target re-reads no batch.

No room of the package is imported here (``layout.py``'s rule): ingest, the exports and the
report all name buckets, so the rule lives beside them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

# fixed for ever once batches hold them: a new count would need every batch re-ingested.
# 1,024 keeps a bucket of the 100 GB scale (about 5.7 million trajectories) near 5,600 rows,
# small beside any useful shard, so shards can be sized finely.
BUCKETS = 1024


def bucket_of(prompt_key: str) -> int:
    """The bucket of a prompt: the first four bytes of SHA-256 of its key, modulo BUCKETS.
    Hashed again (not read from the key's own hex) so the rule holds for any key.

    >>> bucket_of("0f3a9c1b2d4e5f60718293a4")
    667
    >>> 0 <= bucket_of("") < BUCKETS
    True
    """
    digest = hashlib.sha256(b"bucket\0" + prompt_key.encode()).digest()
    return int.from_bytes(digest[:4], "big") % BUCKETS


def buckets_of(prompt_keys: Iterable[str]) -> np.ndarray:
    """The bucket of each key, as int16 (the column ingest writes)."""
    return np.fromiter((bucket_of(key) for key in prompt_keys), dtype=np.int16)


def shard_ranges(rows_per_bucket: np.ndarray, target_rows: int) -> list[tuple[int, int]]:
    """Contiguous bucket ranges covering every bucket, about ``target_rows`` trajectories
    each: as many shards as the rows need (at least one), cut where the running count
    crosses each shard's share, so they come out about equal. A bucket is never cut.

    >>> shard_ranges(np.array([5, 5, 5, 5]), 10)
    [(0, 2), (2, 4)]
    >>> shard_ranges(np.array([0, 0, 0, 0]), 10)
    [(0, 4)]
    >>> shard_ranges(np.array([30, 0, 0, 1]), 10)  # one bucket bigger than the target stays whole
    [(0, 1), (1, 4)]
    """
    counts = np.asarray(rows_per_bucket, dtype=np.int64)
    if target_rows < 1:
        raise ValueError(f"target_rows must be at least 1, not {target_rows}")
    total = int(counts.sum())
    shards = max(1, -(-total // target_rows))
    if shards == 1:
        return [(0, len(counts))]
    running = np.cumsum(counts)
    # the first bucket after which the running count reaches each shard's share
    cuts = np.searchsorted(running, [total * k / shards for k in range(1, shards)], side="left") + 1
    bounds = [0, *sorted({int(cut) for cut in cuts if 0 < cut < len(counts)}), len(counts)]
    return [(first, stop) for first, stop in zip(bounds, bounds[1:])]


def shard_of(bucket: int, ranges: list[tuple[int, int]]) -> int:
    """The index of the shard holding ``bucket``.

    >>> shard_of(3, [(0, 2), (2, 4)])
    1
    """
    for index, (first, stop) in enumerate(ranges):
        if first <= bucket < stop:
            return index
    raise ValueError(f"bucket {bucket} is in none of {ranges}")
