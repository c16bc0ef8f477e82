"""The report reads no export row (issue 42: no row read twice): with each export's summary it
is the same page and statistics without the export's data files, and the same as the report
that reads the rows of exports written without summaries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from trajectory_assets import layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.registry import EXPORTS
from trajectory_assets.exports.shard_phase import write_exports
from trajectory_assets.ingest.batch import ingest_batch, write_source_record
from trajectory_assets.io.source_files import batch_key
from trajectory_assets.io.storage import Storage
from trajectory_assets.io.batch_summary import read_summary
from trajectory_assets.io.trajectory_table import StoredTrajectories
from trajectory_assets.report.report import TrajectoryPart, summarize_trajectories
from trajectory_assets.report.report_data import QuarantineExamples
from trajectory_assets.report.steps import write_report
from trajectory_assets.sources import discover_sources

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "rollouts"
OUTPUTS = (layout.STATS_JSON, layout.STATS_MARKDOWN, layout.REPORT_PAGE, layout.TASKS)


def report(store: Storage, batches: list[str]) -> dict[str, bytes]:
    write_report(store, batches, PipelineConfig())
    return {path: store.read_bytes(path) for path in OUTPUTS}


@pytest.fixture()
def built(tmp_path):
    """The bundled sample ingested and every export written in two shards."""
    store = Storage(str(tmp_path / "out"))
    batches = []
    for source in discover_sources([str(SAMPLE)]):
        key = batch_key(source.source_id)
        write_source_record(key, store, source)
        ingest_batch(key, store, PipelineConfig())
        batches.append(key)
    config = PipelineConfig(shards={"target_trajectories": 6})
    list(write_exports(store, StoredTrajectories(store, batches), dict.fromkeys(batches, ""), config,
                       list(EXPORTS), {export.name: "test" for export in EXPORTS}, {}))
    return store, batches, tmp_path / "out"


def test_the_report_is_the_same_without_the_exports_rows_and_without_summaries(built):
    store, batches, root = built
    with_summaries = report(store, batches)
    shown = with_summaries[layout.REPORT_PAGE].decode()
    # every export has its section, and rows shown (but the token-level one: no token data here)
    assert all(f'id="export-{export.name}"' in shown for export in EXPORTS)
    assert all(f'class="sample" data-export="{export.name}"' in shown for export in EXPORTS
               if export.name != "on_policy_tokens")
    # written in several shards, so the summaries absorbed shards and shifted their positions
    assert max(described["shard"] for described in store.read_json(layout.export_manifest("sft"))["files"].values()) > 0

    # without summaries: every export's rows are read, as before summaries existed
    summaries = {export.name: store.read_bytes(layout.export_summary(export.name)) for export in EXPORTS}
    for export in EXPORTS:
        store.remove(layout.export_summary(export.name))
    assert report(store, batches) == with_summaries

    # with summaries and no data file: nothing of the rows was read
    for export in EXPORTS:
        store.write_bytes(layout.export_summary(export.name), summaries[export.name])
    data_files = [path for path in (root / "exports").glob("*/*-of-*.*")]
    assert len(data_files) >= 2 * len(EXPORTS)
    for path in data_files:
        path.unlink()
    assert report(store, batches) == with_summaries


def test_the_part_over_the_trajectories_comes_back_from_the_storage_as_it_was(built):
    """The report's first step hands its part to the second through the storage (Parquet, JSON,
    PNG): what the second reads is what the first computed, the frame's dtypes included."""
    store, batches, _ = built
    config = PipelineConfig(grpo={"pass_threshold": 10.0})  # no rollout passes: every task is listed as failing
    summary = read_summary(store, batches)
    examples = QuarantineExamples(config.report.quarantine_examples, summary["rejected_by_reason"])
    for key in batches:
        examples.add_lines(store.read_bytes(layout.batch_quarantine(key)))
    part = summarize_trajectories(StoredTrajectories(store, batches), summary, examples, config)
    # what a round trip could lose: cut texts (quarantine examples, failing tasks' prompts), PNGs
    assert part.quarantine and part.failing_tasks and any(drawn.png for drawn in part.figures)
    part.save(store, "staging/run/report")
    back = TrajectoryPart.load(store, "staging/run/report")
    pd.testing.assert_frame_equal(back.trajectories, part.trajectories, check_exact=True)
    assert dataclasses.replace(back, trajectories=None) == dataclasses.replace(part, trajectories=None)
