import gc
import weakref

import pandas as pd

from trajectory_assets.memory import RELEASE_EVERY_CHUNKS, chunk_memory


def _chunk_with_an_accessor_cycle() -> weakref.ref:
    """What an export chunk leaves behind: a column whose cached ``.str`` accessor points back to it."""
    lines = pd.Series(["x" * 100] * 10)
    lines.str.len()
    return weakref.ref(lines)


def test_release_frees_the_reference_cycles_of_every_few_chunks():
    gc.disable()  # as a long chunk would: the cycles outlive the young generations' collections
    try:
        with chunk_memory() as after_chunk:
            chunks = []
            for _ in range(RELEASE_EVERY_CHUNKS - 1):
                chunks.append(_chunk_with_an_accessor_cycle())
                after_chunk()
            # only the cycles keep them: refcounting alone cannot free them
            assert all(chunk() is not None for chunk in chunks)
            chunks.append(_chunk_with_an_accessor_cycle())
            after_chunk()
            assert all(chunk() is None for chunk in chunks)
    finally:
        gc.enable()


def test_objects_alive_before_the_loop_are_unfrozen_after_it():
    with chunk_memory():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_garbage_from_before_the_loop_is_not_frozen_forever():
    before = _chunk_with_an_accessor_cycle()
    with chunk_memory():
        assert before() is None

