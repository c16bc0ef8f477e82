"""Conversations' MinHash signatures, what ``dedup: near`` compares (``exports/curation.py``
``near_duplicates``), and their record beside a batch.

With ``dedup: near`` in some family of a dataset reading a source, ingest signs each stored
trajectory of a batch (``NearSignatures``, handed to ``ingest_batch``) from the very JSON
string it writes into the row's ``messages`` column, and stores the signatures beside the
batch (``layout.batch_near_signatures``: trajectory_id and the 64 hash values as a fixed-size
list of uint32, the MinHash's own type, so the record is exact and 256 bytes a trajectory).
An export plan then reads that small file instead of every kept conversation
(``families/frames.py``'s ``near_signatures``, over ``StoredTrajectories.near_signature_files``).
The file carries the version of the rules that made it (``signature_rule``); a batch without
a current one is signed from its messages, as before, so the exclusions are the same either way.

No Dagster here. ``datasketch`` and the compiled hashing of shingles (``shingle_kernel.py``,
numba) are imported where used (only with ``dedup: near``).
"""

from __future__ import annotations

import hashlib
import inspect
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson
import pyarrow as pa

from trajectory_assets import layout
from trajectory_assets.io.storage import Storage

if TYPE_CHECKING:
    from datasketch import LeanMinHash

SHINGLE_WORDS = 5  # word 5-grams: long enough that shared boilerplate alone does not make two runs similar
MINHASH_PERMUTATIONS = 64
MINHASH_SEED = 1
RULE_KEY = b"near_signature_rule"  # the side file's schema metadata: the rules that made it


def conversation_text(messages_json: str) -> str:
    """What near-duplicate detection compares: every message's text and tool calls."""
    parts = []
    for message in orjson.loads(messages_json):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict)]
        for call in message.get("tool_calls") or []:
            parts.append(f"{call['function']['name']} {call['function']['arguments']}")
    return "\n".join(parts)


def _shingles(text: str) -> list[bytes]:
    """The shingles of a text, what its signature hashes (``shingle_kernel.shingle_hashes``
    hashes the same, without making them)."""
    words = text.lower().split()
    if len(words) <= SHINGLE_WORDS:
        return [" ".join(words).encode()]
    return [" ".join(words[i:i + SHINGLE_WORDS]).encode() for i in range(len(words) - SHINGLE_WORDS + 1)]


def signature(messages_json: str) -> LeanMinHash:
    """A conversation's MinHash, what near-duplicate detection compares (the lean form: its
    hash values only, a third of a MinHash's memory, since the plan keeps one per trajectory)."""
    from datasketch import LeanMinHash, MinHash  # only needed with dedup: near

    from trajectory_assets.ingest.shingle_kernel import shingle_hashes

    # the shingles' hashes (datasketch's default sha1_hash32 of each of ``_shingles``) computed
    # in one compiled pass, so the MinHash is handed numbers (hashfunc=int: each as it is)
    minhash = MinHash(num_perm=MINHASH_PERMUTATIONS, seed=MINHASH_SEED, permutations=_permutations(),
                      scheme=_scheme(), hashfunc=int)
    minhash.update_batch(shingle_hashes(conversation_text(messages_json), SHINGLE_WORDS).tolist())
    return LeanMinHash(minhash)


@cache
def _permutations() -> tuple[np.ndarray, np.ndarray]:
    """The seed's permutations, drawn once per process (a MinHash draws them again each time it is made)."""
    from datasketch import MinHash

    return MinHash(num_perm=MINHASH_PERMUTATIONS, seed=MINHASH_SEED).permutations


@cache
def signature_rule() -> str:
    """The version of the signatures: the code that computes them, their constants, the
    datasketch version and permutation scheme. A side file of another rule is not read (its
    batch is signed from its messages), so a change here never gives a wrong exclusion."""
    import datasketch

    code = "".join(inspect.getsource(function) for function in (conversation_text, _shingles, signature, _permutations))
    code += Path(__file__).with_name("shingle_kernel.py").read_text()
    version = f"{code}|{SHINGLE_WORDS}|{MINHASH_PERMUTATIONS}|{MINHASH_SEED}|{datasketch.__version__}|{_scheme()}"
    return hashlib.sha256(version.encode()).hexdigest()


def signatures_schema() -> pa.Schema:
    return pa.schema([("trajectory_id", pa.string()),
                      ("minhash", pa.list_(pa.uint32(), MINHASH_PERMUTATIONS))],
                     metadata={RULE_KEY: signature_rule().encode()})


class NearSignatures:
    """The signatures of one batch being ingested: ``add`` each table of rows as it is
    written (so exactly the stored rows, each signed from its stored ``messages`` string),
    then ``result``, the table stored beside the batch."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.values: list[np.ndarray] = []

    def add(self, rows: pa.Table) -> None:
        self.ids += rows["trajectory_id"].to_pylist()
        self.values += [signature(messages).hashvalues for messages in rows["messages"].to_pylist()]

    def result(self) -> pa.Table:
        values = np.concatenate(self.values) if self.values else np.empty(0, np.uint32)
        if values.dtype != np.uint32:  # another permutation scheme: stored as uint32, its values would be cut
            raise TypeError(f"MinHash values of type {values.dtype} cannot be stored as uint32")
        schema = signatures_schema()
        minhash = pa.FixedSizeListArray.from_arrays(pa.array(values, pa.uint32()), MINHASH_PERMUTATIONS)
        return pa.Table.from_arrays([pa.array(self.ids, pa.string()), minhash], schema=schema)

    def save(self, store: Storage, key: str) -> None:
        """Stores the batch's signatures beside it (``layout.batch_near_signatures``)."""
        signed = self.result()
        with store.parquet_writer(layout.batch_near_signatures(key), signed.schema) as writer:
            writer.write_table(signed)


def is_current(schema: pa.Schema) -> bool:
    """Whether a side file was made by today's rules."""
    return (schema.metadata or {}).get(RULE_KEY) == signature_rule().encode()


def stored_signatures(table: pa.Table) -> list[LeanMinHash]:
    """The signatures of a side file's rows (``table``: its ``minhash`` column), as ``signature`` gives them."""
    from datasketch import LeanMinHash

    column = table["minhash"].combine_chunks()
    values = column.flatten().to_numpy(zero_copy_only=False).reshape(-1, MINHASH_PERMUTATIONS)
    scheme = _scheme()
    return [LeanMinHash(seed=MINHASH_SEED, hashvalues=row, scheme=scheme) for row in values]


@cache
def _scheme() -> str:
    """The permutation scheme ``signature``'s MinHash uses (datasketch's default)."""
    from datasketch import MinHash

    return MinHash(num_perm=MINHASH_PERMUTATIONS, seed=MINHASH_SEED).scheme
