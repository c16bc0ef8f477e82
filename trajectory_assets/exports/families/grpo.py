"""The GRPO family: one unit per task (:class:`TaskItem`): its first rollout's request and
prompt, and aggregates over all its rollouts, every export of the family rendered from it
(``grpo``, ``trl_grpo``, ``verl``)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property, lru_cache, partial
from typing import Any

import orjson
import pandas as pd

from trajectory_assets.chat.messages import is_context_summary
from trajectory_assets.chat.reward_components import objectives, summarize
from trajectory_assets.config import GrpoConfig, SplitConfig
from trajectory_assets.exports.curation import balance
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
    split_of,
    unit_chunks,
)
from trajectory_assets.exports.token_budget import TokenBudget
from trajectory_assets.exports.unrepresentable import Unrepresentable
from trajectory_assets.sources import agent_ref_routing

PLAN = [*PLAN_COLUMNS, "agent_name", "agent_ref", "source_format", "reward_components"]
PAYLOAD_COLUMNS = ["trajectory_id", "request", "messages", "prompt_length", "tools", "task_inputs", "metadata"]


def plan(table: TrajectoryTable, config: GrpoConfig,
         budget: TokenBudget | None = None,
         benchmarks: BenchmarkIndex | None = None,
         candidates: Candidates | None = None) -> Plan:
    """One row per task: its first rollout (in the canonical order: the task's bucket is that
    rollout's, and the only payload the task reads), aggregates over all of them, and its
    ``position`` in the export."""
    kept, excluded, rows_per_bucket = curated_trajectories(table, config, PLAN, budget, benchmarks, candidates)
    passed = (kept["reward"] >= config.pass_threshold).where(kept["reward"].notna())
    by_task = kept.assign(passed=passed.astype(float)).groupby("task_key", sort=False)
    # built-in aggregations only: a Python function per task cost 0.8 s of a 1 GB GRPO step
    aggregates = by_task.agg(
        num_rollouts=("trajectory_id", "size"),
        rewarded=("reward", "count"),
        mean_reward=("reward", "mean"),
        pass_rate=("passed", "mean"),
    )
    aggregates["reward_std"] = by_task["reward"].std(ddof=0)
    trajectory_ids = _by_task(kept["task_key"], kept["trajectory_id"])
    aggregates["trajectory_ids"] = [trajectory_ids[task] for task in aggregates.index]
    # per objective of a multi-objective reward, what a GDPO-style trainer normalizes on its own
    scored = kept["reward_components"].notna()
    summaries = {task: summarize(values) for task, values in
                 _by_task(kept["task_key"][scored], kept["reward_components"][scored].map(objectives)).items()}
    aggregates["objectives_summary"] = [summaries.get(task) for task in aggregates.index]
    tasks = kept.drop_duplicates("task_key").set_index("task_key", drop=False).join(aggregates)
    # no learning signal: two or more rewarded rollouts, all with the same reward
    tasks["zero_variance"] = (tasks["rewarded"] >= 2) & (tasks["reward_std"] == 0)
    tasks["agent_ref"] = _agent_refs(tasks, config)
    no_agent = tasks["agent_ref"].isna()
    if no_agent.any():
        excluded["no_agent_ref"] += int(no_agent.sum())
    tasks = tasks.loc[~no_agent]
    if config.zero_variance_groups == "drop" and tasks["zero_variance"].any():
        excluded["zero_variance_group"] += int(tasks["zero_variance"].sum())
        tasks = tasks.loc[~tasks["zero_variance"]]
    tasks = balance(tasks.reset_index(drop=True), config, "task_key", excluded).reset_index(drop=True)
    return Plan(tasks.assign(position=tasks.index), excluded, rows_per_bucket, PAYLOAD_COLUMNS)


def _agent_refs(tasks: pd.DataFrame, config: GrpoConfig) -> list[dict[str, Any] | None]:
    """Each task's agent, as its source format routes it (``SourceFormat.agent_ref_setting``):
    the agent its first rollout names, where the format's records name one, else the agent
    the format's ``grpo`` setting names (None: none, the task is left out)."""
    routes = {name: agent_ref_routing(name) for name in tasks["source_format"].unique()}
    agent_refs = []
    for first in tasks.itertuples(index=False):
        setting, from_record = routes[first.source_format]
        if from_record:
            agent_refs.append(_agent_ref(first.agent_ref, first.agent_name, getattr(config, setting)))
        else:
            agent_refs.append(_agent_ref(None, None, getattr(config, setting)))
    return agent_refs


def _by_task(task_keys: pd.Series, values: pd.Series) -> dict[str, list]:
    """Each task's values, in the order of ``values`` (the canonical order)."""
    grouped: dict[str, list] = {}
    for task_key, value in zip(task_keys, values):
        grouped.setdefault(task_key, []).append(value)
    return grouped


def _agent_ref(agent_ref_json: str | None, agent_name: str | None, default_name: str | None) -> dict[str, Any] | None:
    """NeMo Gym routes RL rows by ``agent_ref``; ``ng_prepare_data`` writes
    ``{"type": "responses_api_agents", "name"}``, so every row gets that form."""
    if agent_ref_json is not None:
        agent_ref = orjson.loads(agent_ref_json)
        if isinstance(agent_ref, dict) and isinstance(agent_ref.get("name"), str) and agent_ref["name"]:
            return {"type": "responses_api_agents", **agent_ref}
    name = agent_name or default_name
    return {"type": "responses_api_agents", "name": name} if name else None


class TaskItem:
    """One planned task with its first rollout's payload; JSON columns decoded once (its tools
    by its chunk's ``shared``)."""

    def __init__(self, task, payload, index: int, split: SplitConfig, shared: SharedJson) -> None:
        self.task = task
        self.payload = payload
        self.shared = shared
        self.index = index  # the task's position in the whole export, every shard's (verl's extra_info.index)
        self.split = split_of(task.prompt_key, split)

    @property
    def prompt_key(self) -> str:
        return self.task.prompt_key

    @cached_property
    def prompt(self) -> list[dict[str, Any]]:
        prompt = orjson.loads(self.payload.messages)[: self.payload.prompt_length]
        if any(is_context_summary(message) for message in prompt):
            raise Unrepresentable("context_summary_in_prompt")  # the harness's words, not a user's
        return prompt

    @cached_property
    def task_inputs(self) -> dict[str, Any]:
        """What the verifier was given (NeMo Gym's materialized inputs), when they were beside the file."""
        return orjson.loads(self.payload.task_inputs) if self.payload.task_inputs is not None else {}

    @cached_property
    def ground_truth(self) -> str | None:
        # the materialized inputs say what the verifier was given; a rollout's own keys may
        # also hold what it produced, so they come second
        return ground_truth_of(self.task_inputs) or metadata_ground_truth(self.payload.metadata)

    @cached_property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.shared(self.payload.tools)

    @cached_property  # every export of the task writes it
    def summary(self) -> dict[str, Any]:
        """What every export of the task reports of its rollouts."""
        task = self.task
        return {
            "task_key": task.task_key,
            "trajectory_ids": task.trajectory_ids,
            "num_rollouts": int(task.num_rollouts),
            "mean_reward": None if pd.isna(task.mean_reward) else float(task.mean_reward),
            "reward_std": None if pd.isna(task.reward_std) else float(task.reward_std),
            "pass_rate": None if pd.isna(task.pass_rate) else float(task.pass_rate),
            "zero_variance": bool(task.zero_variance),
            "reward_components": task.objectives_summary,
        }


def render(units: pd.DataFrame, payloads: Payloads, config: GrpoConfig, split: SplitConfig,
           exports: dict[str, Export], budget: TokenBudget | None = None) -> Iterator[dict[str, ExportFrame]]:
    """A shard's tasks (``Plan.units_in``) in every export, a chunk at a time, in plan order."""
    fit = None if budget is None else partial(_fit_task, budget)
    for chunk in unit_chunks(units):
        firsts, shared = payloads.rows(chunk["trajectory_id"]), SharedJson()
        items = (TaskItem(task, first, task.position, split, shared)
                 for task, first in zip(chunk.itertuples(index=False), firsts.itertuples(index=False)))
        yield render_all(items, exports, split, fit)


def _fit_task(budget: TokenBudget, item: TaskItem) -> tuple[TaskItem, int, bool]:
    return item, budget.prompt(item.prompt, item.tools), False


@lru_cache(maxsize=256)
def metadata_ground_truth(metadata_json: str) -> str | None:
    """:func:`ground_truth_of` a rollout's stored metadata (its JSON text), decoded once per
    distinct text: an environment's rollouts often carry the same (183 distinct in the 1 GB
    benchmark corpus's 44,616 rows)."""
    return ground_truth_of(orjson.loads(metadata_json))


def ground_truth_of(metadata: dict[str, Any]) -> str | None:
    """The verifier's reference answer carried by a rollout, as a string (rule rewards compare text).

    >>> ground_truth_of({"expected_answer": 42}), ground_truth_of({"ground_truth": "B"}), ground_truth_of({})
    ('42', 'B', None)
    """
    for key in ("expected_answer", "ground_truth"):
        value = metadata.get(key)
        if value is not None:
            return value if isinstance(value, str) else orjson.dumps(value).decode()
    return None
