"""Contract of a batch's raw record: the source file it was made from, and its side file."""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.validation import ArrowString

SHA256 = r"^[0-9a-f]{64}$"


class RawRolloutSchema(pandera.DataFrameModel):
    uri: Series[ArrowString] = pandera.Field(
        str_length={"min_value": 1}, description="where the source file was read from")
    source_id: Series[ArrowString] = pandera.Field(
        str_length={"min_value": 1}, description="the file's path relative to its source root's parent")
    sha256: Series[ArrowString] = pandera.Field(
        nullable=True, str_matches=SHA256,
        description="SHA-256 of the file's stored bytes; null when it cannot be read")
    bytes: Series[pandera.Int64] = pandera.Field(ge=0, description="size of the file's stored bytes")
    inputs_uri: Series[ArrowString] = pandera.Field(
        nullable=True, description="NeMo Gym's materialized inputs beside the file, if any")
    inputs_sha256: Series[ArrowString] = pandera.Field(
        nullable=True, str_matches=SHA256, description="SHA-256 of the materialized inputs")
    inputs_error: Series[ArrowString] = pandera.Field(
        nullable=True, description="why the materialized inputs cannot be read; the batch is then read without them")
    data_version: Series[ArrowString] = pandera.Field(
        str_matches=r"^(?:[0-9a-f]{64}|unreadable)$",
        description="the batch's data version: the file's SHA-256, combined with its materialized inputs' when it "
                    "has them")
    error: Series[ArrowString] = pandera.Field(nullable=True, description="why the file cannot be read, if it cannot")

    @pandera.dataframe_check(name="unreadable_iff_error")
    def unreadable_iff_error(cls, df):
        return df["sha256"].isna() == df["error"].notna()

    @pandera.dataframe_check(name="inputs_hashed_or_failed")
    def inputs_hashed_or_failed(cls, df):
        # a side file is either read (hashed) or its error is recorded; none: neither
        return (df["inputs_sha256"].notna() + df["inputs_error"].notna()) == df["inputs_uri"].notna().astype(int)

    class Config:
        strict = True
        coerce = False
