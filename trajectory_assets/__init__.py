"""trajectory-assets: agent rollouts -> validated trajectories -> SFT / DPO / GRPO datasets.

The Dagster code location lives in ``trajectory_assets.definitions``; everything under
``formats``, ``datasets`` and ``io`` is plain Python with no Dagster import, so the
conversion rules can be read and tested on their own.
"""

import functools
import hashlib
import importlib.util
from pathlib import Path

__version__ = "0.2.0"
# the checkout: dagster_home/, workspace.yaml and the bundled sample live here
PROJECT_ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def code_version() -> str:
    """The release plus a hash of every source file of this package and of its contracts.

    It changes whenever the code does, so Dagster marks outputs made by older code as stale
    and every manifest names the exact code that wrote it (a release number alone stays the
    same across many changes).
    """
    schemas = importlib.util.find_spec("schemas")
    roots = [Path(__file__).parent] + ([Path(schemas.origin).parent] if schemas and schemas.origin else [])
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{root.name}/{path.relative_to(root).as_posix()}\n".encode())
            digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:12]}"
