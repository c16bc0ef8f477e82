"""Pandera contracts as Dagster sees them: column metadata and asset-check results."""


import warnings

import dagster as dg
import pandera.pandas as pa

from schemas.validation import ContractResult

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # dagster-pandera marks its one function as beta
    from dagster_pandera import pandera_schema_to_dagster_type


def column_schema(model: type[pa.DataFrameModel]) -> dg.TableSchema:
    """The contract as Dagster column metadata (shown as the asset's columns in the UI)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pandera_schema_to_dagster_type(model).metadata["schema"].schema


def contract_metadata(result: ContractResult) -> dict:
    return {
        "rows_checked": result.rows_checked,
        "failing_rows": len(result.failures),
        "failures": dg.MetadataValue.md("\n".join(f"- `{s}`" for s in result.summary()) or "none"),
    }


def contract_check_result(result: ContractResult, *, asset: str, check_name: str = "contract") -> dg.AssetCheckResult:
    return dg.AssetCheckResult(asset_key=asset, check_name=check_name, passed=result.passed,
                               metadata=contract_metadata(result))
