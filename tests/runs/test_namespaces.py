"""No call disturbs another: CLI calls sharing one DAGSTER_HOME, at once and one after the
other, on different sources and on declared datasets sharing a source.

Every call is a real ``trajectory-assets`` process. The Postgres variants of the two
concurrent cases are in tests/deploy/test_postgres.py (they reuse ``calls_at_once`` and the
checks here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from tests.split_files import split_text
from tests.conftest import SAMPLE, shared_data, temporary_dagster_home, written_files
from trajectory_assets.project import call_name

CLI = str(Path(sys.executable).parent / "trajectory-assets")


def cli(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def calls_at_once(calls: list[list[str]], env: dict) -> list[tuple[int, str]]:
    """Starts every call, then waits for all: (exit code, stderr) each."""
    started = [cli(*call, env=env) for call in calls]
    return [(process.wait(timeout=900), process.stderr.read()) for process in started]


def env_with(home: Path, **extra: str) -> dict:
    return {**os.environ, "DAGSTER_HOME": str(home), **extra}


def split_sample(root: Path) -> tuple[Path, Path]:
    """The bundled sample as two sources: its NeMo Gym files, and its Harbor-style folder."""
    first, second = root / "first", root / "second"
    first.mkdir(parents=True)
    for name in ("legacy_rollouts.jsonl", "math_rollouts.jsonl.gz"):
        shutil.copy(SAMPLE / name, first / name)
    shutil.copytree(SAMPLE / "weather", second / "weather")
    return first, second


def partitions(home: Path, name: str) -> list[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        with dg.DagsterInstance.get() as instance:
            return sorted(instance.get_dynamic_partitions(name))


def two_sources_at_once(root: Path, first: Path, second: Path, env: dict) -> None:
    """Each source alone on an instance of its own, then both at once on one instance: both
    exit 0, and each dataset is byte-identical to its lone call's."""
    for name, source in (("first", first), ("second", second)):
        home = temporary_dagster_home(root / f"alone_{name}_home")
        code, error = calls_at_once([["run", "--source", str(source), "--storage", str(root / f"alone_{name}")]],
                                    {**env, "DAGSTER_HOME": str(home)})[0]
        assert code == 0, error
    results = calls_at_once([["run", "--source", str(first), "--storage", str(root / "first_out")],
                             ["run", "--source", str(second), "--storage", str(root / "second_out")]], env)
    assert [code for code, _ in results] == [0, 0], results
    for name in ("first", "second"):
        assert written_files(root / f"{name}_out") == written_files(root / f"alone_{name}")


def test_two_calls_at_once_on_different_sources_both_succeed_as_if_alone(tmp_path, temporary_instance):
    first, second = split_sample(tmp_path / "in")
    two_sources_at_once(tmp_path, first, second, env_with(temporary_instance))


def test_two_calls_at_once_on_the_corpus_nemo_gym_and_hermes_folders(tmp_path, temporary_instance):
    """The issue's case: the 47 NeMo Gym files of ../shared/corpus and its Hermes folder, two
    seconds apart on the default instance, failed the NeMo Gym call ("Nonexistent partition keys")."""
    two_sources_at_once(tmp_path, shared_data("corpus/nemo_gym"), shared_data("corpus/hermes"),
                        env_with(temporary_instance))


def test_a_call_on_another_source_leaves_the_first_calls_batches(tmp_path, temporary_instance):
    first, second = split_sample(tmp_path / "in")
    env = env_with(temporary_instance)
    for source in (first, second):
        code, error = calls_at_once([["run", "--source", str(source), "--storage", str(tmp_path / source.name)]],
                                    env)[0]
        assert code == 0, error
    first_batches = partitions(temporary_instance, f"{call_name([str(first)], str(tmp_path / 'first'))}_batches")
    second_batches = partitions(temporary_instance, f"{call_name([str(second)], str(tmp_path / 'second'))}_batches")
    assert len(first_batches) == 2 and len(second_batches) == 1
    assert partitions(temporary_instance, "rollout_batches") == []  # the environment's dataset is untouched


