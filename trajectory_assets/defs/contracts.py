"""What Dagster shows of the data and its contracts: column metadata and asset-check results."""


import warnings
from collections.abc import Mapping

import dagster as dg
import pandera.pandas as pandera
import pyarrow

from schemas.validation import ContractResult

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # dagster-pandera marks its one function as beta
    from dagster_pandera import pandera_schema_to_dagster_type


def column_schema(model: type[pandera.DataFrameModel]) -> dg.TableSchema:
    """The columns of a file whose columns are the contract's (a raw record, the quarantine),
    with the contract's descriptions, as the asset's columns in the UI."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pandera_schema_to_dagster_type(model).metadata["schema"].schema


def written_column_schema(schema: pyarrow.Schema, descriptions: Mapping[str, str]) -> dg.TableSchema:
    """The columns of a written file, from the Arrow schema it is written with: the asset's
    columns in the UI are the file's, every one described."""
    return dg.TableSchema(columns=[
        dg.TableColumn(field.name, arrow_type_name(field.type), description=descriptions[field.name])
        for field in schema])


def arrow_type_name(arrow_type: pyarrow.DataType) -> str:
    """A short name of an Arrow type: ``json`` for Arrow's JSON extension type (what the
    Parquet JSON logical type reads as), nested types by their parts.

    >>> arrow_type_name(pyarrow.list_(pyarrow.struct([("role", pyarrow.string()), ("n", pyarrow.int64())])))
    'list<struct<role: string, n: int64>>'
    """
    if getattr(arrow_type, "extension_name", None):  # pyarrow's JSON type is a built-in extension type
        return "json" if arrow_type.extension_name == "arrow.json" else arrow_type.extension_name
    if pyarrow.types.is_list(arrow_type) or pyarrow.types.is_large_list(arrow_type):
        return f"list<{arrow_type_name(arrow_type.value_type)}>"
    if pyarrow.types.is_struct(arrow_type):
        return "struct<" + ", ".join(f"{field.name}: {arrow_type_name(field.type)}" for field in arrow_type) + ">"
    return str(arrow_type)


def contract_metadata(result: ContractResult) -> dict:
    return {
        "rows_checked": result.rows_checked,
        "failing_rows": len(result.failures),
        "failures": dg.MetadataValue.md("\n".join(f"- `{s}`" for s in result.summary()) or "none"),
    }


def contract_check_result(result: ContractResult, *, asset: str, check_name: str = "contract") -> dg.AssetCheckResult:
    return dg.AssetCheckResult(asset_key=asset, check_name=check_name, passed=result.passed,
                               metadata=contract_metadata(result))
