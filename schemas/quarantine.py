"""Contract of the quarantine: every rejected record with where it came from and why."""

import pandera.pandas as pa
from pandera.typing import Series


class QuarantineSchema(pa.DataFrameModel):
    source: Series[str]
    line: Series[pa.Int64] = pa.Field(nullable=True, ge=1)  # null: the whole source failed
    reason: Series[str] = pa.Field(str_matches=r"^[a-z][a-z0-9_]*$")
    detail: Series[str] = pa.Field(str_length={"min_value": 1})
    raw: Series[str]

    @pa.dataframe_check(name="record_rows_have_raw_text")
    def record_rows_have_raw_text(cls, df):
        return df["line"].isna() | (df["raw"].str.len() > 0)

    class Config:
        strict = True
