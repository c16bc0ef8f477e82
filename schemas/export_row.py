"""What every export contract checks beside a row's own fields, and how it sees a row.

Each export contract is a Pandera model over the **written rows**: its ``row(record)``
gives, for one row exactly as it is written, the row's scalar fields and one shape per
nested field (``schemas/shapes.py``), so the rules over whole conversations are one
vectorized regex per column. The writer builds the checked frame from the written rows with
it, and adds what says where a row goes: its ``split`` (from ``prompt_key``, the prompt it
holds) and ``fields`` (its top-level fields, in written order).
"""

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import pandas as pd
import pandera.pandas as pandera
from pandera.typing import Series

from schemas.trajectory import HEX_ID
from schemas.validation import ARROW_STRING, ArrowString, cast_columns, declared_dtypes

SPLITS = ["train", "validation"]
# the columns the writer adds to a contract's frame (not read from the row)
PLACEMENT_COLUMNS = ("prompt_key", "split", "fields")


class ExportRowSchema(pandera.DataFrameModel):
    prompt_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    split: Series[ArrowString] = pandera.Field(isin=SPLITS)

    @classmethod
    def row(cls, record: Mapping[str, Any]) -> dict[str, Any]:
        """The checked columns of one written row (every column but :data:`PLACEMENT_COLUMNS`)."""
        raise NotImplementedError


def number(value: Any) -> float:
    """A nullable numeric field as the float column checks it (null: NaN)."""
    return float("nan") if value is None else value


@cache
def row_dtypes(model: type[ExportRowSchema]) -> dict[str, Any]:
    """The dtypes of the columns ``model.row`` reads, as the contract declares them."""
    return {name: dtype for name, dtype in declared_dtypes(model).items() if name not in PLACEMENT_COLUMNS}


def checked_frame(model: type[ExportRowSchema], records: Sequence[Mapping[str, Any]],
                  prompt_keys: Sequence[str], splits: Sequence[str]) -> pd.DataFrame:
    """The frame ``model`` checks for these written rows, each with its prompt and split."""
    dtypes = row_dtypes(model)
    rows = cast_columns(pd.DataFrame.from_records([model.row(record) for record in records], columns=list(dtypes)),
                        dtypes)
    rows["prompt_key"] = pd.array(prompt_keys, dtype=ARROW_STRING)
    rows["split"] = pd.array(splits, dtype=ARROW_STRING)
    rows["fields"] = pd.array([",".join(record) for record in records], dtype=ARROW_STRING)
    return rows
