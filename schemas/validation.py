"""Run a contract lazily and summarise its failures per row (shared by assets and ingest),
on one frame or on a table checked chunk by chunk; the string dtype every contract declares.

Contracts declare their string columns :data:`ArrowString` (pandas' pyarrow-backed
``string[pyarrow]``). Data arrives as Arrow (the trajectory batches) or is cast once when its
frame is built (the export rows), so the dtype check is a comparison and the ``str_*``
checks run in Arrow compute. An ``object`` column of Python strings still passes the same
contract (pandera then tests every element), which is what small hand-built frames use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

import pandas as pd
import pandera.pandas as pandera
import pyarrow as pa
from pandera.errors import SchemaErrors

ARROW_STRING = pd.StringDtype("pyarrow")
# the annotation contracts use: ``column: Series[ArrowString]``
ArrowString = Annotated[pd.StringDtype, "pyarrow", pd.NA]


def leading_field(name: str) -> str:
    """The pattern an export contract checks its ``fields`` column with (a record's top-level
    fields, comma-separated, in written order): ``name`` comes first, the row's format.

    >>> import re
    >>> bool(re.match(leading_field("prompt"), "prompt,chosen")), bool(re.match(leading_field("prompt"), "prompts"))
    (True, False)
    """
    return rf"^{name}(?:,|$)"


def contract_frame(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as the frame a contract checks: strings stay Arrow-backed, no Python
    ``str`` is made per value."""
    return table.to_pandas(types_mapper={pa.string(): ARROW_STRING, pa.large_string(): ARROW_STRING}.get)


def declared_dtypes(model: type[pandera.DataFrameModel]) -> dict[str, Any]:
    """Column name -> the dtype ``model`` declares for it; a nullable integer column as pandas'
    ``Int64`` (numpy's integers have no null)."""
    return {name: pd.Int64Dtype() if column.nullable and pd.api.types.is_integer_dtype(column.dtype.type)
            else column.dtype.type
            for name, column in model.to_schema().columns.items()}


def cast_columns(frame: pd.DataFrame, dtypes: dict[str, Any]) -> pd.DataFrame:
    """``frame`` with the columns named in ``dtypes`` cast to them, for a contract to check
    (strictly, see :func:`cast_column`).

    >>> frame = cast_columns(pd.DataFrame({"a": ["x", None], "b": [1, "y"]}), {"a": ARROW_STRING, "b": ARROW_STRING})
    >>> str(frame["a"].dtype), str(frame["b"].dtype)
    ('string', 'object')
    """
    cast = {}
    for name, dtype in dtypes.items():
        if name not in frame:
            continue
        current = frame[name].dtype
        if type(current) is type(dtype) and current == dtype:  # numpy's int64 == pandas' Int64, yet they differ
            continue
        column = cast_column(frame[name], dtype)
        if column is not frame[name]:
            cast[name] = column
    return frame.assign(**cast) if cast else frame


def cast_column(values: pd.Series | list[Any], dtype: Any) -> pd.Series | pd.api.extensions.ExtensionArray:
    """A column (a series, or the Python values of one) cast to ``dtype``, or as it is when it
    cannot be (values given as a list: as pandas infers them, as a frame of records does).

    Strings are cast strictly: a column holding anything but strings and nulls stays as it
    is, so the contract reports it (``astype`` would quietly write ``1`` as ``"1"``); so does
    a column that cannot be cast to its dtype (text in a float column). A list of strings goes
    to Arrow once, straight from the values.

    >>> str(cast_column(["x", None], ARROW_STRING).dtype), str(cast_column(["x", 1], ARROW_STRING).dtype)
    ('string', 'object')
    >>> str(cast_column([1.5, None], float).dtype), str(cast_column([1.5, "x"], float).dtype)
    ('float64', 'object')
    """
    if dtype == ARROW_STRING:
        try:
            return pd.arrays.ArrowStringArray(pa.array(values, type=pa.string(), from_pandas=True))
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            pass
    column = values if isinstance(values, pd.Series) else pd.Series(values, dtype=None if values else object)
    if dtype == ARROW_STRING:
        return column
    try:
        return column.astype(dtype)
    except (ValueError, TypeError):  # e.g. text in a float column: the contract reports its dtype
        return values if isinstance(values, pd.Series) else column


@dataclass
class ContractResult:
    passed: bool
    rows_checked: int
    failures: dict[Any, str] = field(default_factory=dict)  # failing row index -> "column:check, ..."
    table_errors: list[str] = field(default_factory=list)  # failures not tied to one row (dtype, missing column)

    def summary(self, limit: int = 20) -> list[str]:
        return sorted(set(self.failures.values()) | set(self.table_errors))[:limit]


