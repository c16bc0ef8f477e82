"""Run a contract lazily and summarise its failures per row (shared by assets and ingest)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pandera.pandas as pa
from pandera.errors import SchemaErrors


@dataclass
class ContractResult:
    passed: bool
    rows_checked: int
    failures: dict[Any, str] = field(default_factory=dict)  # failing row index -> "column:check, ..."
    table_errors: list[str] = field(default_factory=list)  # failures not tied to one row (dtype, missing column)

    def summary(self, limit: int = 20) -> list[str]:
        return sorted(set(self.failures.values()) | set(self.table_errors))[:limit]


def validate(model: type[pa.DataFrameModel], frame: pd.DataFrame) -> ContractResult:
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


def _drop_pandera_accessor(frame) -> None:
    """Pandera validates a copy of the frame and caches a ``copy.pandera`` accessor that
    points back to it: a reference cycle that only a full garbage collection frees. Copies
    full of large export lines then wait for a full collection. Dropping the accessor lets the
    copy go as soon as the validation returns."""
    if isinstance(frame, pd.DataFrame):
        frame.__dict__.pop("pandera", None)
