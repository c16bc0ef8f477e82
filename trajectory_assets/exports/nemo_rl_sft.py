"""``nemo_rl_sft``: NeMo RL's SFT ``openai_format`` (``OpenAIFormatDataset``): JSON lines
``{"messages", "tools"}`` handed to ``apply_chat_template`` as they are, tool-call arguments
as objects (the docs' example): the TRL rows. The last message must be the assistant's (the
loader asserts it). With tool calls NeMo RL asks for ``use_preserving_dataset: true``, which
reads the lines with ``json.loads``: loading them with ``datasets`` instead would fill every
argument object with the keys of all the others.

Read from NVIDIA-NeMo/RL (``docs/guides/sft.md`` "OpenAI Format Datasets",
``nemo_rl/data/processors.py``, ``nemo_rl/data/datasets/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.nemo_rl import NemoRlSftSchema
from trajectory_assets.exports import trl_sft
from trajectory_assets.exports.columns import FIELDS, SFT_LINEAGE
from trajectory_assets.exports.export import FLAVORS_GROUP, Export, ReadBack
from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.exports.training_switch import GlobalSwitch
from trajectory_assets.exports.unrepresentable import Unrepresentable

# the rows are the TRL rows (what datasets loads the JSON lines as, declared in the card)
SCHEMA = trl_sft.SCHEMA


def require_final_assistant(messages: list[dict[str, Any]], reason: str) -> None:
    """NeMo RL trains on (SFT) or puts the DPO loss on (preferences) the last message: it must be the model's."""
    if not messages or messages[-1].get("role") != "assistant":
        last = messages[-1].get("role") if messages else None
        raise Unrepresentable(reason, f"the last message is {last!r}, not the assistant's")


# NeMo RL's SFT trains the assistant's messages (roles_to_train_on is fixed to assistant in
# nemo_rl/algorithms/sft.py) or, with only_unmask_final, the last message
SWITCH = GlobalSwitch("NeMo RL", "the default (`sft.only_unmask_final: false`: every assistant message)",
                      "`sft.only_unmask_final: true`")


def render(item: SftItem) -> dict[str, Any]:
    """NeMo RL's openai_format: the TRL row, which must end with the assistant's turn."""
    require_final_assistant(item.messages, "ends_without_assistant_turn")
    SWITCH.require(item)
    return item.template_record


def read_back(row: Mapping[str, Any]) -> ReadBack:
    return trl_sft.read_back(row)


EXPORT = Export(
    name="nemo_rl_sft", family="sft", render=render, read_back=read_back, contract=NemoRlSftSchema,
    arrow_schema=SCHEMA, lineage=SFT_LINEAGE, fields=FIELDS,
    description="NeMo RL SFT `openai_format`: `messages` (arguments as JSON objects, ending with the assistant's "
                "turn) plus `tools`; load with `use_preserving_dataset: true`.",
    group=FLAVORS_GROUP, measures=("reward",), training_setting=SWITCH.setting,
)
