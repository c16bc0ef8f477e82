"""NeMo RL's dataset forms: SFT ``openai_format`` and DPO's preference format.

Read from NVIDIA-NeMo/RL (``docs/guides/sft.md`` "OpenAI Format Datasets", ``docs/guides/dpo.md``
"Datasets", ``nemo_rl/data/processors.py``, ``nemo_rl/data/datasets/``):

- **SFT** (``OpenAIFormatDataset``): JSON lines ``{"messages", "tools"}`` handed to
  ``apply_chat_template`` as they are, tool-call arguments as objects (the docs' example).
  The last message must be the assistant's (the loader asserts it). With tool calls NeMo RL
  asks for ``use_preserving_dataset: true``, which reads the lines with ``json.loads``:
  loading them with ``datasets`` instead would fill every argument object with the keys of
  all the others.
- **DPO** (``PreferenceDataset``): ``{"context", "completions": [{"rank", "completion"}]}``,
  exactly two completions, the lower rank preferred, no ties (the preprocessor raises on
  equal ranks). The collate function puts the loss on the final message of each completion
  only (``only_unmask_final=True``), so each completion here ends with an assistant turn.
  ``load_dataset_from_path`` reads ``.parquet`` as well as ``.jsonl``; this flavor is Parquet
  so the argument objects arrive through ``datasets`` unchanged (JSON type).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from trajectory_assets.exports.seed import PAIR_LINEAGE, PAIR_SCORES
from trajectory_assets.chat.template import MESSAGES_TYPE, TOOLS_TYPE
from trajectory_assets.exports.trl import TRL_SFT_SCHEMA
from trajectory_assets.exports.unrepresentable import Unrepresentable

CHOSEN_RANK, REJECTED_RANK = 0, 1

# the SFT rows are the TRL rows (what datasets loads the JSON lines as, declared in the card)
NEMO_RL_SFT_SCHEMA = TRL_SFT_SCHEMA
NEMO_RL_DPO_SCHEMA = pa.schema([
    ("context", MESSAGES_TYPE),
    ("completions", pa.list_(pa.struct([("rank", pa.int64()), ("completion", MESSAGES_TYPE)]))),
    ("tools", TOOLS_TYPE),
    *PAIR_SCORES,
    *PAIR_LINEAGE,
])


def require_final_assistant(messages: list[dict[str, Any]], reason: str) -> None:
    """NeMo RL trains on (SFT) or puts the DPO loss on (preferences) the last message: it must be the model's."""
    if not messages or messages[-1].get("role") != "assistant":
        last = messages[-1].get("role") if messages else None
        raise Unrepresentable(reason, f"the last message is {last!r}, not the assistant's")


def completions(chosen: list[dict[str, Any]], rejected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The two ranked completions of a pair (chosen first, rank 0)."""
    require_final_assistant(chosen, "completion_ends_without_assistant_turn")
    require_final_assistant(rejected, "completion_ends_without_assistant_turn")
    return [{"rank": CHOSEN_RANK, "completion": chosen}, {"rank": REJECTED_RANK, "completion": rejected}]
