"""The examples in the pure modules' docstrings are run, so none of them can go stale."""

import doctest
import importlib
import pkgutil

import pytest

import schemas
from tests.test_layout_rules import PACKAGE, PURE

PURE_MODULES = sorted([".".join(("trajectory_assets", *path.relative_to(PACKAGE).with_suffix("").parts))
                       .removesuffix(".__init__") for path in PURE]
                      + [f"schemas.{module.name}" for module in pkgutil.iter_modules(schemas.__path__)])


@pytest.mark.parametrize("name", PURE_MODULES)
def test_every_docstring_example_holds(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"


def test_the_examples_are_found():
    attempted = sum(doctest.testmod(importlib.import_module(name)).attempted for name in PURE_MODULES)
    assert attempted >= 13
    assert doctest.testmod(importlib.import_module("schemas.validation")).attempted >= 4  # the contracts' helpers
