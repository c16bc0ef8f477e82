"""trajectory-assets: agent rollouts -> validated trajectories -> SFT / DPO / GRPO datasets.

The Dagster code location lives in ``trajectory_assets.definitions``; everything under
``formats``, ``datasets`` and ``io`` is plain Python with no Dagster import, so the
conversion rules can be read and tested on their own.
"""

__version__ = "0.1.0"
