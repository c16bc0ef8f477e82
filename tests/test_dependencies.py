"""The dependency lists agree: pyproject and requirements.in name one runtime set, and the
runtime lock (what `make run` and the image install) holds none of the test tools."""

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import PROJECT_ROOT


def requirements(name: str) -> list[Requirement]:
    """The requirements a requirements file lists (comments and `-c` options left out)."""
    lines = (line.split("#", 1)[0].strip() for line in (PROJECT_ROOT / name).read_text().splitlines())
    return [Requirement(line) for line in lines if line and not line.startswith("-")]


def pinned(name: str) -> dict[str, str]:
    """A lock file's packages and their exact versions."""
    return {canonicalize_name(requirement.name): str(requirement.specifier).removeprefix("==")
            for requirement in requirements(name)}


def test_pyproject_and_requirements_in_list_the_same_runtime_set():
    declared = {str(Requirement(line))
                for line in tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    listed = {str(requirement) for requirement in requirements("requirements.in")}
    # hyperscan alone stays out of requirements.in: it has wheels for x86_64 only, so the Makefile
    # installs it there, with the pin pyproject names
    hyperscan = re.search(r"HYPERSCAN := (\S+)", (PROJECT_ROOT / "Makefile").read_text()).group(1)
    assert declared - listed == {f'{hyperscan}; platform_machine == "x86_64"'}
    assert listed - declared == set()


def test_the_runtime_lock_holds_no_test_tool_and_the_dev_lock_moves_no_runtime_pin():
    runtime, dev = pinned("requirements.lock"), pinned("requirements-dev.lock")
    tools = {canonicalize_name(requirement.name) for requirement in requirements("requirements-dev.in")}
    assert tools == {"pytest", "pytest-xdist", "hypothesis", "nvidia-nat-atif", "moto", "playwright"}
    assert tools.isdisjoint(runtime) and tools <= set(dev)
    assert {name: dev[name] for name in set(dev) & set(runtime)} == {name: runtime[name] for name in set(dev) & set(runtime)}
