"""An export written: each shard's part of its rows fed chunk by chunk through its contract
and checks and written to staged shard files (:class:`PartWriter`), then every part checked
together and committed with its index files, card and manifest, or discarded whole when a
check failed (:func:`finish_export`).

Files are staged and committed only when every shard passed, so a failing check leaves the
previous export untouched. Checks that span chunks and shards (uniqueness in the contract,
split leaks, the DPO margin, the token budget) are tallied over flat keys only
(:class:`ExportTally`), which a part hands to the merge as it is. No Dagster here:
``defs/exports.py`` turns the outcomes into materializations and check results.
"""

from __future__ import annotations

import pickle
import posixpath
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd

from schemas.validation import ChunkedContract, ContractResult
from trajectory_assets import layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.card import render_card, training_of
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.export_scan import ExportScan, write_summary
from trajectory_assets.exports.families.frames import SPLITS, ExportFrame
from trajectory_assets.exports.manifest import build_manifest, describe
from trajectory_assets.exports.token_budget import OVER_BUDGET
from trajectory_assets.io.arrow_rows import hf_features, schema_violations, table_from_records
from trajectory_assets.io.export_files import (
    ShardWriter,
    WrittenShard,
    commit_shards,
    discard_shards,
    remove_staged,
    restage_committed_shard,
)
from trajectory_assets.io.storage import Storage

# export rows checked per pandera call: the flat columns only (a few MB), and the files are
# staged until every check passed, so they need not be checked chunk by chunk as they are written
CONTRACT_BLOCK_ROWS = 20_000


@dataclass
class CheckOutcome:
    """One check of an export: the contract's (with its result), ``no_split_leak``,
    ``arrow_schema`` (JSON lines), ``dpo_margin``, ``token_budget``."""

    name: str
    passed: bool
    metadata: dict[str, Any] = field(default_factory=dict)
    contract: ContractResult | None = None


@dataclass
class Written:
    """A committed export."""

    export: Export
    manifest: dict[str, Any]
    checks: list[CheckOutcome]
    first_line: str | None


@dataclass
class Broken:
    """An export that failed a check: nothing of it was written."""

    export: Export
    checks: list[CheckOutcome]
    summary: list[str]  # the contract's first failures

    @property
    def failed(self) -> list[str]:
        return [check.name for check in self.checks if not check.passed]


def check_names(export: Export) -> list[str]:
    """The checks every build of ``export`` reports."""
    return ["contract", "no_split_leak", *(["arrow_schema"] if export.file_format == "jsonl" else []),
            *(["dpo_margin"] if export.checks_margin else []), "token_budget"]


