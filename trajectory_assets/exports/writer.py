"""An export family written: every selected export's split files fed chunk by chunk through
its contract and checks, then committed with its index files, card and manifest, or
discarded whole when a check failed.

Files are staged under temporary names and committed only when every chunk passed, so a
failing check leaves the previous export untouched. Checks that span chunks (uniqueness in
the contract, split leaks, the DPO margin, the token budget) are tracked over flat keys
only. No Dagster here: ``defs/exports.py`` turns the outcomes into materializations and
check results.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pandas as pd

from schemas.validation import ChunkedContract, ContractResult
from trajectory_assets import layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.card import render_card, training_of
from trajectory_assets.ingest.decontamination import BenchmarkIndex, manifest_block
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.families.frames import SPLITS, ExportFrame, TrajectoryTable
from trajectory_assets.exports.manifest import build_manifest, describe
from trajectory_assets.exports.families import FAMILIES
from trajectory_assets.exports.token_budget import OVER_BUDGET, TokenBudget
from trajectory_assets.io.arrow_rows import hf_features, schema_violations
from trajectory_assets.io.export_files import StagedExport
from trajectory_assets.io.storage import Storage
from trajectory_assets.memory import chunk_memory, release_memory

# the fields the report scans every row for, indexed beside each JSON-lines split
SCAN_FIELDS = ("trajectory_id", "chosen_id", "rejected_id", "trajectory_ids", "extra_info", "task_key",
               "quality_difference")
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


class ExportWriter:
    """One export's split files, fed chunk by chunk through the contract."""

    def __init__(self, store: Storage, export: Export, config: PipelineConfig,
                 benchmarks: BenchmarkIndex | None = None) -> None:
        self.store, self.export, self.config = store, export, config
        self.benchmarks = benchmarks
        # each chunk's prompt keys per split, as the rows' own (Arrow-backed) column: compared once
        # every row is written (a set of every key would hold a Python object per row meanwhile)
        self.prompts_by_split: dict[str, list[pd.Series]] = {split: [] for split in SPLITS}
        self.below_margin = 0
        self.over_budget = 0  # rows written longer than the family's max_tokens (the token_budget check)
        self.truncated = 0
        self.max_tokens = getattr(config, export.family).max_tokens if config.tokenizer else None
        self.excluded: Counter = Counter()
        self.contract = ChunkedContract(export.contract, block_rows=CONTRACT_BLOCK_ROWS)
        self.first_line: str | None = None
        # JSON-lines rows whose values do not have the Arrow types the dataset card declares
        self.off_schema = 0
        self.off_schema_examples: list[str] = []
        self.input_keys: set[str] = set()  # every top-level field written (the schema's, GRPO's verifier inputs)
        # line_chars: each JSON line's length (a Parquet export has no lines)
        lengths = ("line_chars",) if export.file_format == "jsonl" else ()
        self.measured: dict[str, list[np.ndarray]] = {name: [] for name in (*export.measures, "tokens", *lengths)}
        self.files = StagedExport(store, export.name, SPLITS, export.file_format, export.arrow_schema,
                                  index_fields=SCAN_FIELDS)

    def add(self, frame: ExportFrame) -> None:
        self.excluded.update(frame.excluded)
        self.truncated += frame.truncated
        rows = frame.rows
        self.contract.check(rows)
        if self.export.checks_margin and len(rows):
            margin = pd.to_numeric(rows["quality_difference"], errors="coerce")
            self.below_margin += int((margin < self.config.dpo.min_margin).sum())
        if self.max_tokens is not None:
            self.over_budget += int((frame.tokens > self.max_tokens).sum())
        self.measured["tokens"].append(frame.tokens)
        for name in self.export.measures:
            # coerced: a value of the wrong type fails the contract, it must not stop the step
            self.measured[name].append(pd.to_numeric(rows[name], errors="coerce").to_numpy(dtype=float, na_value=np.nan))
        for fields in rows["fields"].unique():  # beyond the schema's: the verifier's inputs of GRPO rows
            self.input_keys.update(fields.split(","))
        if self.export.file_format == "jsonl":  # a Parquet file is written with the schema itself
            bad, problems = schema_violations(frame.records, self.export.arrow_schema)
            self.off_schema += bad
            self.off_schema_examples += problems[: 5 - len(self.off_schema_examples)]
        for split in SPLITS:
            in_split = (rows["split"] == split).to_numpy(dtype=bool)
            records = [frame.records[i] for i in np.flatnonzero(in_split)]
            self.prompts_by_split[split].append(rows.loc[in_split, "prompt_key"])
            if not records:
                continue
            line_chars = self.files.write(split, records)
            if line_chars is not None:
                self.measured["line_chars"].append(np.array(line_chars, dtype=float))
            self.first_line = self.first_line or orjson.dumps(records[0]).decode()

    def discard(self) -> None:
        self.files.discard()

    def finish(self, batches: list[str], sources: list[dict], code_version: str,
               dataset: dict | None = None) -> Written | Broken:
        """Checks; then commits the files and writes the index files, card and (last) the
        manifest, or discards everything when a check failed."""
        contract = self.contract.result()
        leaked = _shared_values(self.prompts_by_split["train"], self.prompts_by_split["validation"])
        checks = [
            CheckOutcome("contract", contract.passed, contract=contract),
            CheckOutcome("no_split_leak", not leaked, {"leaked_prompts": leaked}),
        ]
        if self.export.file_format == "jsonl":
            checks.append(CheckOutcome("arrow_schema", self.off_schema == 0,
                                       {"rows_off_schema": self.off_schema,
                                        "examples": "; ".join(self.off_schema_examples) or "none"}))
        if self.export.checks_margin:
            checks.append(CheckOutcome("dpo_margin", self.below_margin == 0,
                                       {"min_margin": self.config.dpo.min_margin, "below_margin": self.below_margin}))
        checks.append(CheckOutcome("token_budget", self.over_budget == 0,
                                   {"tokenizer": self.config.tokenizer or "(none: not measured)",
                                    "max_tokens": self.max_tokens or 0, "over_budget": self.over_budget}))
        if not all(check.passed for check in checks):
            self.discard()
            return Broken(self.export, checks, contract.summary(5) + self.off_schema_examples)
        export, store = self.export, self.store
        # the manifest is about to describe new files: never leave the old one beside them
        store.remove(layout.export_manifest(export.name))
        files = self.files.commit()
        manifest = build_manifest(
            export=export.name,
            code_version=code_version,
            file_format=export.file_format,
            config_section=export.family,
            batches=batches,
            config=self.config.model_dump(),
            sources=sources,
            rows=self.files.rows,
            excluded=dict(self.excluded),
            distributions={name: describe(np.concatenate(parts) if parts else np.empty(0))
                           for name, parts in self.measured.items()},
            files=files,
            # verifier inputs (any JSON value, keys by environment) are declared as the rows hold them
            features=hf_features(export.arrow_schema) + [
                {"name": key, "dtype": "json"} for key in sorted(self.input_keys - set(export.arrow_schema.names))],
            token_budget=self._token_budget_summary(),
            decontamination=(manifest_block(self.benchmarks, self.excluded) if self.benchmarks is not None
                             else None),
            dataset=dataset,
        )
        write_beside_files(store, export, manifest)
        return Written(export, manifest, checks, self.first_line)

    def _token_budget_summary(self) -> dict[str, Any]:
        section = getattr(self.config, self.export.family)
        return {
            "tokenizer": self.config.tokenizer,
            "max_tokens": section.max_tokens if self.config.tokenizer else None,
            "over_token_budget": section.over_token_budget,
            "left_out": self.excluded.get(OVER_BUDGET, 0),
            "truncated": self.truncated,
        }


