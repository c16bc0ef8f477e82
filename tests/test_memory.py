import gc
import weakref

import pandas as pd

from trajectory_assets.memory import chunk_memory


def _chunk_with_an_accessor_cycle() -> weakref.ref:
    """What an export chunk leaves behind: a column whose cached ``.str`` accessor points back to it."""
    lines = pd.Series(["x" * 100] * 10)
    lines.str.len()
    return weakref.ref(lines)


def test_release_frees_a_chunks_reference_cycles():
    with chunk_memory() as release:
        chunk = _chunk_with_an_accessor_cycle()
        assert chunk() is not None  # only the cycle keeps it: refcounting alone cannot free it
        release()
        assert chunk() is None


def test_objects_alive_before_the_loop_are_unfrozen_after_it():
    with chunk_memory():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_garbage_from_before_the_loop_is_not_frozen_forever():
    before = _chunk_with_an_accessor_cycle()
    with chunk_memory():
        assert before() is None

