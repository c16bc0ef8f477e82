"""Ingest-time work (no Dagster here): a batch's lines become trajectory rows and quarantine
rows (``conversion.py``), its stored files are written and checked (``batch.py``), and what
ingest finds in the conversations it has decoded anyway is recorded beside the batch: tool
use (``tool_use.py``), with benchmarks configured, their matches (``decontamination.py``,
its compiled pass ``ngram_kernel.py``), and with ``dedup: near``, each conversation's MinHash
signature (``near_signatures.py``, its compiled hashing ``shingle_kernel.py``).

The room sits below ``exports/`` and ``report/``, which read what it stores (and call
decontamination to recompute stale flags), and never imports them, ``defs/`` or ``runs/``.
"""
