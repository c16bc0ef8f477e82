"""The export registry: one module per export, and everything else derived from it."""

from pathlib import Path

import pytest

from tests.exports.rendering import build
from trajectory_assets.exports.registry import EXPORTS, EXPORTS_BY_NAME, markdown_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_table_is_the_registry():
    readme = README.read_text()
    begin, end = "<!-- exports table: generated from exports/registry.py -->\n", "\n<!-- end of the exports table -->"
    assert begin in readme and end in readme
    assert readme.split(begin, 1)[1].split(end, 1)[0] == markdown_table()


def test_names_and_assets_are_unique():
    assert len(EXPORTS_BY_NAME) == len(EXPORTS)
    assert len({export.asset_name for export in EXPORTS}) == len(EXPORTS)


@pytest.mark.parametrize("export", EXPORTS, ids=lambda export: export.name)
def test_every_contract_reads_its_columns_from_the_written_row(export):
    from schemas.export_row import PLACEMENT_COLUMNS, row_dtypes

    columns = export.contract.to_schema().columns
    assert set(PLACEMENT_COLUMNS) <= set(columns)  # every export is split and checks its rows' fields
    assert set(row_dtypes(export.contract)) == set(columns) - set(PLACEMENT_COLUMNS)
    records = built(export).records
    columns = export.contract.columns(records)
    assert set(columns) == set(row_dtypes(export.contract))
    assert all(len(values) == len(records) for values in columns.values())


def built(export):
    """The export of a few rollouts: two tasks of two rewarded rollouts each, and one with a tool call."""
    from tests.conftest import call_item, make_rollout, message_item, output_item, trajectory_frame
    from trajectory_assets.config import DpoConfig, GrpoConfig, SftConfig, SplitConfig

    rows = [make_rollout([message_item(f"answer {i}")], request_input=f"task {i % 2}", reward=float(i // 2),
                         agent_ref={"name": "agent"})
            for i in range(4)]
    rows.append(make_rollout([call_item("f", "{}", "c1"), output_item("c1", "r"), message_item("ok")], reward=1.0))
    config = {"sft": SftConfig(min_reward=None), "dpo": DpoConfig(), "grpo": GrpoConfig()}[export.family]
    return build(export.name, trajectory_frame(rows), config, SplitConfig())


@pytest.mark.parametrize("export", EXPORTS, ids=lambda export: export.name)
def test_every_export_is_built_by_its_name_and_passes_its_contract(export):
    from schemas.validation import ARROW_STRING, validate

    frame = built(export)
    assert set(frame.rows.columns) == set(export.contract.to_schema().columns)
    assert len(frame.records) == len(frame.rows)
    assert frame.rows["fields"].tolist() == [",".join(record) for record in frame.records]
    assert validate(export.contract, frame.rows).passed
    # the rows reach the contract with Arrow-backed strings, as it declares them (no per-value check)
    strings = [name for name, column in export.contract.to_schema().columns.items() if column.dtype.type == ARROW_STRING]
    assert "split" in strings and all(frame.rows[name].dtype == ARROW_STRING for name in strings)
    if export.name != "on_policy_tokens":  # the fixtures carry no token data
        assert len(frame.rows) > 0


@pytest.mark.parametrize("export", [export for export in EXPORTS if export.file_format == "parquet"],
                         ids=lambda export: export.name)
def test_parquet_built_from_records_is_what_their_json_would_give(export):
    """Parquet flavors are built from the records; before, from their JSON lines parsed back.
    The table must be the same (no tuple, NaN or fragment the JSON would have changed)."""
    import orjson

    from trajectory_assets.io.arrow_rows import table_from_records

    records = built(export).records
    if export.name != "on_policy_tokens":  # the fixtures carry no token data
        assert records
    parsed_back = [orjson.loads(orjson.dumps(record)) for record in records]
    assert table_from_records(records, export.arrow_schema).equals(table_from_records(parsed_back, export.arrow_schema))


def test_the_cli_offers_exactly_the_registry(capsys):
    from trajectory_assets.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    offered = " ".join(capsys.readouterr().out.split()).split("(default: all): ", 1)[1]
    assert [name.strip(" ,") for name in offered.split()][:len(EXPORTS)] == list(EXPORTS_BY_NAME)
