"""The Arrow schemas of the TRL exports (written as Parquet, so train and validation share them).

TRL applies the tokenizer's chat template to ``messages`` (SFT), ``prompt`` + ``chosen`` /
``rejected`` (DPO) or ``prompt`` (GRPO), with the row's ``tools``. Messages carry tool-call
arguments as JSON objects and ``tools`` is a list of JSON objects, both of Arrow type JSON:
``datasets`` loads them as its ``Json`` feature, as TRL's dataset docs declare them
(``docs/source/dataset_formats.md``, "Tool Calling"), and TRL passes them to the template as
they are (``sft_trainer.py`` / ``dpo_trainer.py`` also accept a JSON string ``tools``, TRL
1.16). For GRPO every column besides ``prompt`` is passed to the reward functions as a
keyword argument.
"""

import pyarrow as pa

from trajectory_assets.exports.seed import PAIR_LINEAGE, PAIR_SCORES, SFT_COLUMNS, TASK_SUMMARY
from trajectory_assets.chat.template import MESSAGES_TYPE, TOOLS_TYPE

TRL_SFT_SCHEMA = pa.schema([("messages", MESSAGES_TYPE), ("tools", TOOLS_TYPE), *SFT_COLUMNS])
TRL_DPO_SCHEMA = pa.schema([("prompt", MESSAGES_TYPE), ("chosen", MESSAGES_TYPE), ("rejected", MESSAGES_TYPE),
                            *PAIR_SCORES, ("tools", TOOLS_TYPE), *PAIR_LINEAGE])
TRL_GRPO_SCHEMA = pa.schema([
    ("prompt", MESSAGES_TYPE),
    ("tools", TOOLS_TYPE),
    ("ground_truth", pa.string()),
    ("agent_name", pa.string()),
    ("task_type", pa.string()),
    *TASK_SUMMARY,
])
