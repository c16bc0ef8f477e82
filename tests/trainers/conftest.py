"""The `trainers` group: our exports loaded by `datasets` and trained by TRL as written.

Installed by `make trainers` (part of `make test`). Skipped locally when the libraries are
missing; with CI set, missing libraries fail instead, so CI can never skip the group silently.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

TRAINER_LIBS = ("torch", "trl", "transformers", "datasets", "tokenizers")


def pytest_configure(config):
    config.addinivalue_line("markers", "trainers: exports trained by TRL (needs `make trainers`)")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def trainer_libs_missing() -> str:
    """Why the group cannot run ("" when it can). Outside CI, skips the calling test module."""
    missing = [name for name in TRAINER_LIBS if importlib.util.find_spec(name) is None]
    if not missing:
        return ""
    reason = f"{', '.join(missing)} not installed (`make trainers` installs them)"
    if not in_ci():
        pytest.skip(reason, allow_module_level=True)
    return reason  # with CI set the module's tests fail with it, instead of being skipped
