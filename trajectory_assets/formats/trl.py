"""The Arrow schemas of the TRL exports (written as Parquet, so train and validation share them).

TRL applies the tokenizer's chat template to ``messages`` (SFT), ``prompt`` + ``chosen`` /
``rejected`` (DPO) or ``prompt`` (GRPO), and parses a ``tools`` column itself when it is a
JSON string (trl/trainer/sft_trainer.py and dpo_trainer.py, TRL 1.16). For GRPO every
column besides ``prompt`` is passed to the reward functions as a keyword argument.
"""

import pyarrow as pa

from trajectory_assets.formats.text_chat import MESSAGES_TYPE

LINEAGE = [("trajectory_id", pa.string()), ("task_key", pa.string())]

TRL_SFT_SCHEMA = pa.schema([
    ("messages", MESSAGES_TYPE),
    ("tools", pa.string()),
    ("reward", pa.float64()),
    ("task_type", pa.string()),
    *LINEAGE,
])
TRL_DPO_SCHEMA = pa.schema([
    ("prompt", MESSAGES_TYPE),
    ("chosen", MESSAGES_TYPE),
    ("rejected", MESSAGES_TYPE),
    ("quality_difference", pa.float64()),
    ("reward_chosen", pa.float64()),
    ("reward_rejected", pa.float64()),
    ("tools", pa.string()),
    ("chosen_id", pa.string()),
    ("rejected_id", pa.string()),
    ("task_key", pa.string()),
    ("pairing", pa.string()),
])
TRL_GRPO_SCHEMA = pa.schema([
    ("prompt", MESSAGES_TYPE),
    ("tools", pa.string()),
    ("ground_truth", pa.string()),
    ("agent_name", pa.string()),
    ("task_type", pa.string()),
    ("task_key", pa.string()),
    ("trajectory_ids", pa.list_(pa.string())),
    ("num_rollouts", pa.int64()),
    ("mean_reward", pa.float64()),
    ("reward_std", pa.float64()),
    ("pass_rate", pa.float64()),
    ("zero_variance", pa.bool_()),
])
