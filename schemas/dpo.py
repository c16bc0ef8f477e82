"""Contract of DPO export rows: ``{"prompt", "chosen", "rejected", "quality_difference",
"reward_chosen", "reward_rejected"}`` plus lineage (``chosen_id``, ``rejected_id``, ``pairing``)."""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.sft import SPLITS
from schemas.trajectory import HEX_ID
from schemas.validation import ArrowString, leading_field
from schemas.patterns import ROLE_SHAPE_PATTERN

STARTS_WITH_ASSISTANT = r"^[ac]"


class DpoSchema(pandera.DataFrameModel):
    task_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    prompt_key: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    split: Series[ArrowString] = pandera.Field(isin=SPLITS)
    chosen_id: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    rejected_id: Series[ArrowString] = pandera.Field(str_matches=HEX_ID)
    prompt_shape: Series[ArrowString] = pandera.Field(str_contains="u")
    chosen_shape: Series[ArrowString] = pandera.Field(str_matches=STARTS_WITH_ASSISTANT)
    rejected_shape: Series[ArrowString] = pandera.Field(str_matches=STARTS_WITH_ASSISTANT)
    reward_chosen: Series[float]
    reward_rejected: Series[float]
    quality_difference: Series[float] = pandera.Field(gt=0)
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

    class Config:
        strict = True
        unique = ["chosen_id", "rejected_id"]  # one row per pair; all_pairs_with_margin makes several per task
