"""trajectory-assets: agent rollouts -> validated trajectories -> SFT / DPO / GRPO datasets.

The Dagster code location lives in ``trajectory_assets.definitions`` and ``defs/``; every
other room (``sources``, ``chat``, ``exports``, ``report``, ``redaction``, ``io``) is plain
Python with no Dagster import, so the conversion rules can be read and tested on their own
(``ARCHITECTURE.md`` maps them).
"""

from pathlib import Path

__version__ = "0.2.0"
# the checkout: dagster_home/, workspace.yaml and the bundled sample live here
PROJECT_ROOT = Path(__file__).resolve().parent.parent
