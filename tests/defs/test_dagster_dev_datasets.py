"""`dagster dev` on a catalog of two datasets that share one source, through the GraphQL API
the UI uses: the source's sensor ingests each batch once, automation builds both datasets,
and every check passes."""

import shutil

import pytest

from tests.conftest import SAMPLE
from tests.defs.test_dagster_dev import RUNS, everything_green, graphql, running_dagster_dev, tagged_runs, wait_for
from tests.runs.test_namespaces import shared_source_catalog
from trajectory_assets.io.source_files import batch_key, discover
from trajectory_assets.runs.run_plan import BATCHES_TAG
from trajectory_assets.sources import INPUTS_SUFFIXES

SOURCE_ASSETS = {f"rollouts/{name}" for name in ("raw_rollouts", "validated_trajectories", "quarantined_records")}
DATASET_ASSETS = {"sft_set/sft_dataset", "sft_set/trl_sft_dataset", "sft_set/stats_report",
                  "grpo_set/grpo_dataset", "grpo_set/stats_report"}


@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("two_datasets")
    home = root / "dagster_home"
    home.mkdir()
    from tests.conftest import PROJECT_ROOT

    shutil.copy(PROJECT_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    source = root / "incoming"
    shutil.copytree(SAMPLE, source)
    catalog = shared_source_catalog(root, source)
    import os

    env = {key: value for key, value in os.environ.items() if not key.startswith("TRAJECTORY_")}
    env.update({"DAGSTER_HOME": str(home), "TRAJECTORY_CATALOG": str(catalog), "TRAJECTORY_SENSOR_INTERVAL": "2"})
    with running_dagster_dev(root, env) as url:
        yield {"url": url, "root": root, "source": source}


def test_two_datasets_share_one_sources_ingest_and_are_built_by_automation(two_datasets):
    url = two_datasets["url"]
    files = discover([str(two_datasets["source"])], INPUTS_SUFFIXES)
    state = wait_for(lambda: everything_green(url, len(files), SOURCE_ASSETS, DATASET_ASSETS), 600,
                     "the source's batches and both datasets, all green")
    # only the declared assets: the environment's dataset is not built when datasets are declared
    assert {name.split("/")[0] for name in state} == {"rollouts", "sft_set", "grpo_set"}
    runs = tagged_runs(url)
    ingested = [key for run in runs.values() if run["tags"].get(BATCHES_TAG) for key in run["tags"][BATCHES_TAG].split(",")]
    assert sorted(ingested) == sorted(batch_key(found.source_id) for found in files)  # each batch once
    jobs = {run["jobName"] for run in graphql(url, RUNS)["runsOrError"]["results"]}
    assert jobs <= {"ingest_rollouts", "__ASSET_JOB", "build_sft_set", "build_grpo_set"}, jobs
    # automation may still be finishing a run (a report after the other dataset's exports): let it end
    finished = ("SUCCESS", "FAILURE", "CANCELED")
    runs = wait_for(lambda: (lambda now: now if all(run["status"] in finished for run in now.values()) else None)(
        tagged_runs(url)), 300, "every run to end")
    assert all(run["status"] == "SUCCESS" for run in runs.values()), {r["runId"]: r["status"] for r in runs.values()}
    # each dataset wrote its own root, from the source's storage
    root = two_datasets["root"]
    assert sorted(p.name for p in (root / "sft_set" / "exports").iterdir()) == ["sft", "trl_sft"]
    assert sorted(p.name for p in (root / "grpo_set" / "exports").iterdir()) == ["grpo"]
    assert (root / "grpo_set" / "reports" / "stats.md").exists()
