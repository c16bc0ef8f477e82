"""``nemo_rl_dpo``: NeMo RL's preference format (``PreferenceDataset``): ``{"context",
"completions": [{"rank", "completion"}]}`` plus ``tools``: exactly two completions, the
lower rank preferred, no ties (the preprocessor raises on equal ranks). The collate function
puts the loss on the final message of each completion only (``only_unmask_final=True``), so
each completion here ends with an assistant turn. ``load_dataset_from_path`` reads
``.parquet`` as well as ``.jsonl``; this export is Parquet so the argument objects arrive
through ``datasets`` unchanged (JSON type).

Read from NVIDIA-NeMo/RL (``docs/guides/dpo.md`` "Datasets", ``nemo_rl/data/processors.py``,
``nemo_rl/data/datasets/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from schemas.nemo_rl import NemoRlDpoSchema
from trajectory_assets.exports.columns import DPO_LINEAGE, DPO_MEASURES, FIELDS, PAIR_LINEAGE, PAIR_SCORES
from trajectory_assets.exports.export import FLAVORS_GROUP, Export, ReadBack
from trajectory_assets.exports.families.dpo import PairItem
from trajectory_assets.exports.nemo_rl_sft import require_final_assistant
from trajectory_assets.exports.template import MESSAGES_TYPE, TOOLS_TYPE, from_template, tools_from_template

CHOSEN_RANK, REJECTED_RANK = 0, 1

SCHEMA = pa.schema([
    ("context", MESSAGES_TYPE),
    ("completions", pa.list_(pa.struct([("rank", pa.int64()), ("completion", MESSAGES_TYPE)]))),
    ("tools", TOOLS_TYPE),
    *PAIR_SCORES,
    *PAIR_LINEAGE,
])


def completions(chosen: list[dict[str, Any]], rejected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The two ranked completions of a pair (chosen first, rank 0)."""
    require_final_assistant(chosen, "completion_ends_without_assistant_turn")
    require_final_assistant(rejected, "completion_ends_without_assistant_turn")
    return [{"rank": CHOSEN_RANK, "completion": chosen}, {"rank": REJECTED_RANK, "completion": rejected}]


def render(item: PairItem) -> dict[str, Any]:
    prompt, chosen, rejected = item.template_parts
    return {"context": prompt, "completions": completions(chosen, rejected), "tools": item.tools, **item.scores,
            **item.lineage}


def read_back(row: Mapping[str, Any]) -> ReadBack:
    """The lower rank is the chosen side."""
    ranked = sorted(row["completions"], key=lambda completion: completion["rank"])
    return ReadBack(messages=from_template(row["context"]), tools=tools_from_template(row.get("tools")),
                    chosen=from_template(ranked[0]["completion"]), rejected=from_template(ranked[-1]["completion"]))


EXPORT = Export(
    name="nemo_rl_dpo", family="dpo", render=render, read_back=read_back, contract=NemoRlDpoSchema,
    arrow_schema=SCHEMA,
    lineage={"context": ["messages"], "completions": ["messages", "reward"],
             **{k: v for k, v in DPO_LINEAGE.items() if k not in ("prompt", "chosen", "rejected")}},
    fields={**FIELDS, "context": "the shared prompt messages (NeMo RL's context)",
            "completions": "the two ranked completions {rank, completion}; rank 0 is preferred"},
    description="NeMo RL DPO preferences: `context` plus two `completions` `{rank, completion}` (rank 0 preferred, "
                "no ties) and `tools`.",
    group=FLAVORS_GROUP, file_format="parquet", measures=DPO_MEASURES,
)
