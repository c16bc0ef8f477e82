"""Decontamination flags kept per benchmark set: a batch ingested once for several datasets,
each with its own benchmarks, keeps one flags file per set, and each dataset's export steps
find their own flags without scanning the batch again or disturbing another set's."""

import json
import shutil

import pytest

from tests.conftest import make_rollout, write_jsonl
from trajectory_assets import layout
from trajectory_assets.config import DecontaminationConfig, PipelineConfig
from trajectory_assets.ingest import decontamination
from trajectory_assets.ingest.batch import ingest_batch, write_source_record
from trajectory_assets.ingest.decontamination import cached_index, contaminated_trajectories, ingest_flags
from trajectory_assets.io.source_files import SourceFile
from trajectory_assets.io.storage import Storage
from trajectory_assets.io.trajectory_table import StoredTrajectories

QUESTION_A = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
              "How many clips did Natalia sell altogether in April and May?")
QUESTION_B = ("Weng earns 12 dollars an hour for babysitting and yesterday she just did 50 minutes of babysitting "
              "for the family next door. How much did she earn?")
KEY = "batch"


def benchmark_set(tmp_path, name: str, question: str) -> DecontaminationConfig:
    path = write_jsonl(tmp_path / "evals" / f"{name}.jsonl", [{"question": question}])
    return DecontaminationConfig.model_validate(
        {"benchmarks": [{"name": name, "path": str(path), "text_fields": ["question"]}]})


@pytest.fixture
def sets(tmp_path):
    return benchmark_set(tmp_path, "gsm", QUESTION_A), benchmark_set(tmp_path, "babysit", QUESTION_B)


def ingested(tmp_path, configs, prompts=(f"Solve: {QUESTION_A}", f"Solve: {QUESTION_B}", "Say hi.")) -> Storage:
    """One batch of a rollout per prompt, ingested as the ingest asset does with the recorders
    of ``configs``."""
    source = write_jsonl(tmp_path / "in" / "rollouts.jsonl",
                         [make_rollout(request_input=prompt, _ng_task_index=task) for task, prompt in enumerate(prompts)])
    store = Storage(str(tmp_path / "out"))
    write_source_record(KEY, store, SourceFile(str(source), source.name))
    ingest_batch(KEY, store, PipelineConfig(), flags=ingest_flags(configs))
    return store


def matched(store: Storage, config: DecontaminationConfig) -> dict[str, str]:
    """What the set's flags file of the batch holds: trajectory_id -> benchmark."""
    return store.read_json(layout.batch_decontamination(KEY, cached_index(config).fingerprint))["contaminated"]


@pytest.fixture
def scans(monkeypatch):
    """The batches an export step scanned whole because their flags were stale (each read
    as a table of its own, ``contaminated_trajectories``)."""
    scanned = []
    batch = StoredTrajectories.batch

    def counting(self, key):
        scanned.append(key)
        return batch(self, key)

    monkeypatch.setattr(StoredTrajectories, "batch", counting)
    return scanned


def exported_matches(store: Storage, config: DecontaminationConfig) -> set[str]:
    """The benchmarks an export step with ``config`` finds in the batch (all its trajectories kept)."""
    table = StoredTrajectories(store, [KEY])
    ids = {trajectory_id for chunk in table.scan(["trajectory_id"]) for trajectory_id in chunk["trajectory_id"]}
    return set(contaminated_trajectories(table, cached_index(config), ids).values())


def test_a_batch_ingested_with_two_sets_keeps_a_file_per_set_and_each_export_finds_its_own(tmp_path, sets, scans):
    gsm, babysit = sets
    store = ingested(tmp_path, [gsm, babysit, gsm])  # a set configured by two datasets is checked once
    assert sorted(path.name for path in (tmp_path / "out" / layout.batch_decontamination_folder(KEY)).iterdir()) == \
        sorted(f"{cached_index(config).fingerprint[:16]}.json" for config in sets)
    assert set(matched(store, gsm).values()) == {"gsm"} and set(matched(store, babysit).values()) == {"babysit"}
    table = StoredTrajectories(store, [KEY])
    for config in sets:
        assert table.decontamination_flags(cached_index(config).fingerprint)[1] == []  # no stale batch
    assert exported_matches(store, gsm) == {"gsm"} and exported_matches(store, babysit) == {"babysit"}
    assert scans == []


