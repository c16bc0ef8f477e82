"""Every export as an asset: the seed formats (SFT, Hermes SFT, DPO, GRPO) and the trainer
flavors (TRL, NeMo RL, LLaMA-Factory, verl).

The exports of one family (SFT, DPO, GRPO) are one multi-asset step: the family plans and
reads its payloads once and renders every selected export from them (reading payloads is
most of an export's cost). Each export is still its own asset with its own contract, checks,
manifest and card, and is committed or discarded on its own: one that fails a check writes
nothing, while the others of its family are written. Each line is checked by its contract
before it is written. With a ``tokenizer`` configured, every row is measured with its chat
template and the family's token budget enforced (``exports/token_budget.py``).
"""


from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import dagster as dg
import numpy as np
import orjson
import pandas as pd

from schemas.validation import ChunkedContract
from trajectory_assets import code_version, layout
from trajectory_assets.config import PipelineConfig
from trajectory_assets.exports.card import render_card
from trajectory_assets.exports.families import SPLITS, ExportFrame
from trajectory_assets.exports.manifest import build_manifest, describe
from trajectory_assets.exports.registry import EXPORT_FAMILIES, ExportSpec, family_specs, iter_family
from trajectory_assets.exports.token_budget import OVER_BUDGET, TokenBudget, TokenizerError, load_counter
from trajectory_assets.report.viewer import SCAN_FIELDS
from trajectory_assets.defs.batches import read_summary, registered_batches, stored_trajectories
from trajectory_assets.defs.contracts import contract_check_result, written_column_schema
from trajectory_assets.defs.conditions import REBUILD_ON_CHANGED_DATA
from trajectory_assets.defs.resources import PipelineSettings, TrajectoryStorage
from trajectory_assets.defs.retries import STORAGE_POOL, STORAGE_RETRY, stop_if_canceling, storage_faults_only
from trajectory_assets.io.arrow_rows import hf_features
from trajectory_assets.io.export_files import StagedExport
from trajectory_assets.io.storage import Storage
from trajectory_assets.memory import chunk_memory, release_memory


@dataclass
class _Written:
    rows: dict[str, int]
    files: dict[str, dict]  # file name -> sha256, bytes, rows
    excluded: Counter
    distributions: dict[str, dict]
    checks: list[dg.AssetCheckResult]
    first_line: str | None
    truncated: int  # rows cut to the token budget
    input_keys: set[str]  # top-level fields beyond the schema's, held as JSON values


class _BrokenExport(Exception):
    def __init__(self, checks: list[dg.AssetCheckResult], summary: list[str]) -> None:
        super().__init__(summary)
        self.checks = checks
        self.summary = summary


# export rows checked per pandera call: the flat columns only (a few MB), and the files are
# staged until every check passed, so they need not be checked chunk by chunk as they are written
CONTRACT_BLOCK_ROWS = 20_000


