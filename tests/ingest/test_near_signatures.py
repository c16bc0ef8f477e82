"""MinHash signatures signed at ingest (``ingest/near_signatures.py``): stored beside a batch
only when a dataset reading its source uses ``dedup: near``, each exactly the signature of the
stored conversation, and never left beside a batch ingested again."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import make_rollout, shared_data, write_jsonl
from trajectory_assets import layout
from trajectory_assets.config import DpoConfig, GrpoConfig, PipelineConfig, SftConfig
from trajectory_assets.defs.resources import PipelineSettings
from trajectory_assets.definitions import _settings
from trajectory_assets.ingest import near_signatures
from trajectory_assets.ingest.batch import ingest_batch, write_source_record
from trajectory_assets.ingest.near_signatures import NearSignatures, is_current, signature, stored_signatures
from trajectory_assets.io.source_files import SourceFile
from trajectory_assets.io.storage import Storage
from trajectory_assets.io.trajectory_table import StoredTrajectories
from trajectory_assets.project import DatasetSpec, Project, SourceSpec

KEY = "batch"


def ingested(store: Storage, source, signatures: NearSignatures | None, key: str = KEY) -> None:
    write_source_record(key, store, SourceFile(str(source), source.name))
    ingest_batch(key, store, PipelineConfig(), signatures=signatures)


def stored_and_signed(store: Storage, key: str = KEY) -> tuple[dict, dict]:
    """The batch's stored signatures and those of its stored messages, by trajectory_id, as hash values."""
    (stored,) = [table for _, table in StoredTrajectories(store, [key]).near_signature_files()]
    assert is_current(stored.schema)
    messages = pd.concat(StoredTrajectories(store, [key]).scan(["trajectory_id", "messages"]))
    kept = {trajectory_id: minhash.hashvalues.tolist()
            for trajectory_id, minhash in zip(stored["trajectory_id"].to_pylist(), stored_signatures(stored))}
    signed = {trajectory_id: signature(text).hashvalues.tolist()
              for trajectory_id, text in zip(messages["trajectory_id"], messages["messages"])}
    return kept, signed


def test_the_signatures_stored_are_those_of_the_stored_conversations_on_the_corpus(tmp_path):
    """Every trajectory of real files (NeMo Gym tool calls, reasoning, Hermes ShareGPT), one
    signature each, equal to ``signature`` of the messages the batch stores, of the same type
    (so a stored one and a signed one compare as two signed ones do)."""
    corpus = shared_data("corpus")
    files = [*sorted((corpus / "hermes").glob("*.jsonl")), *sorted((corpus / "nemo_gym").glob("*.jsonl"))[:12]]
    store = Storage(str(tmp_path / "out"))
    trajectories = 0
    for number, source in enumerate(files):
        key = f"b{number}"
        ingested(store, source, NearSignatures(), key)
        kept, signed = stored_and_signed(store, key)
        assert kept == signed, source.name
        trajectories += len(signed)
    assert trajectories > 50
    (stored,) = [table for _, table in StoredTrajectories(store, ["b0"]).near_signature_files()]
    one, fresh = stored_signatures(stored)[0], signature("[]")
    assert (one.hashvalues.dtype, one.seed, one.scheme) == (fresh.hashvalues.dtype, fresh.seed, fresh.scheme)


def test_a_signature_is_datasketchs_minhash_of_every_shingle_in_order_on_the_corpus(tmp_path):
    """``signature`` hashes each distinct shingle once with permutations drawn once per process:
    the same hash values as a MinHash made for each conversation and fed every shingle, repeats
    included, as datasketch's documentation does it."""
    from datasketch import MinHash

    corpus = shared_data("corpus")
    store = Storage(str(tmp_path / "out"))
    keys = []
    for number, source in enumerate([*sorted((corpus / "hermes").glob("*.jsonl")),
                                     *sorted((corpus / "nemo_gym").glob("*.jsonl"))[:6]]):
        keys.append(f"b{number}")
        ingested(store, source, None, keys[-1])
    conversations = [text for chunk in StoredTrajectories(store, keys).scan(["messages"]) for text in chunk["messages"]]
    repeated = 0
    for text in [*conversations, "[]", '[{"role": "user", "content": "a a a a a a a a a a a a"}]']:
        shingles = near_signatures._shingles(near_signatures.conversation_text(text))
        repeated += len(shingles) > len(set(shingles))
        reference = MinHash(num_perm=near_signatures.MINHASH_PERMUTATIONS, seed=near_signatures.MINHASH_SEED)
        reference.update_batch(shingles)
        assert signature(text).hashvalues.tolist() == reference.hashvalues.tolist()
    assert repeated > 1 and len(conversations) > 20


