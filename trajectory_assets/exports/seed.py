"""The Arrow types HF ``datasets`` loads the seed formats' JSON lines as (declared in each
export's dataset card, so ``load_dataset("<export folder>")`` needs no other argument).

The seed formats are written as their specs say (NeMo Gym's SFT / DPO / GRPO rows, Hermes
ShareGPT), with tool-call arguments as the JSON strings of OpenAI's wire format. Their
message lists vary from row to row (content as text or as parts, optional keys), so each
such column is one JSON value (``text_chat.JSON``): ``datasets`` hands back every row exactly
as written, strings included. A JSON type on a string field itself would not do: ``datasets``
decodes a string that holds JSON text, so an argument string would come back as an object.
"""

import pyarrow as pa

from trajectory_assets.chat.template import JSON

LINEAGE = [("trajectory_id", pa.string()), ("task_key", pa.string())]
# the columns every form of a family's rows shares beside its messages (trainer flavors too)
SFT_COLUMNS = [("reward", pa.float64()), ("task_type", pa.string()), *LINEAGE]
PAIR_SCORES = [("quality_difference", pa.float64()), ("reward_chosen", pa.float64()), ("reward_rejected", pa.float64())]
PAIR_LINEAGE = [("chosen_id", pa.string()), ("rejected_id", pa.string()), ("task_key", pa.string()),
                ("pairing", pa.string())]
TASK_SUMMARY = [
    ("task_key", pa.string()),
    ("trajectory_ids", pa.list_(pa.string())),
    ("num_rollouts", pa.int64()),
    ("mean_reward", pa.float64()),
    ("reward_std", pa.float64()),
    ("pass_rate", pa.float64()),
    ("zero_variance", pa.bool_()),
]

SFT_SCHEMA = pa.schema([("messages", JSON), ("tools", JSON), *SFT_COLUMNS])
DPO_SCHEMA = pa.schema([("prompt", JSON), ("chosen", JSON), ("rejected", JSON), *PAIR_SCORES, ("tools", JSON),
                        *PAIR_LINEAGE])
GRPO_SCHEMA = pa.schema([("responses_create_params", JSON), ("agent_ref", JSON), *TASK_SUMMARY])
SHAREGPT_TURNS = pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))
SFT_HERMES_SCHEMA = pa.schema([("conversations", SHAREGPT_TURNS), *LINEAGE])