class _ExportWriter:
    """One export's split files, fed chunk by chunk through the contract.

    Files are written under temporary names and only committed by :meth:`finish` when every
    chunk passed, so a failing check leaves the previous export untouched. Checks that span
    chunks (uniqueness in the contract, split leaks, DPO margin) are tracked over flat keys only.
    """

    def __init__(self, store: Storage, kind: ExportSpec, config: PipelineConfig) -> None:
        self.store, self.kind, self.config = store, kind, config
        # each chunk's prompt keys per split, as the rows' own (Arrow-backed) column: compared once
        # every row is written (a set of every key would hold a Python object per row meanwhile)
        self.prompts_by_split: dict[str, list[pd.Series]] = {split: [] for split in SPLITS}
        self.below_margin = 0
        self.over_budget = 0  # rows written longer than the family's max_tokens (the token_budget check)
        self.truncated = 0
        self.max_tokens = getattr(config, kind.family).max_tokens if config.tokenizer else None
        self.excluded: Counter = Counter()
        self.contract = ChunkedContract(kind.contract, block_rows=CONTRACT_BLOCK_ROWS)
        self.first_line: str | None = None
        self.input_keys: set[str] = set()  # top-level fields beyond the schema's (GRPO's verifier inputs)
        # line_chars: each JSON line's length (a Parquet export has no lines)
        lengths = ("line_chars",) if kind.file_format == "jsonl" else ()
        self.measured: dict[str, list[np.ndarray]] = {name: [] for name in (*kind.measures, "tokens", *lengths)}
        self.files = StagedExport(store, kind.name, SPLITS, kind.file_format, kind.arrow_schema,
                                  index_fields=SCAN_FIELDS)  # what the report scans every row for

    def add(self, frame: ExportFrame) -> None:
        self.excluded.update(frame.excluded)
        self.truncated += frame.truncated
        rows = frame.rows
        self.contract.check(rows)
        if self.kind.checks_margin and len(rows):
            self.below_margin += int((rows["quality_difference"] < self.config.dpo.min_margin).sum())
        if self.max_tokens is not None:
            self.over_budget += int((frame.tokens > self.max_tokens).sum())
        self.measured["tokens"].append(frame.tokens)
        for name in self.kind.measures:
            self.measured[name].append(rows[name].to_numpy(dtype=float, na_value=np.nan))
        if "input_keys" in rows:
            self.input_keys.update(key for keys in rows["input_keys"].unique() for key in keys.split(",") if key)
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

    def finish(self) -> _Written:
        """Checks, then commits the files; raises :class:`_BrokenExport` (nothing written) if a check failed."""
        contract = self.contract.result()
        leaked = _shared_values(self.prompts_by_split["train"], self.prompts_by_split["validation"])
        asset = self.kind.asset_name
        checks = [
            contract_check_result(contract, asset=asset),
            dg.AssetCheckResult(asset_key=asset, check_name="no_split_leak", passed=not leaked,
                                metadata={"leaked_prompts": leaked}),
        ]
        if self.kind.checks_margin:
            checks.append(dg.AssetCheckResult(asset_key=asset, check_name="dpo_margin", passed=self.below_margin == 0,
                                              metadata={"min_margin": self.config.dpo.min_margin,
                                                        "below_margin": self.below_margin}))
        checks.append(dg.AssetCheckResult(asset_key=asset, check_name="token_budget", passed=self.over_budget == 0,
                                          metadata={"tokenizer": self.config.tokenizer or "(none: not measured)",
                                                    "max_tokens": self.max_tokens or 0,
                                                    "over_budget": self.over_budget}))
        if not all(check.passed for check in checks):
            self.discard()
            raise _BrokenExport(checks, contract.summary(5))
        # the manifest is about to describe new files: never leave the old one beside them
        self.store.remove(layout.export_manifest(self.kind.name))
        files = self.files.commit()
        distributions = {name: describe(np.concatenate(parts) if parts else np.empty(0))
                         for name, parts in self.measured.items()}
        return _Written(self.files.rows, files, self.excluded, distributions, checks, self.first_line,
                        self.truncated, self.input_keys)


def _shared_values(first: list[pd.Series], second: list[pd.Series]) -> int:
    """How many distinct values both lists of columns hold."""
    if not first or not second:
        return 0
    return int(pd.Series(pd.concat(first).unique()).isin(pd.concat(second).unique()).sum())


def _check_specs(kind: ExportSpec) -> list[dg.AssetCheckSpec]:
    specs = [
        dg.AssetCheckSpec("contract", asset=kind.asset_name, blocking=True,
                          description=f"every row satisfies {kind.contract.__name__}"),
        dg.AssetCheckSpec("no_split_leak", asset=kind.asset_name, blocking=True,
                          description="no prompt (prompt_key) appears in both train and validation"),
    ]
    if kind.checks_margin:
        specs.append(dg.AssetCheckSpec("dpo_margin", asset=kind.asset_name, blocking=True,
                                       description="every pair's quality_difference >= dpo.min_margin"))
    specs.append(dg.AssetCheckSpec("token_budget", asset=kind.asset_name, blocking=True,
                                   description=f"with a tokenizer, every row's chat-template length <= "
                                               f"{kind.family}.max_tokens"))
    return specs


# The longest family step starts first (measured at 1 GB: SFT 19 s, DPO 14 s, GRPO 12 s), so
# with two at a time the datasets run ends after SFT || (DPO then GRPO), not DPO then SFT.
FAMILY_PRIORITY = {"sft": 2, "dpo": 1, "grpo": 0}


def build_family_asset(family: str, kinds: list[ExportSpec] | None = None) -> dg.AssetsDefinition:
    """One step for the exports of a family (all of the registry's by default); any subset of
    them can be materialized."""
    kinds = family_specs(family) if kinds is None else kinds

    @dg.multi_asset(
        name=f"{family}_exports",
        op_tags={"dagster/priority": str(FAMILY_PRIORITY.get(family, 0))},
        specs=[
            dg.AssetSpec(
                kind.asset_name,
                deps=["validated_trajectories"],
                group_name=kind.group,
                code_version=code_version(),
                kinds={kind.file_format, "pandera"},
                description=kind.description,
                metadata={"dagster/column_schema": written_column_schema(kind.arrow_schema,
                                                                         kind.column_descriptions)},
                automation_condition=REBUILD_ON_CHANGED_DATA,
            )
            for kind in kinds
        ],
        check_specs=[spec for kind in kinds for spec in _check_specs(kind)],
        can_subset=True,
        retry_policy=STORAGE_RETRY,
        pool=STORAGE_POOL,
    )
    def _family(context: dg.AssetExecutionContext, storage: TrajectoryStorage, settings: PipelineSettings):
        selected = [kind for kind in kinds if dg.AssetKey(kind.asset_name) in context.selected_asset_keys]
        stop_if_canceling(context)
        with storage_faults_only():
            yield from _materialize_family(family, selected, context, storage, settings)

    return _family


