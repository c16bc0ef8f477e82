"""Whether a frame passes a contract, found without pandera's failure reports.

``validate`` (``schemas/validation.py``) costs about 20 ms a call however few the rows, most
of it spent reporting: even a check that passes builds its failure cases (the dtype check of
an Arrow string column formats an empty frame of them). Ingest checks its rows in blocks of
500 and nearly every block passes, so it asks :func:`passes` first and runs ``validate``,
for the verdict and its messages, only when that says no (:func:`validate_fast`).

:func:`passes` runs the contract's own rules as pandera runs them (the declared dtype's
check, the nullable and unique rules, every ``Check`` called on the same column or frame)
and answers only whether every one passed. It says True only when ``validate`` would pass
the frame: a contract using anything not evaluated here (coercion, strictness, an index,
parsers, defaults, grouped or element-wise checks...) gets False, as does a check that
fails, raises or only warns; ``validate`` then decides.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pandera.pandas as pandera
from pandera.engines.pandas_engine import Engine

from schemas.validation import ContractResult, validate

# what a contract's settings must be for passes() to evaluate it: pandera's defaults
_PLAIN_SCHEMA = {"coerce": False, "strict": False, "unique": None, "index": None, "dtype": None, "ordered": False,
                 "unique_column_names": False, "add_missing_columns": False, "drop_invalid_rows": False}
_PLAIN_COLUMN = {"coerce": False, "regex": False, "required": True, "default": None, "drop_invalid_rows": False}
_UNKNOWN = object()  # a setting another pandera version may not have: then passes() does not evaluate it


def validate_fast(model: type[pandera.DataFrameModel], frame: pd.DataFrame) -> ContractResult:
    """``validate``'s result; pandera runs only when a check fails (or ``passes`` cannot tell)."""
    return ContractResult(True, len(frame)) if passes(model, frame) else validate(model, frame)


def passes(model: type[pandera.DataFrameModel], frame: pd.DataFrame) -> bool:
    """True only when every rule of ``model`` holds on ``frame`` (see the module's docstring)."""
    schema = _plain_schema(model)
    if schema is None or not frame.columns.is_unique:
        return False
    try:
        for name, column in schema.columns.items():
            if name not in frame.columns:
                return False
            series = frame[name]
            if not column.nullable and series.hasnans:
                return False
            if column.unique and not series.is_unique:
                return False
            if column.dtype is not None and not _all_true(column.dtype.check(Engine.dtype(series.dtype), series)):
                return False
            if not all(_holds(check, frame, name) for check in column.checks):
                return False
        return all(_holds(check, frame) for check in schema.checks)
    except Exception:  # a check that raises fails in validate too, which reports it
        return False


@functools.cache
def _plain_schema(model: type[pandera.DataFrameModel]) -> pandera.DataFrameSchema | None:
    """The model's schema when every feature it uses is one :func:`passes` evaluates, else None."""
    schema = model.to_schema()
    plain = _plain(schema, _PLAIN_SCHEMA) and all(_plain(column, _PLAIN_COLUMN) for column in schema.columns.values())
    return schema if plain else None


def _plain(part, defaults: dict) -> bool:
    """Whether a schema or column has its defaults, no parsers and only plain checks."""
    return (all(getattr(part, key, _UNKNOWN) == value for key, value in defaults.items())
            and not getattr(part, "parsers", None) and all(_plain_check(check) for check in part.checks))


def _plain_check(check: pandera.Check) -> bool:
    """A check applied to the whole column or frame at once, failing the contract when it fails."""
    return check.groupby is None and not check.element_wise and not check.raise_warning


def _holds(check: pandera.Check, frame: pd.DataFrame, column: str | None = None) -> bool:
    """Whether ``check`` passes on ``frame`` (or its ``column``): its function called as
    pandera's pandas backend calls it (a column's nulls dropped when the check ignores them),
    without the failure report pandera builds from every result (for a frame check, a scan of
    the whole frame for rows of nulls, which would pass it): a frame check whose rows do not
    all pass is left to ``validate``. About 1 ms a check instead of about 8 in all per block of
    500 rows. A pandera without these attributes is called as it is."""
    function, arguments = getattr(check, "_check_fn", None), getattr(check, "_check_kwargs", None)
    if function is None or arguments is None:
        result = check(frame) if column is None else check(frame, column)
        return _all_true(result.check_passed)
    target = frame if column is None else frame[column]
    check.get_backend(target)  # registers pandera's pandas functions of the built-in checks, once
    name = getattr(function, "__name__", None)
    if name is not None and check.is_builtin_check(name):
        function = check.get_builtin_check_fn(name)  # as Check.__call__ looks it up again
    if column is not None and check.ignore_na and target.hasnans:
        target = target.dropna()
    return _all_true(function(target, **arguments))


def _all_true(result) -> bool:
    return bool(result) if isinstance(result, (bool, np.bool_)) else bool(np.all(result))