def test_the_compiled_shingle_hashes_are_datasketchs_sha1_hash32_of_each_shingle():
    """Texts of every length around SHA-1's block edges (55, 56, 64 bytes), words beyond ASCII
    and Unicode whitespace (``str.split`` splits on it), fewer words than a shingle, none."""
    import random

    from datasketch.hashfunc import sha1_hash32

    from trajectory_assets.ingest.shingle_kernel import shingle_hashes

    words = ["a", "Über", "café", "☃", "x" * 70, "y" * 55, "z" * 56, "日本語", "ǅ", "İstanbul", "Straße", "🙂emoji",
             "word\u2003other", "tab\there", "\u00a0", ""]
    generator = random.Random(1)
    texts = ["q" * length for length in range(200)]
    texts += [" ".join(generator.choice(words) for _ in range(count)) + generator.choice(["", "\n", "  \n x"])
              for count in (0, 1, 4, 5, 6, 7, 50, 300) for _ in range(20)]
    for text in texts:
        expected = [sha1_hash32(shingle) for shingle in near_signatures._shingles(text)]
        assert shingle_hashes(text, near_signatures.SHINGLE_WORDS).tolist() == expected, text


def test_a_batch_ingested_again_keeps_no_signatures_of_its_earlier_contents(tmp_path):
    store = Storage(str(tmp_path / "out"))
    source = write_jsonl(tmp_path / "in" / "rollouts.jsonl", [make_rollout(request_input=f"q{n}") for n in range(3)])
    ingested(store, source, NearSignatures())
    assert len(stored_and_signed(store)[0]) == 3
    write_jsonl(source, [make_rollout(request_input=f"other {n}") for n in range(2)])
    ingested(store, source, None)  # no dataset uses dedup: near any more
    assert not store.exists(layout.batch_near_signatures(KEY))
    assert [table for _, table in StoredTrajectories(store, [KEY]).near_signature_files()] == [None]
    ingested(store, source, NearSignatures())
    kept, signed = stored_and_signed(store)
    assert kept == signed and len(kept) == 2


def test_a_side_file_of_other_rules_is_not_current(tmp_path, monkeypatch):
    store = Storage(str(tmp_path / "out"))
    ingested(store, write_jsonl(tmp_path / "in" / "rollouts.jsonl", [make_rollout()]), NearSignatures())
    (stored,) = [table for _, table in StoredTrajectories(store, [KEY]).near_signature_files()]
    monkeypatch.setattr(near_signatures, "SHINGLE_WORDS", 4)
    near_signatures.signature_rule.cache_clear()
    try:
        assert not is_current(stored.schema)
    finally:
        near_signatures.signature_rule.cache_clear()


@pytest.mark.parametrize("family", ["sft", "dpo", "grpo"])
def test_ingest_signs_only_when_a_dataset_reading_the_source_uses_dedup_near(tmp_path, family):
    near = PipelineConfig(**{family: {"sft": SftConfig, "dpo": DpoConfig, "grpo": GrpoConfig}[family](dedup="near")})
    assert near.near_dedup and not PipelineConfig().near_dedup
    # the environment's (and a CLI call's) source: its own config
    assert PipelineSettings().ingest_near_signatures(near)
    assert not PipelineSettings().ingest_near_signatures(PipelineConfig())
    # a declared source: any dataset reading it, whatever the source's own config says
    source = SourceSpec("swe", ("rollouts",), str(tmp_path / "swe"), declared_in="catalog")
    plain = DatasetSpec("plain", (source,), str(tmp_path / "plain"), declared_in="catalog")
    other = SourceSpec("other", ("elsewhere",), str(tmp_path / "other"), declared_in="catalog")
    deduped = DatasetSpec("deduped", (other,), str(tmp_path / "deduped"), config=near, declared_in="catalog")
    project = Project((source, other), (plain, deduped))
    assert not _settings(source, project).ingest_near_signatures(near)
    assert _settings(other, project).ingest_near_signatures(PipelineConfig())
    also = DatasetSpec("also", (source,), str(tmp_path / "also"), config=near, declared_in="catalog")
    assert _settings(source, Project((source,), (plain, also))).ingest_near_signatures(PipelineConfig())


def test_a_batch_ingested_without_dedup_near_signs_nothing(tmp_path, monkeypatch):
    def refuse(messages_json):
        raise AssertionError("signed without dedup: near")

    monkeypatch.setattr(near_signatures, "signature", refuse)
    store = Storage(str(tmp_path / "out"))
    ingested(store, write_jsonl(tmp_path / "in" / "rollouts.jsonl", [make_rollout()]), None)
    assert not store.exists(layout.batch_near_signatures(KEY))