@dataclass
class ExportTally:
    """What an export's checks and manifest need of its rows, tallied chunk by chunk over flat
    columns: one per shard's part, absorbed in shard order by the merge (pickled between them:
    it holds no export, no file, no payload)."""

    contract: ChunkedContract
    max_tokens: int | None  # the family's, with a tokenizer (the token_budget check)
    measures: tuple[str, ...]  # the export's measures, then tokens (and line_chars for JSON lines)
    # each chunk's prompt keys per split, as the rows' own (Arrow-backed) column: compared once
    # every row is written (a set of every key would hold a Python object per row meanwhile)
    prompts_by_split: dict[str, list[pd.Series]] = field(default_factory=lambda: {split: [] for split in SPLITS})
    below_margin: int = 0
    over_budget: int = 0  # rows written longer than the family's max_tokens
    truncated: int = 0
    excluded: Counter = field(default_factory=Counter)
    first_line: str | None = None
    # JSON-lines rows whose values do not have the Arrow types the dataset card declares
    off_schema: int = 0
    off_schema_examples: list[str] = field(default_factory=list)
    input_keys: set[str] = field(default_factory=set)  # every top-level field written (GRPO's verifier inputs too)
    measured: dict[str, list[np.ndarray]] = field(init=False)

    def __post_init__(self) -> None:
        self.measured = {name: [] for name in self.measures}

    @classmethod
    def of(cls, export: Export, config: PipelineConfig) -> "ExportTally":
        lengths = ("line_chars",) if export.file_format == "jsonl" else ()  # a Parquet export has no lines
        return cls(ChunkedContract(export.contract, block_rows=CONTRACT_BLOCK_ROWS),
                   getattr(config, export.family).max_tokens if config.tokenizer else None,
                   (*export.measures, "tokens", *lengths))

    def add(self, frame: ExportFrame, export: Export, config: PipelineConfig) -> None:
        self.excluded.update(frame.excluded)
        self.truncated += frame.truncated
        rows = frame.rows
        self.contract.check(rows)
        if export.checks_margin and len(rows):
            margin = pd.to_numeric(rows["quality_difference"], errors="coerce")
            self.below_margin += int((margin < config.dpo.min_margin).sum())
        if self.max_tokens is not None:
            self.over_budget += int((frame.tokens > self.max_tokens).sum())
        self.measured["tokens"].append(frame.tokens)
        for name in export.measures:
            # coerced: a value of the wrong type fails the contract, it must not stop the step
            self.measured[name].append(pd.to_numeric(rows[name], errors="coerce").to_numpy(dtype=float, na_value=np.nan))
        for fields in rows["fields"].unique():  # beyond the schema's: the verifier's inputs of GRPO rows
            self.input_keys.update(fields.split(","))
        if export.file_format == "jsonl":  # a Parquet file is written with the schema itself
            bad, problems = schema_violations(frame.records, export.arrow_schema)
            self.off_schema += bad
            self.off_schema_examples += problems[: 5 - len(self.off_schema_examples)]

    def absorb(self, later: "ExportTally") -> None:
        """Takes in the tally of the rows that follow these (the next shard's part)."""
        self.contract.absorb(later.contract)
        for split, prompts in later.prompts_by_split.items():
            self.prompts_by_split[split] += prompts
        self.below_margin += later.below_margin
        self.over_budget += later.over_budget
        self.truncated += later.truncated
        self.excluded.update(later.excluded)
        self.first_line = self.first_line or later.first_line
        self.off_schema += later.off_schema
        self.off_schema_examples += later.off_schema_examples[: 5 - len(self.off_schema_examples)]
        self.input_keys |= later.input_keys
        for name, parts in later.measured.items():
            self.measured[name] += parts

    def checks(self, export: Export, config: PipelineConfig) -> list[CheckOutcome]:
        contract = self.contract.result()
        leaked = _shared_values(self.prompts_by_split["train"], self.prompts_by_split["validation"])
        checks = [
            CheckOutcome("contract", contract.passed, contract=contract),
            CheckOutcome("no_split_leak", not leaked, {"leaked_prompts": leaked}),
        ]
        if export.file_format == "jsonl":
            checks.append(CheckOutcome("arrow_schema", self.off_schema == 0,
                                       {"rows_off_schema": self.off_schema,
                                        "examples": "; ".join(self.off_schema_examples) or "none"}))
        if export.checks_margin:
            checks.append(CheckOutcome("dpo_margin", self.below_margin == 0,
                                       {"min_margin": config.dpo.min_margin, "below_margin": self.below_margin}))
        checks.append(CheckOutcome("token_budget", self.over_budget == 0,
                                   {"tokenizer": config.tokenizer or "(none: not measured)",
                                    "max_tokens": self.max_tokens or 0, "over_budget": self.over_budget}))
        return checks

    def token_budget_summary(self, export: Export, config: PipelineConfig) -> dict[str, Any]:
        section = getattr(config, export.family)
        return {
            "tokenizer": config.tokenizer,
            "max_tokens": section.max_tokens if config.tokenizer else None,
            "over_token_budget": section.over_token_budget,
            "left_out": self.excluded.get(OVER_BUDGET, 0),
            "truncated": self.truncated,
        }


@dataclass
class ExportPart:
    """One shard's part of an export: its staged files, the tally of its rows for the checks
    and their scan for the report."""

    tally: ExportTally
    written: list[WrittenShard]
    scan: ExportScan  # what the report needs of its rows (exports/export_scan.py)
    # the shard's input (``shard_phase.shard_fingerprints``): a later build whose shard has the
    # same one reuses this part and the committed files instead of rendering (None: not reusable)
    fingerprint: str | None = None

    @property
    def rows(self) -> int:
        return sum(shard.rows for shard in self.written)


