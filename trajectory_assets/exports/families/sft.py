"""The SFT family: one unit per curated trajectory (:class:`SftItem`), every export of the
family rendered from it (``sft``, ``sft_hermes``, ``trl_sft``, ``llama_factory``,
``nemo_rl_sft``, ``on_policy_tokens``)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property, partial
from typing import Any

import orjson
import pandas as pd

from trajectory_assets.chat.training import (
    UNTRAINED_MESSAGES,
    TrainingRule,
    trained_messages,
    trains_every_assistant_message,
    trains_final_assistant_message_only,
)
from trajectory_assets.config import SftConfig, SplitConfig
from trajectory_assets.exports.curation import balance, carries_flag
from trajectory_assets.ingest.decontamination import BenchmarkIndex
from trajectory_assets.exports.export import Export
from trajectory_assets.exports.families.frames import (
    PLAN_COLUMNS,
    Candidates,
    ExportFrame,
    Payloads,
    Plan,
    SharedJson,
    TrajectoryTable,
    curated_trajectories,
    render_all,
    unit_chunks,
)
from trajectory_assets.exports.template import template_messages
from trajectory_assets.exports.token_budget import TokenBudget

PAYLOAD_COLUMNS = [
    "trajectory_id", "task_key", "prompt_key", "task_type", "reward", "quality_flags", "messages", "tools",
]


def plan(table: TrajectoryTable, config: SftConfig,
         budget: TokenBudget | None = None,
         benchmarks: BenchmarkIndex | None = None,
         candidates: Candidates | None = None) -> Plan:
    """One unit per curated trajectory, in the canonical order."""
    kept, excluded, rows_per_bucket = curated_trajectories(table, config, PLAN_COLUMNS, budget, benchmarks, candidates)
    rows = balance(kept, config, "trajectory_id", excluded)
    # the metadata is read only when some row's source listed messages that are no targets
    lists_untrained = bool(carries_flag(rows["quality_flags"], UNTRAINED_MESSAGES).any())
    # only what the shards need: the flat columns (a Python object per value) are not kept meanwhile
    units = rows[["trajectory_id", "bucket"]].reset_index(drop=True)
    return Plan(units, excluded, rows_per_bucket, PAYLOAD_COLUMNS + (["metadata"] if lists_untrained else []))


class SftItem:
    """One planned trajectory's payload; JSON columns are decoded once, on first use (its
    tools by its chunk's ``shared``, which every trajectory with the same tools uses)."""

    def __init__(self, row, train_on: TrainingRule, shared: SharedJson) -> None:
        self.row = row
        self.train_on = train_on
        self.shared = shared
        self.cut_short = False  # cut to the token budget (see cut)

    @cached_property
    def messages(self) -> list[dict[str, Any]]:
        return orjson.loads(self.row.messages)

    @cached_property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.shared(self.row.tools)

    @property
    def prompt_key(self) -> str:
        return self.row.prompt_key

    @cached_property
    def trained(self) -> list[bool]:
        """Per message, whether ``sft.train_on`` makes it a training target (never one the
        source lists as not the policy's: read only for rows flagged so)."""
        untrained: list[int] = []
        if UNTRAINED_MESSAGES in self.row.quality_flags.split(","):
            untrained = orjson.loads(self.row.metadata).get(UNTRAINED_MESSAGES, [])
        return trained_messages(self.messages, self.train_on, set(untrained))

    @cached_property
    def trains_every_assistant_message(self) -> bool:
        """Whether its targets are what a global "every assistant message" switch trains
        (asked by each trainer form with such a switch: ``exports/training_switch.py``)."""
        return trains_every_assistant_message(self.messages, self.trained)

    @cached_property
    def trains_final_assistant_message_only(self) -> bool:
        """Whether its targets are what a global "final assistant message only" switch trains."""
        return trains_final_assistant_message_only(self.messages, self.trained)

    @cached_property
    def template_record(self) -> dict[str, Any]:
        """The row in the form chat templates render (TRL and NeMo RL write it), made once."""
        row = self.row
        return {"messages": template_messages(self.messages), "tools": self.tools,
                "reward": None if pd.isna(row.reward) else row.reward, "task_type": row.task_type,
                "trajectory_id": row.trajectory_id, "task_key": row.task_key}

    def cut(self, messages: list[dict[str, Any]]) -> "SftItem":
        """The same trajectory with only its first ``len(messages)`` messages (a format that
        writes more of the trajectory than its messages must check ``cut_short``). Its targets
        stay those the rule picked in the whole conversation: with ``final_assistant`` the last
        turn that fits is not the final answer (a cut that keeps no target trains nothing)."""
        item = SftItem(self.row._replace(messages=orjson.dumps(messages).decode()), self.train_on, self.shared)
        item.messages = messages
        item.trained = self.trained[: len(messages)]
        item.cut_short = True
        return item


def render(units: pd.DataFrame, payloads: Payloads, config: SftConfig, split: SplitConfig,
           exports: dict[str, Export], budget: TokenBudget | None = None) -> Iterator[dict[str, ExportFrame]]:
    """A shard's units (``Plan.units_in``) in every export, a chunk at a time, in plan order."""
    fit = None if budget is None else partial(_fit_sft, budget)
    for chunk in unit_chunks(units):
        rows, shared = payloads.rows(chunk["trajectory_id"]), SharedJson()
        yield render_all((SftItem(row, config.train_on, shared) for row in rows.itertuples(index=False)), exports,
                         split, fit)


def _fit_sft(budget: TokenBudget, item: SftItem) -> tuple[SftItem, int, bool]:
    messages, tokens, cut = budget.fit([], item.messages, item.tools)
    return (item.cut(messages) if cut else item), tokens, cut
