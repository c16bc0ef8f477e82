"""What the exports of a family share: column groups of their Arrow schemas, their lineage,
and what the fields every export may have hold (a field means the same in every export that
has it)."""

import pyarrow as pa

from trajectory_assets.io.arrow_rows import JSON

LINEAGE = [("trajectory_id", pa.string()), ("task_key", pa.string())]
# the columns every form of a family's rows shares beside its messages (trainer flavors too)
SFT_COLUMNS = [("reward", pa.float64()), ("task_type", pa.string()), *LINEAGE]
PAIR_SCORES = [("quality_difference", pa.float64()), ("reward_chosen", pa.float64()), ("reward_rejected", pa.float64()),
               ("component_margins", JSON)]
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
    ("reward_components", JSON),
]
SHAREGPT_TURNS = pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))

# export field -> the validated_trajectories columns it is made from
SFT_LINEAGE = {"messages": ["messages"], "tools": ["tools"], "reward": ["reward"], "task_type": ["task_type"],
               "trajectory_id": ["trajectory_id"], "task_key": ["task_key"]}
DPO_LINEAGE = {"prompt": ["messages"], "chosen": ["messages"], "rejected": ["messages"], "tools": ["tools"],
               "reward_chosen": ["reward"], "reward_rejected": ["reward"], "quality_difference": ["reward"],
               "component_margins": ["reward_components"],
               "chosen_id": ["trajectory_id"], "rejected_id": ["trajectory_id"], "task_key": ["task_key"]}
TASK_LINEAGE = {"task_key": ["task_key"], "trajectory_ids": ["trajectory_id"], "mean_reward": ["reward"],
                "pass_rate": ["reward"], "agent_ref": ["agent_ref", "agent_name"],
                "reward_components": ["reward_components"]}
DPO_MEASURES = ("quality_difference", "reward_chosen", "reward_rejected")

FIELDS = {
    "messages": "the whole conversation: system, user, assistant (with reasoning_content and tool_calls) and tool "
                "messages",
    "tools": "the tools offered to the model, as Chat Completions tool objects (null: none)",
    "reward": "the rollout's reward (null: none recorded)",
    "task_type": "the task's type or environment, if recorded",
    "trajectory_id": "the rollout's id in validated_trajectories (SHA-256 of its raw line)",
    "task_key": "the task the rows were grouped by (validated_trajectories.task_key)",
    "prompt": "the prompt messages: system and user turns up to the model's first turn",
    "chosen": "the preferred completion: the messages after the shared prompt",
    "rejected": "the other completion, with a lower reward",
    "quality_difference": "reward_chosen - reward_rejected (> 0)",
    "reward_chosen": "the chosen rollout's reward",
    "reward_rejected": "the rejected rollout's reward",
    "chosen_id": "the chosen rollout's trajectory_id",
    "rejected_id": "the rejected rollout's trajectory_id",
    "pairing": "the pairing rule that made the pair (dpo.pairing)",
    "component_margins": "per objective of a multi-objective reward: the chosen rollout's score minus the rejected "
                         "one's, over the objectives both were scored on (null: no reward_components)",
    "conversations": "the conversation as ShareGPT turns {from, value}",
    "agent_ref": "the NeMo Gym agent that runs the task {type, name}",
    "trajectory_ids": "the task's rollouts in validated_trajectories",
    "num_rollouts": "how many rollouts of the task were collected",
    "mean_reward": "the mean reward of the task's rollouts",
    "reward_std": "the standard deviation of the task's rewards",
    "pass_rate": "the share of the task's rollouts at or above grpo.pass_threshold",
    "zero_variance": "whether every rollout of the task got the same reward",
    "reward_components": "per objective of a multi-objective reward: {count, mean, std} over the task's rollouts "
                         "scored on it (null: no reward_components)",
    "agent_name": "the agent that ran the task",
}
