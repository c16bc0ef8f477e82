"""Keeping a chunked loop's memory flat: free each chunk's garbage before the next chunk.

Two things kept finished chunks alive in the export steps (measured on the 1 GB benchmark
corpus, SFT family, all four exports):

- Reference cycles. pandas caches accessors on the Series they wrap (``series.str`` holds
  the Series and the Series holds it), and pandas and pandera use them on every chunk. A
  cycle lives until a full collection, and a full collection is rare, so column copies full
  of rendered lines piled up: 764 MiB after 60 chunks and growing, 361 MiB with a
  collection after each chunk.
- glibc keeps freed blocks of every size in its heap, and Arrow's pool keeps what it freed;
  both are handed back to the OS.

A full collection walks every tracked object: a process that has imported the code location
holds about 176,000 of them, and collecting took 88 ms there. :func:`chunk_memory` freezes
those first (``gc.freeze``, the standard library's tool for long-lived objects), so each
collection only walks what the loop made.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow


def _load_malloc_trim() -> Callable[[int], int] | None:
    libc = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(libc).malloc_trim if libc else None
    except (OSError, AttributeError):  # not glibc: nothing to trim
        return None


_MALLOC_TRIM = _load_malloc_trim()


def release_memory() -> None:
    """Frees unreachable cycles, then gives freed memory back to the OS: Arrow's pool
    (mimalloc) and glibc's heap both keep it for reuse otherwise."""
    gc.collect()
    pyarrow.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


# A full collection walks every object the loop holds (the plan's frames among them): after
# each chunk it cost about 30 ms, 0.9 s of a 1 GB SFT step. After every fourth chunk the same
# step took 0.65 s less for 15-20 MiB more at its peak (interleaved A/B in one session, SFT
# and DPO at 1 GB, commit 137f33e).
RELEASE_EVERY_CHUNKS = 4


@contextmanager
def chunk_memory() -> Iterator[Callable[[], None]]:
    """Yields a function to call after each chunk; every ``RELEASE_EVERY_CHUNKS`` calls it
    frees what the chunks left behind."""
    gc.collect()  # garbage frozen now would never be freed
    # Objects someone else froze (a parent process before forking this one) stay frozen:
    # unfreezing cannot tell them apart from the ones frozen here.
    owner = gc.get_freeze_count() == 0
    gc.freeze()
    chunks = 0

    def after_chunk() -> None:
        nonlocal chunks
        chunks += 1
        if chunks % RELEASE_EVERY_CHUNKS == 0:
            release_memory()

    try:
        yield after_chunk
    finally:
        if owner:
            gc.unfreeze()

