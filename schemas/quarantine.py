"""Contract of the quarantine: every rejected record with where it came from and why."""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.validation import ArrowString


class QuarantineSchema(pandera.DataFrameModel):
    source: Series[ArrowString] = pandera.Field(description="URI of the source file the record was read from")
    line: Series[pandera.Int64] = pandera.Field(
        nullable=True, ge=1, description="its line in the source (1-based); null when the whole source failed")
    reason: Series[ArrowString] = pandera.Field(str_matches=r"^[a-z][a-z0-9_]*$",
                                                description="why it was rejected, as a reason code (README: Nothing is lost)")
    detail: Series[ArrowString] = pandera.Field(
        str_length={"min_value": 1}, description="what exactly was wrong, and where")
    raw: Series[ArrowString] = pandera.Field(description="the record's raw text as read (secrets already redacted)")

    @pandera.dataframe_check(name="record_rows_have_raw_text")
    def record_rows_have_raw_text(cls, df):
        return df["line"].isna() | (df["raw"].str.len() > 0)

    class Config:
        strict = True