def write_beside_files(store: Storage, export: Export, manifest: dict[str, Any]) -> None:
    """What an export's folder holds beside its committed files: the trainer's index files, the
    card, then (last: a manifest beside the files means the set is complete) the manifest."""
    for name, content in (export.index_files(export.name) if export.index_files else {}).items():
        store.write_bytes(layout.export_extra(export.name, name), content)
    card = render_card(manifest, export.description, training_of(export, manifest))
    store.write_bytes(layout.export_card(export.name), card.encode())
    store.write_bytes(layout.export_manifest(export.name), orjson.dumps(manifest, option=orjson.OPT_INDENT_2))


def write_family(store: Storage, family: str, exports: list[Export], table: TrajectoryTable, config: PipelineConfig,
                 budget: TokenBudget | None, batches: list[str], sources: list[dict],
                 code_versions: dict[str, str], benchmarks: BenchmarkIndex | None = None,
                 dataset: dict | None = None) -> Iterator[Written | Broken]:
    """Every export of ``exports`` (of one family) written from ``table``, one outcome each;
    ``code_versions`` (by export name) go into the manifests; ``benchmarks`` (the
    decontamination index, ``decontamination.build_index``) leaves out what matches an
    evaluation set; ``dataset`` (``manifest.dataset_identity``) names a declared dataset in the
    manifests. An error while writing discards every staged file of the family."""
    writers = {export.name: ExportWriter(store, export, config, benchmarks) for export in exports}
    try:
        with chunk_memory() as release:
            for frames in FAMILIES[family](table, getattr(config, family), config.split,
                                           {export.name: export for export in exports}, budget, benchmarks):
                while frames:  # popped, so each export's rows are freed as soon as they are written
                    name, frame = frames.popitem()
                    writers[name].add(frame)
                    del frame
                release()
    except BaseException:
        for writer in writers.values():
            writer.discard()
        raise
    for export in exports:
        yield writers[export.name].finish(batches, sources, code_versions[export.name], dataset)
    release_memory()  # the payloads are gone: give their memory back before the next step


def _shared_values(first: list[pd.Series], second: list[pd.Series]) -> int:
    """How many distinct values both lists of columns hold."""
    if not first or not second:
        return 0
    return int(pd.Series(pd.concat(first).unique()).isin(pd.concat(second).unique()).sum())
