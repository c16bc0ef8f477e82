"""What every export contract checks beside a row's own fields, and how it sees a row.

Each export contract is a Pandera model over the **written rows**: its ``columns(records)``
gives, for rows exactly as they are written, one list per checked column: the rows' scalar
fields and one shape per nested field (``schemas/shapes.py``), so the rules over whole
conversations are one vectorized regex per column (read column by column, as the frame is
built: no dict per row). The writer builds the checked frame from the written rows with it,
and adds what says where a row goes: its ``split`` (from ``prompt_key``, the prompt it
holds) and ``fields`` (its top-level fields, in written order).
"""

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import pandas as pd
import pandera.pandas as pandera
from pandera.typing import Series

from schemas.trajectory import HEX_ID
from schemas.validation import ARROW_STRING, ArrowString, cast_column, declared_dtypes

SPLITS = ["train", "validation"]
# the columns the writer adds to a contract's frame (not read from the row)
PLACEMENT_COLUMNS = ("prompt_key", "split", "fields")


class ExportRowSchema(pandera.DataFrameModel):
    prompt_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    split: Series[ArrowString] = pandera.Field(isin=SPLITS)

    @classmethod
    def columns(cls, records: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
        """The checked columns of these written rows (every column but
        :data:`PLACEMENT_COLUMNS`), each a list in row order."""
        raise NotImplementedError


def field_values(records: Sequence[Mapping[str, Any]], name: str) -> list[Any]:
    """Each record's field ``name`` (None where it has none)."""
    return [record.get(name) for record in records]


def numbers(values: Iterable[Any]) -> list[Any]:
    """Nullable numeric values as the float column checks them (null: NaN)."""
    return [NAN if value is None else value for value in values]


NAN = float("nan")


@cache
def row_dtypes(model: type[ExportRowSchema]) -> dict[str, Any]:
    """The dtypes of the columns ``model.columns`` reads, as the contract declares them."""
    return {name: dtype for name, dtype in declared_dtypes(model).items() if name not in PLACEMENT_COLUMNS}


def checked_frame(model: type[ExportRowSchema], records: Sequence[Mapping[str, Any]],
                  prompt_keys: Sequence[str], splits: Sequence[str]) -> pd.DataFrame:
    """The frame ``model`` checks for these written rows, each with its prompt and split.

    Built from the columns ``model.columns`` gives: each column is the dtype the contract
    declares where its values allow it, else the type pandas infers, which the contract then
    reports (:func:`schemas.validation.cast_column`)."""
    values = model.columns(records)
    columns = {name: cast_column(values[name], dtype) for name, dtype in row_dtypes(model).items()}
    columns["prompt_key"] = cast_column(list(prompt_keys), ARROW_STRING)
    columns["split"] = cast_column(list(splits), ARROW_STRING)
    columns["fields"] = cast_column([",".join(record) for record in records], ARROW_STRING)
    return pd.DataFrame(columns, index=pd.RangeIndex(len(records)))