class PartWriter:
    """Shard ``shard`` of an export, fed chunk by chunk: its rows tallied for the checks and
    written to the run's staged shard files (``io/export_files.ShardWriter``)."""

    def __init__(self, store: Storage, export: Export, config: PipelineConfig, run: str, shard: int) -> None:
        self.export, self.config = export, config
        self.tally = ExportTally.of(export, config)
        self.scan = ExportScan(export.name, export.family, config.report.samples_per_export, config.report.seed,
                               shard=shard)
        self.files = ShardWriter(store, export.name, SPLITS, export.file_format, export.arrow_schema,
                                 shard=shard, run=run)

    def add(self, frame: ExportFrame) -> None:
        self.tally.add(frame, self.export, self.config)
        rows = frame.rows
        # compared as a NumPy array: pandas' comparison and .loc cost about 1.5 ms per chunk and split
        splits, prompt_keys = rows["split"].to_numpy(dtype=object), rows["prompt_key"]
        for split in SPLITS:
            in_split = splits == split
            records = [frame.records[i] for i in np.flatnonzero(in_split)]
            self.tally.prompts_by_split[split].append(prompt_keys[in_split])
            if not records:
                continue
            self.scan.add_rows(split, self.scan.rows[split], records)  # positions in this part's split: the merge shifts them
            line_chars = self.files.write(split, records)
            if line_chars is not None:
                self.tally.measured["line_chars"].append(np.array(line_chars, dtype=float))
            self.tally.first_line = self.tally.first_line or orjson.dumps(records[0]).decode()

    def close(self) -> ExportPart:
        """The part as written: its files closed in the staging folder, its tally and its scan
        (the rows it picked for the viewer as the files hold them)."""
        self.scan.restore_rows(lambda picked: _as_written([row for _, _, row in picked], self.export))
        return ExportPart(self.tally, self.files.finish(), self.scan)

    def discard(self) -> None:
        self.files.discard()


# The shape of a stored part: ExportPart and all it holds (ExportTally, WrittenShard, ExportScan), pickled.
# Raise it with any change to them. It heads the file and is read before anything is unpickled,
# so a part kept by other code is rendered again, never loaded into classes that changed.
PART_FORMAT = 3  # 2: a part holds its rows' scan for the report; 3: no row index in WrittenShard
_PART_HEADER = b"trajectory-assets export part %d\n" % PART_FORMAT


class StalePart(Exception):
    """A stored part of another format than :data:`PART_FORMAT`, or none."""


# What loading a part kept by other code raises: another format (StalePart); a class or module
# gone or moved (AttributeError, ImportError); a class whose arguments changed (TypeError); a
# file cut short or not a pickle (EOFError, UnpicklingError).
_STALE_PART_ERRORS = (StalePart, AttributeError, ImportError, TypeError, EOFError, pickle.UnpicklingError)


def dump_part(part: ExportPart) -> bytes:
    """A part as a shard step stores it for the merge (and a merge keeps it for the next
    build): the :data:`PART_FORMAT` header, then its pickle."""
    return _PART_HEADER + pickle.dumps(part, pickle.HIGHEST_PROTOCOL)


def load_part(data: bytes) -> ExportPart:
    """A part :func:`dump_part` stored; :class:`StalePart` for a file of another format."""
    if not data.startswith(_PART_HEADER):
        raise StalePart(f"not an export part of format {PART_FORMAT}: {bytes(data[:40])!r}")
    part = pickle.loads(memoryview(data)[len(_PART_HEADER):])
    if not isinstance(part, ExportPart):
        raise StalePart(f"not an export part: {type(part).__name__}")
    return part


def reused_part(store: Storage, export: Export, run: str, shard: int, fingerprint: str) -> ExportPart | None:
    """Shard ``shard`` of ``export`` for the build ``run`` taken from the committed build
    when that build's shard had the same ``fingerprint``: its kept part (``layout.export_part``)
    and copies of its committed files, staged as a render would have staged them. None when
    anything is missing or differs (no manifest, no kept part, one kept by code of another
    :data:`PART_FORMAT` or that no longer loads, another fingerprint, a file the manifest no
    longer lists with the part's SHA-256): the shard is then rendered. The
    fingerprint is kept in the part, not in the manifest: it names batch files by their
    storage checksums, which differ between two storages holding the same bytes, and a
    manifest is the same wherever the same dataset is built."""
    kept_path, manifest_path = layout.export_part(export.name, shard), layout.export_manifest(export.name)
    if not (store.exists(kept_path) and store.exists(manifest_path)):
        return None
    data = store.read_bytes(kept_path)  # outside the try: a storage that fails is an error, not a stale part
    try:
        kept = load_part(data)
    except _STALE_PART_ERRORS:
        return None
    if kept.fingerprint != fingerprint:
        return None
    written = restage_committed_shard(store, export.name, SPLITS, export.file_format, export.arrow_schema,
                                      shard, run, kept.written, store.read_json(manifest_path)["files"])
    return None if written is None else ExportPart(kept.tally, written, kept.scan, fingerprint)