def test_one_sets_flags_survive_an_export_step_run_with_another(tmp_path, sets, scans):
    gsm, babysit = sets
    store = ingested(tmp_path, [gsm])
    gsm_flags = store.read_bytes(layout.batch_decontamination(KEY, cached_index(gsm).fingerprint))
    assert exported_matches(store, babysit) == {"babysit"}
    assert scans == [KEY]  # its flags were missing: scanned once, and stored
    assert store.read_bytes(layout.batch_decontamination(KEY, cached_index(gsm).fingerprint)) == gsm_flags
    assert exported_matches(store, gsm) == {"gsm"} and exported_matches(store, babysit) == {"babysit"}
    assert scans == [KEY]  # both sets' flags current: no batch scanned again


def test_flags_stored_before_sets_are_read_while_their_fingerprint_matches(tmp_path, sets, scans):
    """A storage written before flags were kept per set holds one file per batch: it stays
    current for its own benchmarks (no rescan after an upgrade), and another set gets a file
    of its own beside it."""
    gsm, babysit = sets
    store = ingested(tmp_path, [gsm])
    stored = tmp_path / "out" / layout.batch_decontamination(KEY, cached_index(gsm).fingerprint)
    shutil.move(stored, tmp_path / "out" / layout.batch_decontamination_before_sets(KEY))
    shutil.rmtree(stored.parent)
    table = StoredTrajectories(store, [KEY])
    found, stale, ngrams = table.decontamination_flags(cached_index(gsm).fingerprint)
    assert stale == [] and set(found.values()) == {"gsm"} and ngrams is not None
    assert table.decontamination_flags(cached_index(babysit).fingerprint)[1] == [KEY]
    assert exported_matches(store, gsm) == {"gsm"} and scans == []  # no rescan
    assert exported_matches(store, babysit) == {"babysit"} and scans == [KEY]  # its own file written
    assert set(matched(store, babysit).values()) == {"babysit"}
    assert json.loads((tmp_path / "out" / layout.batch_decontamination_before_sets(KEY)).read_text())[
        "fingerprint"] == cached_index(gsm).fingerprint


def test_ingest_leaves_no_flags_of_the_batchs_earlier_contents(tmp_path, sets):
    """A batch ingested again drops every set's flags, those of a set no dataset configures
    now too (it may be configured again: its flags must be found anew)."""
    gsm, babysit = sets
    store = ingested(tmp_path, [gsm, babysit])
    (tmp_path / "out" / layout.batch_decontamination_before_sets(KEY)).write_text(
        json.dumps({"fingerprint": cached_index(babysit).fingerprint, "contaminated": {}}))
    store = ingested(tmp_path, [gsm], prompts=(f"Solve: {QUESTION_B}", "Say hi."))
    assert matched(store, gsm) == {}
    assert not store.exists(layout.batch_decontamination(KEY, cached_index(babysit).fingerprint))
    assert not store.exists(layout.batch_decontamination_before_sets(KEY))
    assert StoredTrajectories(store, [KEY]).decontamination_flags(cached_index(babysit).fingerprint)[1] == [KEY]
    ingested(tmp_path, [])
    assert not any((tmp_path / "out" / "trajectories" / "batches").glob("*.decontamination*"))


def test_each_set_sees_every_trajectory_once_and_its_texts_are_listed_once(tmp_path, sets, monkeypatch):
    listed = []
    turn_texts = decontamination.turn_texts

    def counting(messages):
        listed.append(1)
        return turn_texts(messages)

    monkeypatch.setattr(decontamination, "turn_texts", counting)
    store = ingested(tmp_path, list(sets))
    valid = store.read_json(layout.batch_summary(KEY))["records_valid"]
    assert valid == 3 and len(listed) == valid  # one listing per trajectory, whatever the number of sets
    for config in sets:
        assert len(matched(store, config)) == 1


def test_ingest_flags_gives_one_recorder_per_readable_set_with_benchmarks(tmp_path, sets):
    gsm, babysit = sets
    unreadable = DecontaminationConfig.model_validate(
        {"benchmarks": [{"name": "gone", "path": str(tmp_path / "none.jsonl"), "text_fields": ["question"]}]})
    recorders = ingest_flags([DecontaminationConfig(), gsm, unreadable, babysit, gsm])
    assert [recorder.fingerprint for recorder in recorders] == [cached_index(gsm).fingerprint,
                                                                 cached_index(babysit).fingerprint]
    assert ingest_flags([]) == [] and ingest_flags([DecontaminationConfig()]) == []
    # both indexes stay built in the process: the next batch reads no benchmark again
    assert all(again.index is first.index for again, first in zip(ingest_flags([gsm, babysit]), recorders))