def validate(model: type[pandera.DataFrameModel], frame: pd.DataFrame) -> ContractResult:
    """Validate every check lazily so one run reports all failures, not just the first."""
    try:
        validated = model.validate(frame, lazy=True)
    except SchemaErrors as errors:
        _drop_pandera_accessor(errors.data)
        cases = errors.failure_cases
        tied = cases["index"].notna()
        failures = {
            index: ", ".join(sorted({f"{column}:{check}" for column, check in zip(group["column"], group["check"])}))
            for index, group in cases.loc[tied].groupby("index")
        }
        table_errors = sorted({f"{c}:{k}" for c, k in zip(cases.loc[~tied, "column"], cases.loc[~tied, "check"])})
        return ContractResult(False, len(frame), failures, table_errors)
    _drop_pandera_accessor(validated)
    return ContractResult(True, len(frame))


@dataclass
class ChunkedContract:
    """A contract checked one chunk at a time, so a table of any size is checked in bounded
    memory. Rows are numbered across chunks (each chunk's index must count from 0), and
    unique columns are also checked across chunks (on their flat values only).

    With ``block_rows``, chunks are held back and checked together once that many rows are
    waiting (:meth:`result` checks the rest): a pandera call costs about 10 ms however few
    its rows, which small chunks of flat columns would pay over and over. Only for data
    whose writes are not final until the result is in (a staged export).
    """

    model: type[pandera.DataFrameModel]
    block_rows: int = 0
    # what the chunks so far found (state, not arguments)
    rows_checked: int = field(default=0, init=False)
    failures: dict[int, str] = field(default_factory=dict, init=False)
    table_errors: set[str] = field(default_factory=set, init=False)
    # per unique key, each checked block's key columns with the block's number: compared
    # across blocks by the result, as columns (a Python set of every value would hold an
    # object per value for the whole step)
    keyed: dict[tuple[str, ...], list[pd.DataFrame]] = field(init=False)
    pending: list[pd.DataFrame] = field(default_factory=list, init=False)
    pending_rows: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        schema = self.model.to_schema()
        keys = [(name,) for name, column in schema.columns.items() if column.unique]
        self.keyed = {key: [] for key in keys + ([tuple(schema.unique)] if schema.unique else [])}

    def check(self, chunk: pd.DataFrame) -> None:
        """Checks the chunk, or holds it back until ``block_rows`` rows wait."""
        self.pending.append(chunk)
        self.pending_rows += len(chunk)
        if self.pending_rows >= self.block_rows:
            self._check_pending()

    def _check_pending(self) -> None:
        if not self.pending:
            return
        chunk = self.pending[0] if len(self.pending) == 1 else pd.concat(self.pending, ignore_index=True)
        self.pending, self.pending_rows = [], 0
        result = validate(self.model, chunk)
        self.failures.update({self.rows_checked + int(index): failed for index, failed in result.failures.items()})
        self.table_errors.update(result.table_errors)
        self.rows_checked += len(chunk)
        for key, blocks in self.keyed.items():
            if all(name in chunk.columns for name in key):  # a missing column is already a table error
                blocks.append(chunk[list(key)].assign(block=len(blocks)))

    def absorb(self, later: "ChunkedContract") -> None:
        """Takes in what ``later`` (the same contract, checked over the rows that follow these:
        the next shard's) found, as if its chunks had been checked here: its rows numbered
        after these, its blocks' unique keys compared with these blocks' by :meth:`result`,
        and the chunks it still holds back held back here, to be checked with the next
        shard's (a shard's rows fill few blocks; a pandera call costs the same however few
        its rows)."""
        if later.rows_checked or later.failures or later.table_errors or any(later.keyed.values()):
            self._check_pending()  # its checked blocks follow every row here, those held back too
        self.failures.update({self.rows_checked + row: failed for row, failed in later.failures.items()})
        self.table_errors.update(later.table_errors)
        self.rows_checked += later.rows_checked
        for key, blocks in self.keyed.items():
            blocks += [block.assign(block=len(blocks) + number) for number, block in enumerate(later.keyed[key])]
        pending, later.pending, later.pending_rows = later.pending, [], 0  # this contract holds them now
        for chunk in pending:
            self.check(chunk)

    def duplicates(self) -> int:
        """Values of a unique key that an earlier block already held (duplicates inside one
        block are the contract's own finding)."""
        found = 0
        for key, blocks in self.keyed.items():
            if len(blocks) > 1:
                keys = pd.concat(blocks, ignore_index=True)
                first = keys.groupby(list(key), sort=False, dropna=False)["block"].transform("min")
                found += int((keys["block"] > first).sum())
        return found

    def result(self) -> ContractResult:
        self._check_pending()
        errors = set(self.table_errors)
        duplicates = self.duplicates()
        if duplicates:
            errors.add(f"{duplicates} duplicate value(s) of {sorted(self.keyed)} across chunks")
        return ContractResult(not self.failures and not errors, self.rows_checked, dict(self.failures), sorted(errors))


def _drop_pandera_accessor(frame) -> None:
    """Pandera validates a copy of the frame and caches a ``copy.pandera`` accessor that
    points back to it: a reference cycle that only a full garbage collection frees. Copies
    full of large export lines then wait for a full collection. Dropping the accessor lets the
    copy go as soon as the validation returns."""
    if isinstance(frame, pd.DataFrame):
        frame.__dict__.pop("pandera", None)
