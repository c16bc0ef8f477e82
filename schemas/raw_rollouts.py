"""Contract of a batch's raw record: the source file it was made from, its inputs file, the
files beside it (lineage only), and for a batch of folder records (Harbor trials) every file
of every record."""

import re
from typing import Any

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.validation import ArrowString

SHA256 = r"^[0-9a-f]{64}$"
_SHA256 = re.compile(SHA256)


def listed_file(entry: Any, name_key: str) -> bool:
    """A file as a raw record lists it: named (``name_key``), and either read (its size and
    SHA-256) or not (its error, no digest).

    >>> listed_file({"path": "a.json", "bytes": 3, "sha256": "0" * 64, "error": None}, "path")
    True
    >>> listed_file({"path": "a.json", "bytes": None, "sha256": None, "error": "cannot read: gone"}, "path")
    True
    >>> listed_file({"path": "a.json", "bytes": 3, "sha256": None, "error": None}, "path")
    False
    """
    if not isinstance(entry, dict) or not isinstance(entry.get(name_key), str) or not entry[name_key]:
        return False
    if entry.get("error") is None:
        size, digest = entry.get("bytes"), entry.get("sha256")
        return (isinstance(size, int) and not isinstance(size, bool) and size >= 0
                and isinstance(digest, str) and _SHA256.match(digest) is not None)
    return isinstance(entry["error"], str) and entry.get("sha256") is None


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
    side_files: Series[object] = pandera.Field(
        description="files a producer writes beside the source (metrics, sidecars), never read: each "
                    "{uri, name, bytes, sha256, error}")
    records: Series[object] = pandera.Field(
        nullable=True, description="a batch of folder records (Harbor trials): each {name, folder, files: "
                                   "[{path, bytes, sha256, error}]}; null for a file of lines")

    @pandera.check("side_files", element_wise=True, name="side_files_listed")
    def side_files_listed(cls, value) -> bool:
        return isinstance(value, list) and all(listed_file(entry, "uri") for entry in value)

    @pandera.check("records", element_wise=True, name="records_listed")
    def records_listed(cls, value) -> bool:
        return isinstance(value, list) and bool(value) and all(
            isinstance(record, dict) and isinstance(record.get("name"), str) and isinstance(record.get("folder"), str)
            and isinstance(record.get("files"), list) and record["files"]
            and all(listed_file(entry, "path") for entry in record["files"]) for record in value)

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
