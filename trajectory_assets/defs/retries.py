"""How every asset that touches storage retries, and the pool that bounds how many run at once."""

import contextlib
from collections.abc import Iterator

import dagster as dg

from trajectory_assets.dagster_internals import EXECUTION_INTERRUPTS, initialize_pool_limit
from trajectory_assets.io.storage import NotMaterializedError, StorageError


# Storage errors and timeouts (an endpoint that goes away for a moment, a reset
# connection) are retried with backoff, 1 s, 2 s then 4 s (on top of botocore's and s3fs's
# own retries); then the step fails with the last error. Only storage exceptions are
# retried: a bad record is a quarantine row and a failed check is a result (neither
# raises), and a config or source that cannot be used, or a bug, is a
# `dg.Failure(allow_retries=False)` (see `storage_faults_only`).
STORAGE_RETRY = dg.RetryPolicy(max_retries=3, delay=1, backoff=dg.Backoff.EXPONENTIAL)
# Every step that reads or writes the storage (or the sources) holds a slot of this pool
# while it runs, so many runs at once cannot flood an object store; the limit is the
# instance's (`concurrency: pools:` in dagster.yaml).
STORAGE_POOL = "trajectory_storage"


def initialize_storage_pool(instance: dg.DagsterInstance) -> None:
    """Gives the storage pool its default limit now, if it has none yet, as the first step
    that claims a slot of it would. Runs started together (the CLI's, or a sensor tick's)
    would otherwise both find no limit and both insert it; on Postgres the loser's run then
    fails (a unique violation aborts its transaction, and Dagster's fallback update runs
    inside it: dagster-io/dagster#33552)."""
    initialize_pool_limit(instance, STORAGE_POOL)


_STORAGE_MODULES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "s3fs", "fsspec", "gcsfs", "adlfs")


def is_storage_fault(error: BaseException) -> bool:
    """An error of the storage or the network (worth retrying), not of our code or data."""
    return isinstance(error, (OSError, TimeoutError, StorageError)) or any(
        type(error).__module__.startswith(module) for module in _STORAGE_MODULES
    )


class RunInterrupted(dg.Failure):
    """The run is being canceled (Ctrl-C in the CLI, Terminate in the UI): the step stops and
    is not retried. Dagster retries an interrupted step that has a retry policy, so an
    interrupt must not reach it as one; a step that fails while its run is canceling ends the
    run CANCELED."""

    def __init__(self) -> None:
        super().__init__(description="interrupted: the run is being canceled", allow_retries=False)


def stop_if_canceling(context: dg.AssetExecutionContext) -> None:
    """Raises :class:`RunInterrupted` when the run is being canceled (a step that starts, or a
    batch, after the interrupt reached an earlier one)."""
    run = context.instance.get_run_by_id(context.run_id)
    if run is not None and run.status in (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED):
        raise RunInterrupted()


@contextlib.contextmanager
def storage_faults_only() -> Iterator[None]:
    """Around an asset body under `STORAGE_RETRY`: anything but a storage fault fails the
    step at once (re-running the same code on the same bytes would fail the same way), and
    an interrupt stops it (:class:`RunInterrupted`)."""
    try:
        yield
    except (dg.Failure, dg.DagsterError):
        raise
    except NotMaterializedError as error:  # an input not written yet: retrying would not write it
        raise dg.Failure(description=str(error), allow_retries=False) from None
    except Exception as error:
        if is_storage_fault(error):
            raise
        raise dg.Failure(description=f"{type(error).__name__}: {error}", allow_retries=False) from error
    except EXECUTION_INTERRUPTS as interrupt:
        raise RunInterrupted() from interrupt