def shared_source_catalog(root: Path, source: Path) -> Path:
    """A catalog: one source, two datasets reading it (with different curation)."""
    catalog = root / "catalog"
    (catalog / "sources" / "rollouts").mkdir(parents=True)
    (catalog / "sources" / "rollouts" / "defs.yaml").write_text(
        "type: trajectory_assets.defs.components.RolloutSource\n"
        f"attributes:\n  name: rollouts\n  uris: [{source}]\n  storage: {root / 'rollouts_store'}\n")
    for name, exports, extra in (("sft_set", "[sft, trl_sft]", ""),
                                 ("grpo_set", "[grpo]", "  config:\n    grpo:\n      zero_variance_groups: keep\n")):
        (catalog / "datasets" / name).mkdir(parents=True)
        (catalog / "datasets" / name / "defs.yaml").write_text(
            "type: trajectory_assets.defs.components.TrainingDataset\n"
            f"attributes:\n  name: {name}\n  sources: [rollouts]\n  storage: {root / name}\n"
            f"  exports: {exports}\n{extra}")
    return catalog


def ingest_counts(home: Path, source: str) -> dict[str, int]:
    """How many times each batch of a source was ingested (its trajectories materialized)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        with dg.DagsterInstance.get() as instance:
            records = instance.fetch_materializations(dg.AssetKey([source, "validated_trajectories"]),
                                                      limit=1000).records
            counts: dict[str, int] = {}
            for record in records:
                counts[record.partition_key] = counts.get(record.partition_key, 0) + 1
            return counts


def two_datasets_sharing_a_source(root: Path, env: dict) -> None:
    """Two --dataset calls at once, both reading one source: both exit 0, each batch is
    ingested once, and each dataset holds its own exports, naming itself and the source."""
    catalog = shared_source_catalog(root, SAMPLE)
    env = {**env, "TRAJECTORY_CATALOG": str(catalog)}
    results = calls_at_once([["run", "--dataset", "sft_set"], ["run", "--dataset", "grpo_set"]], env)
    assert [code for code, _ in results] == [0, 0], results
    counts = ingest_counts(Path(env["DAGSTER_HOME"]), "rollouts")
    assert len(counts) == 3 and set(counts.values()) == {1}, counts
    import json

    assert sorted(p.name for p in (root / "sft_set" / "exports").iterdir()) == ["sft", "trl_sft"]
    assert sorted(p.name for p in (root / "grpo_set" / "exports").iterdir()) == ["grpo"]
    manifest = json.loads((root / "grpo_set" / "exports" / "grpo" / "manifest.json").read_text())
    assert manifest["dataset"] == {"name": "grpo_set", "sources": [{"name": "rollouts",
                                                                    "batches": sorted(counts)}]}
    card = (root / "grpo_set" / "exports" / "grpo" / "README.md").read_text()
    assert "dataset `grpo_set`, from the source(s) `rollouts` (3 batch(es))" in card
    # the datasets read the source's storage; they write only their own roots
    assert not (root / "rollouts_store" / "exports").exists()
    assert (root / "rollouts_store" / "trajectories" / "batches").is_dir()


def test_two_datasets_sharing_a_source_at_once_ingest_each_batch_once(tmp_path, temporary_instance):
    two_datasets_sharing_a_source(tmp_path, env_with(temporary_instance))


def test_a_second_call_of_a_dataset_ingests_nothing_new(tmp_path, temporary_instance):
    catalog = shared_source_catalog(tmp_path, SAMPLE)
    env = env_with(temporary_instance, TRAJECTORY_CATALOG=str(catalog))
    for dataset in ("sft_set", "sft_set", "grpo_set"):
        code, error = calls_at_once([["run", "--dataset", dataset]], env)[0]
        assert code == 0, error
    assert set(ingest_counts(temporary_instance, "rollouts").values()) == {1}
    listing = subprocess.run([CLI, "list"], env=env, capture_output=True, text=True, check=True).stdout
    assert "rollouts:" in listing and "3 batch(es)" in listing and "sft_set: reads rollouts" in listing
    assert "never materialized" not in listing


def test_an_unknown_dataset_is_refused_in_one_line(tmp_path, temporary_instance):
    catalog = shared_source_catalog(tmp_path, SAMPLE)
    result = subprocess.run([CLI, "run", "--dataset", "nope"], env=env_with(temporary_instance,
                                                                           TRAJECTORY_CATALOG=str(catalog)),
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == ("trajectory-assets: no dataset 'nope' is declared; declared: grpo_set, sft_set "
                                     "(trajectory-assets list)")


def test_each_dataset_of_a_shared_source_is_decontaminated_against_its_own_benchmarks(tmp_path, temporary_instance):
    """One source, two datasets with different evaluation sets: the source's one ingest flags
    each batch against both (a file per set beside it), and each dataset leaves out only what
    its own set matches, from those flags (the second call scans nothing again)."""
    from tests.test_cli import decontamination_run

    _, source, benchmark = decontamination_run(tmp_path)
    catalog = tmp_path / "catalog"
    (catalog / "sources" / "evals").mkdir(parents=True)
    (catalog / "sources" / "evals" / "defs.yaml").write_text(
        "type: trajectory_assets.defs.components.RolloutSource\n"
        f"attributes:\n  name: evals\n  uris: [{source}]\n  storage: {tmp_path / 'evals_store'}\n")
    for name, compared in (("by_text", "text_fields: [question]"), ("by_id", "id_field: instance_id")):
        (catalog / "datasets" / name).mkdir(parents=True)
        (catalog / "datasets" / name / "defs.yaml").write_text(
            "type: trajectory_assets.defs.components.TrainingDataset\n"
            f"attributes:\n  name: {name}\n  sources: [evals]\n  storage: {tmp_path / name}\n  exports: [sft]\n"
            "  config:\n    split: {validation_fraction: 0}\n    decontamination:\n      benchmarks:\n"
            f"      - {{name: gsm8k, path: {benchmark}, {compared}}}\n")
    env = env_with(temporary_instance, TRAJECTORY_CATALOG=str(catalog))
    code, error = calls_at_once([["run", "--dataset", "by_text"]], env)[0]
    assert code == 0, error
    flags = sorted((tmp_path / "evals_store" / "trajectories" / "batches").glob("*.decontamination/*.json"))
    assert len(flags) == 2  # one file per benchmark set, both made by the one ingest
    written = {path: path.stat().st_mtime_ns for path in flags}
    code, error = calls_at_once([["run", "--dataset", "by_id"]], env)[0]
    assert code == 0, error
    assert {path: path.stat().st_mtime_ns for path in flags} == written  # used as they were: no rescan
    assert set(ingest_counts(temporary_instance, "evals").values()) == {1}
    import json

    # the SFT family keeps one passing rollout per task: each set's match leaves out one row
    for name, quoting, carrying in (("by_text", 0, 1), ("by_id", 1, 0)):
        train = split_text(tmp_path / name / "exports" / "sft", "train")
        manifest = json.loads((tmp_path / name / "exports" / "sft" / "manifest.json").read_text())
        assert manifest["excluded"]["contaminated:gsm8k"] == 1, name
        assert train.count("NATALIA SOLD CLIPS") == quoting and train.count("Fix the parser.") == carrying, name


@pytest.mark.parametrize("args", [["run", "--dataset", "x", "--source", "in"], ["run", "--source", "in"], ["run"]])
def test_a_call_names_a_dataset_or_its_sources_and_storage(args, capsys):
    from trajectory_assets.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 2
    assert "--dataset" in capsys.readouterr().err


def test_a_datasets_config_file_is_the_one_its_loading_checked_wherever_the_call_runs(tmp_path, temporary_instance):
    """A dataset's config_file and the benchmark paths in it are relative to the catalog's
    folder; a call from another working directory uses them as the catalog's loading read them."""
    from tests.test_cli import decontamination_run

    _, source, benchmark = decontamination_run(tmp_path)
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    shutil.copy(benchmark, project / "configs" / "gsm8k.jsonl")
    (project / "configs" / "evals.yaml").write_text(
        "split: {validation_fraction: 0}\ndecontamination:\n  benchmarks:\n"
        "  - {name: gsm8k, path: configs/gsm8k.jsonl, text_fields: [question]}\n")
    for kind, name, attributes in (("sources", "evals", f"uris: [{source}]\n  storage: stores/evals"),
                                   ("datasets", "evals_sft", "sources: [evals]\n  storage: stores/evals_sft\n"
                                                             "  exports: [sft]\n  config_file: configs/evals.yaml")):
        (project / "catalog" / kind / name).mkdir(parents=True)
        component = "RolloutSource" if kind == "sources" else "TrainingDataset"
        (project / "catalog" / kind / name / "defs.yaml").write_text(
            f"type: trajectory_assets.defs.components.{component}\nattributes:\n  name: {name}\n  {attributes}\n")
    result = subprocess.run([CLI, "run", "--dataset", "evals_sft"], cwd="/", capture_output=True, text=True,
                            env=env_with(temporary_instance, TRAJECTORY_CATALOG=str(project / "catalog")))
    assert result.returncode == 0, result.stderr
    import json

    manifest = json.loads((project / "stores" / "evals_sft" / "exports" / "sft" / "manifest.json").read_text())
    assert manifest["excluded"]["contaminated:gsm8k"] == 1
    assert manifest["config"]["decontamination"]["benchmarks"][0]["path"] == str(project / "configs" / "gsm8k.jsonl")
