"""Contract of DPO export rows: ``{"prompt", "chosen", "rejected", "quality_difference",
"reward_chosen", "reward_rejected"}`` plus lineage (``chosen_id``, ``rejected_id``, ``pairing``).

The role rules hold over the written prompt followed by each side; each side starts with the
model's turn (the pair diverges there); the margin is the rewards' gap.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.export_row import ExportRowSchema, field_values, numbers
from schemas.shapes import ROLE_SHAPE_PATTERN, role_shape
from schemas.trajectory import HEX_ID
from schemas.validation import ArrowString, leading_field

STARTS_WITH_ASSISTANT = r"^[ac]"


def pair_shapes(pairs) -> dict[str, list[str]]:
    """The role shapes of pairs' prompts and sides (``pairs``: prompt, chosen, rejected each):
    each side read after the prompt (a tool message answers a call only in context)."""
    columns: dict[str, list[str]] = {"prompt_shape": [], "chosen_shape": [], "rejected_shape": []}
    for prompt, chosen, rejected in pairs:
        chosen_shape, rejected_shape = role_shape([*prompt, *chosen]), role_shape([*prompt, *rejected])
        columns["prompt_shape"].append(chosen_shape[: len(prompt)])
        columns["chosen_shape"].append(chosen_shape[len(prompt):])
        columns["rejected_shape"].append(rejected_shape[len(prompt):])
    return columns


def dominant(component_margins) -> bool:
    """Whether per-objective margins (chosen - rejected) say the chosen side Pareto-dominates."""
    values = list((component_margins or {}).values())
    return bool(values) and all(value >= 0 for value in values) and any(value > 0 for value in values)


class DpoSchema(ExportRowSchema):
    task_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    chosen_id: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    rejected_id: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    prompt_shape: Series[ArrowString] = pandera.Field(str_contains="u")
    chosen_shape: Series[ArrowString] = pandera.Field(str_matches=STARTS_WITH_ASSISTANT)
    rejected_shape: Series[ArrowString] = pandera.Field(str_matches=STARTS_WITH_ASSISTANT)
    reward_chosen: Series[float]
    reward_rejected: Series[float]
    quality_difference: Series[float] = pandera.Field(gt=0)
    # dpo.pairing dominance: the chosen side is at least as good on every reward component and
    # better on one (component_margins all >= 0, one > 0); true for every other pairing
    dominance_holds: Series[bool] = pandera.Field(eq=True)
    fields: Series[ArrowString] = pandera.Field(str_matches=leading_field("prompt"))

    @pandera.dataframe_check(name="chosen_is_not_rejected")
    def chosen_is_not_rejected(cls, df):
        return df["chosen_id"] != df["rejected_id"]

    @pandera.dataframe_check(name="difference_is_reward_gap")
    def difference_is_reward_gap(cls, df):
        gap = df["reward_chosen"] - df["reward_rejected"]
        return (gap - df["quality_difference"]).abs() <= 1e-9

    @pandera.dataframe_check(name="prompt_plus_chosen_follows_role_rules")
    def prompt_plus_chosen_follows_role_rules(cls, df):
        return (df["prompt_shape"] + df["chosen_shape"]).str.match(ROLE_SHAPE_PATTERN)

    @pandera.dataframe_check(name="prompt_plus_rejected_follows_role_rules")
    def prompt_plus_rejected_follows_role_rules(cls, df):
        return (df["prompt_shape"] + df["rejected_shape"]).str.match(ROLE_SHAPE_PATTERN)

    @classmethod
    def pair_columns(cls, records) -> dict[str, list]:
        """The pairs' scores and lineage, as every preference row holds them."""
        return {"task_key": field_values(records, "task_key"), "chosen_id": field_values(records, "chosen_id"),
                "rejected_id": field_values(records, "rejected_id"),
                "reward_chosen": numbers(field_values(records, "reward_chosen")),
                "reward_rejected": numbers(field_values(records, "reward_rejected")),
                "quality_difference": numbers(field_values(records, "quality_difference")),
                "dominance_holds": [record.get("pairing") != "dominance" or dominant(record.get("component_margins"))
                                    for record in records]}

    @classmethod
    def columns(cls, records):
        return {**cls.pair_columns(records),
                **pair_shapes((record["prompt"], record["chosen"], record["rejected"]) for record in records)}

    class Config:
        strict = True
        unique = ["chosen_id", "rejected_id"]  # one row per pair; all_pairs_with_margin makes several per task
