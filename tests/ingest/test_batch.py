"""A batch's checks on its stored files, as pure rules (the Dagster checks that report them:
tests/defs/test_pipeline.py)."""

from trajectory_assets.ingest.batch import nothing_lost, trajectory_contract


def test_the_trajectory_contract_check_reports_the_ingest_result():
    """Rows that failed the contract in ingest are quarantined; the check passes only when
    the file holds exactly the rows that passed it."""
    summary = {"contract_rows_checked": 5, "contract_violations": 1}
    passed, metadata, _ = trajectory_contract(summary, {"trajectory_rows_written": 4})
    assert passed and metadata["quarantined_as_contract_violation"] == 1 and metadata["rows_passed"] == 4
    passed, _, description = trajectory_contract(summary, {"trajectory_rows_written": 5})
    assert not passed and "exactly the rows" in description
    passed, _, description = trajectory_contract({}, {"trajectory_rows_written": 0})
    assert not passed and "materialize the batch again" in description


def test_nothing_lost_holds_when_every_record_is_a_row_of_one_file():
    counts = {"records_read": 3, "records_valid": 2, "records_rejected": 1, "sources_failed": 1,
              "trajectory_rows_written": 2, "quarantine_rows_written": 2}
    assert nothing_lost(counts) == (True, counts, None)
    passed, _, description = nothing_lost({**counts, "quarantine_rows_written": 1})
    assert not passed and "lost or double counted" in description