def _materialize_family(family: str, kinds: list[ExportSpec], context: dg.AssetExecutionContext,
                        storage: TrajectoryStorage, settings: PipelineSettings) -> Iterator:
    config = settings.load()
    store = storage.open()
    batches = registered_batches(context)
    table = stored_trajectories(store, batches)
    budget = _token_budget(config, family)
    writers: dict[str, _ExportWriter] = {}
    try:
        for kind in kinds:
            writers[kind.name] = _ExportWriter(store, kind, config)
        with chunk_memory() as release:
            for frames in iter_family(family, table, getattr(config, family), config.split, kinds, budget):
                while frames:  # popped, so each format's rows are freed as soon as they are written
                    name, frame = frames.popitem()
                    writers[name].add(frame)
                    del frame
                release()
    except BaseException:
        for writer in writers.values():
            writer.discard()
        raise
    sources = read_summary(store, batches)["sources"]
    broken = []
    for kind in kinds:
        try:
            written = writers[kind.name].finish()
        except _BrokenExport as failure:
            # nothing of it was written: a dataset that breaks its checks must never reach a trainer
            yield from failure.checks
            failed = [check.check_name for check in failure.checks if not check.passed]
            broken.append(f"{kind.asset_name} failed {', '.join(failed)}: {failure.summary}")
            continue
        yield _publish(store, kind, written, batches, sources, config)
    release_memory()  # the payloads are gone: give their memory back before the next step
    if broken:
        raise dg.Failure(  # the same rows would fail again: no retry
            description="; ".join(broken) + "; nothing was written for them",
            allow_retries=False,
        )


def _token_budget(config: PipelineConfig, family: str) -> TokenBudget | None:
    """The family's budget when a tokenizer is configured (None: rows are not measured)."""
    if config.tokenizer is None:
        return None
    try:
        counter = load_counter(config.tokenizer)
    except TokenizerError as error:
        raise dg.Failure(description=str(error), allow_retries=False) from None
    section = getattr(config, family)
    return TokenBudget(counter, section.max_tokens, section.over_token_budget == "truncate")


def _publish(store: Storage, kind: ExportSpec, written: _Written, batches: list[str], sources: list[dict],
             config: PipelineConfig) -> dg.MaterializeResult:
    """Writes an export's index files, card and (last) manifest; its Dagster materialization."""
    manifest = build_manifest(
        export=kind.name,
        file_format=kind.file_format,
        config_section=kind.family,
        batches=batches,
        config=config.model_dump(),
        sources=sources,
        rows=written.rows,
        excluded=dict(written.excluded),
        distributions=written.distributions,
        files=written.files,
        # verifier inputs (any JSON value, keys by environment) are declared as the rows hold them
        features=hf_features(kind.arrow_schema) + [{"name": key, "dtype": "json"}
                                                   for key in sorted(written.input_keys - set(kind.arrow_schema.names))],
        token_budget=_token_budget_summary(kind, written, config),
    )
    for name, content in (kind.index_files(kind.name) if kind.index_files else {}).items():
        store.write_bytes(layout.export_extra(kind.name, name), content)
    store.write_bytes(layout.export_card(kind.name), render_card(manifest, kind.description).encode())
    # last: a manifest beside the files means the set is complete
    store.write_bytes(layout.export_manifest(kind.name), orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    return dg.MaterializeResult(
        asset_key=kind.asset_name,
        metadata={
            "dagster/row_count": sum(written.rows.values()),
            "dagster/uri": store.uri(layout.export_folder(kind.name)),
            "train_rows": written.rows["train"],
            "validation_rows": written.rows["validation"],
            "excluded": dg.MetadataValue.json(manifest["excluded"]),
            "manifest": store.uri(layout.export_manifest(kind.name)),
            "card": store.uri(layout.export_card(kind.name)),
            "batches": len(batches),
            "first_row": dg.MetadataValue.md(
                f"```json\n{written.first_line[:2000]}\n```" if written.first_line else "(empty)"
            ),
            "dagster/column_lineage": dg.TableColumnLineage(
                deps_by_column={
                    column: [dg.TableColumnDep(asset_key=dg.AssetKey("validated_trajectories"), column_name=c)
                             for c in columns]
                    for column, columns in kind.lineage.items()
                }
            ),
        },
        check_results=written.checks,
    )


def _token_budget_summary(kind: ExportSpec, written: _Written, config: PipelineConfig) -> dict:
    section = getattr(config, kind.family)
    return {
        "tokenizer": config.tokenizer,
        "max_tokens": section.max_tokens if config.tokenizer else None,
        "over_token_budget": section.over_token_budget,
        "left_out": written.excluded.get(OVER_BUDGET, 0),
        "truncated": written.truncated,
    }


export_assets = [build_family_asset(family) for family in EXPORT_FAMILIES]