def discard_parts(store: Storage, parts: list[ExportPart]) -> None:
    """These parts' staged files (other shards of the build share their staging folder)."""
    for part in parts:
        remove_staged(store, part.written)


def keep_parts(store: Storage, name: str, staged: list[str]) -> None:
    """A committed build's parts (``staged``: each shard's, in shard order) kept beside the
    export for the next build to reuse (:func:`reused_part`), and no other."""
    for shard, path in enumerate(staged):
        store.copy(path, layout.export_part(name, shard))
    kept = {posixpath.basename(layout.export_part(name, shard)) for shard in range(len(staged))}
    for file_name in store.file_names(layout.export_parts(name)):
        if file_name not in kept:
            store.remove(f"{layout.export_parts(name)}/{file_name}")


def finish_export(store: Storage, export: Export, config: PipelineConfig, parts: list[ExportPart],
                  excluded: Counter, batches: list[str], sources: list[dict], code_version: str,
                  decontamination: dict | None = None, dataset: dict | None = None) -> Written | Broken:
    """Every shard's part of ``export`` (in shard order) checked together, with the plan's
    ``excluded`` counted once; then the files committed under Hub names with the index files,
    the card and (last) the manifest; or every staged file discarded when a check failed.
    ``decontamination``: the manifest's block (``decontamination.manifest_block``), None
    without benchmarks; ``dataset``: a declared dataset's identity."""
    tally, scan = parts[0].tally, parts[0].scan
    for later in parts[1:]:
        tally.absorb(later.tally)
        scan.absorb(later.scan)
    tally.excluded.update(excluded)
    checks = tally.checks(export, config)
    written = [shard for part in parts for shard in part.written]
    if not all(check.passed for check in checks):
        discard_shards(store, written)
        return Broken(export, checks, tally.contract.result().summary(5) + tally.off_schema_examples)
    # the manifest is about to describe new files: never leave the old one beside them
    store.remove(layout.export_manifest(export.name))
    files = commit_shards(store, export.name, SPLITS, export.file_format, len(parts), written)
    manifest = build_manifest(
        export=export.name,
        code_version=code_version,
        file_format=export.file_format,
        config_section=export.family,
        batches=batches,
        config=config.model_dump(),
        sources=sources,
        rows={split: sum(shard.rows for shard in written if shard.split == split) for split in SPLITS},
        excluded=dict(tally.excluded),
        distributions={name: describe(np.concatenate(measured) if measured else np.empty(0))
                       for name, measured in tally.measured.items()},
        files=files,
        # verifier inputs (any JSON value, keys by environment) are declared as the rows hold them
        features=hf_features(export.arrow_schema) + [
            {"name": key, "dtype": "json"} for key in sorted(tally.input_keys - set(export.arrow_schema.names))],
        token_budget=tally.token_budget_summary(export, config),
        decontamination=decontamination,
        dataset=dataset,
    )
    write_summary(store, export.name, files, scan)
    write_beside_files(store, export, manifest)
    return Written(export, manifest, checks, tally.first_line)


def write_beside_files(store: Storage, export: Export, manifest: dict[str, Any]) -> None:
    """What an export's folder holds beside its committed files: the trainer's index files, the
    card, then (last: a manifest beside the files means the set is complete) the manifest."""
    for name, content in (export.index_files(export.name) if export.index_files else {}).items():
        store.write_bytes(layout.export_extra(export.name, name), content)
    card = render_card(manifest, export.description, training_of(export, manifest))
    store.write_bytes(layout.export_card(export.name), card.encode())
    # last: a manifest beside the files means the set is complete
    store.write_bytes(layout.export_manifest(export.name), orjson.dumps(manifest, option=orjson.OPT_INDENT_2))


def _as_written(rows: list[dict[str, Any]], export: Export) -> list[dict[str, Any]]:
    """Rows as reading the export's files gives them back (JSON, or Arrow's types)."""
    if export.file_format == "parquet":
        return table_from_records(rows, export.arrow_schema).to_pylist()
    return [orjson.loads(orjson.dumps(row)) for row in rows]


def _shared_values(first: list[pd.Series], second: list[pd.Series]) -> int:
    """How many distinct values both lists of columns hold."""
    if not first or not second:
        return 0
    return int(pd.Series(pd.concat(first).unique()).isin(pd.concat(second).unique()).sum())
