"""How every asset that touches storage retries, and the pool that bounds how many run at once."""

import contextlib
from collections.abc import Iterator

import dagster as dg

from trajectory_assets.io.storage import StorageError


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
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits or storage.get_pool_config().default_pool_limit is None:
        return
    if STORAGE_POOL not in {pool.name for pool in storage.get_pool_limits()}:
        storage.initialize_concurrency_limit_to_default(STORAGE_POOL)


_STORAGE_MODULES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "s3fs", "fsspec", "gcsfs", "adlfs")


def is_storage_fault(error: BaseException) -> bool:
    """An error of the storage or the network (worth retrying), not of our code or data."""
    return isinstance(error, (OSError, TimeoutError, StorageError)) or any(
        type(error).__module__.startswith(module) for module in _STORAGE_MODULES
    )


@contextlib.contextmanager
def storage_faults_only() -> Iterator[None]:
    """Around an asset body under `STORAGE_RETRY`: anything but a storage fault fails the
    step at once (re-running the same code on the same bytes would fail the same way)."""
    try:
        yield
    except (dg.Failure, dg.DagsterError):
        raise
    except Exception as error:
        if is_storage_fault(error):
            raise
        raise dg.Failure(description=f"{type(error).__name__}: {error}", allow_retries=False) from error
