"""What an export is: one module of ``trajectory_assets/exports/`` defines one ``EXPORT``.

An :class:`Export` is all there is to know about one export: its family (the config
section that curates it and the step that builds it), its renderer, its Pandera contract,
the Arrow schema of its rows, where its fields come from and what they hold, how a written
row reads back as the canonical chat, what its manifest measures and what it is for. It is
built with keywords only: nine of its fields are required, and a name beside each value says
which is which. The registry (``exports/registry.py``, ``EXPORTS``) is the concatenation of the
modules' ``EXPORT``; the Dagster assets and their checks, the CLI's ``--exports``, the report's
viewer, the README's export table and the dataset cards all come from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

from schemas.export_row import ExportRowSchema

SEED_GROUP = "exports"  # the formats of the seed specs
FLAVORS_GROUP = "trainer_flavors"  # the same units in the form a trainer reads


@dataclass
class ReadBack:
    """A written row, read back as the canonical chat: OpenAI Chat Completions messages
    (``reasoning_content``, ``tool_calls`` with JSON-string arguments, tool messages with
    ``tool_call_id``), as the viewer shows it and the round-trip tests compare it.

    - a conversation (SFT): ``messages`` (and ``tools``);
    - a preference pair (DPO): the shared prompt in ``messages``, and ``chosen``, ``rejected``;
    - a task (GRPO): its prompt in ``messages``, and the rollouts it was made from;
    - a token row: ``calls``, the model calls' token data, and no messages.
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    chosen: list[dict[str, Any]] | None = None
    rejected: list[dict[str, Any]] | None = None
    calls: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class Export:
    name: str  # also the folder under exports/ and the CLI's name for it
    family: str  # sft / dpo / grpo
    # the family's unit (SftItem, PairItem, TaskItem) -> the row to write, as a dict in field
    # order; raises Unrepresentable for a unit this export cannot express
    render: Callable[[Any], dict[str, Any]]
    # a written row (as a reader of the file gets it) -> the canonical chat it holds
    read_back: Callable[[Mapping[str, Any]], ReadBack]
    # checks the written rows, through its ``row(record)`` (``schemas/export_row.py``)
    contract: type[ExportRowSchema]
    # the Arrow types of its rows: Parquet is written with them, every JSON-lines row is
    # checked against them, and the dataset card declares them to HF datasets
    arrow_schema: pa.Schema
    # export field -> the validated_trajectories columns it is made from (shown in the UI)
    lineage: dict[str, list[str]]
    # what each field of its rows holds (shown as the asset's column descriptions)
    fields: dict[str, str]
    description: str
    group: str = SEED_GROUP
    file_format: str = "jsonl"  # or "parquet"
    # numeric frame columns whose distribution the manifest and the card report
    measures: tuple[str, ...] = ()
    # trajectory columns it needs beyond what its family reads (read only when it is built)
    columns: tuple[str, ...] = ()
    # name -> content of a trainer's index file written beside the splits
    index_files: Callable[[str], dict[str, bytes]] | None = None
    # sft.train_on -> how its trainer trains exactly the messages the rule picks (the dataset
    # card says it; exports/training_switch.py); None: the format has no trainer setting for it
    training_setting: Callable[[str], str] | None = None

    @property
    def asset_name(self) -> str:
        return f"{self.name}_dataset"

    @cached_property  # asked for every chunk; the contract does not change
    def checks_margin(self) -> bool:
        return "quality_difference" in self.contract.to_schema().columns

    @property
    def column_descriptions(self) -> dict[str, str]:
        """What each field of the written rows holds, in the schema's order."""
        return {name: self.fields[name] for name in self.arrow_schema.names}
