"""The `trainers` group: our exports loaded by `datasets` and trained by TRL as written.

Installed by `make trainers` (part of `make test`). Skipped locally when the libraries are
missing; with CI set, missing libraries fail instead, so CI can never skip the group silently.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.conftest import in_ci

TRAINER_LIBS = ("torch", "trl", "transformers", "datasets", "tokenizers")


def pytest_configure(config):
    config.addinivalue_line("markers", "trainers: exports trained by TRL (needs `make trainers`)")


def trainer_libs_missing() -> str:
    """Why the group cannot run ("" when it can). Outside CI, skips the calling test module."""
    missing = [name for name in TRAINER_LIBS if importlib.util.find_spec(name) is None]
    if not missing:
        return ""
    reason = f"{', '.join(missing)} not installed (`make trainers` installs them)"
    if not in_ci():
        pytest.skip(reason, allow_module_level=True)
    return reason  # with CI set the module's tests fail with it, instead of being skipped


@pytest.fixture(autouse=True, scope="module")
def trainer_libs():
    """With CI set and the libraries missing, every test of the group fails rather than skips."""
    missing = [name for name in TRAINER_LIBS if importlib.util.find_spec(name) is None]
    if missing:  # only reached with CI set: outside CI the modules skip themselves on import
        pytest.fail(f"CI is set but the trainers test group cannot run: {', '.join(missing)} not installed")


def _cli_run(tmp_path_factory, source, *options: str) -> Path:
    """`trajectory-assets run` on ``source`` (with CLI ``options``); the exports folder it writes."""
    from trajectory_assets.cli import main

    from tests.conftest import temporary_dagster_home

    storage = tmp_path_factory.mktemp("out")
    with pytest.MonkeyPatch.context() as patch:  # an instance of its own, never the project's
        patch.setenv("DAGSTER_HOME", str(temporary_dagster_home(tmp_path_factory.mktemp("home"))))
        assert main(["run", "--source", str(source), "--storage", str(storage), *options]) == 0
    return storage / "exports"


@pytest.fixture(scope="session")
def sample_exports(tmp_path_factory) -> Path:
    """The exports of a real run over the bundled sample."""
    from tests.conftest import SAMPLE

    return _cli_run(tmp_path_factory, SAMPLE)


@pytest.fixture(scope="session")
def corpus_exports(tmp_path_factory) -> Path:
    """The exports of a real run over ../shared/corpus (NeMo Gym and Hermes files)."""
    from tests.conftest import shared_data

    return _cli_run(tmp_path_factory, shared_data("corpus"))


@pytest.fixture(params=["sample", "corpus"])
def run_exports(request) -> Path:
    """Each real run's exports in turn."""
    return request.getfixturevalue(f"{request.param}_exports")


@pytest.fixture(scope="session")
def hf_cache(tmp_path_factory) -> str:
    """datasets' cache (the loaded Arrow files and TRL's tokenized maps) kept out of ~/.cache."""
    return str(tmp_path_factory.mktemp("hf_cache"))
