"""The seed document's own recipe in plain Python (stdlib json), as users write it today.

SFT = {"messages": output}; DPO by grouping rollouts per prompt and pairing two of them;
GRPO rows {"responses_create_params", "agent_ref"}. No validation, no quarantine, no
conversion of Responses items to chat messages: the baseline the pipeline is measured
against. Usage: python -m bench.recipe SOURCE_DIR OUT_DIR
"""

import collections
import json
import sys
from pathlib import Path


def main(source: str, out: str) -> None:
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = collections.defaultdict(list)
    with open(out_dir / "sft.jsonl", "w") as sft, open(out_dir / "grpo.jsonl", "w") as grpo:
        for path in sorted(Path(source).rglob("*.jsonl")):
            with open(path) as handle:
                for line in handle:
                    rollout = json.loads(line)
                    output = rollout.get("output") or rollout["response"]["output"]
                    sft.write(json.dumps({"messages": output}) + "\n")
                    prompt = rollout["responses_create_params"]["input"]
                    groups[json.dumps(prompt)].append(rollout)
                    grpo.write(json.dumps({"responses_create_params": rollout["responses_create_params"],
                                           "agent_ref": rollout.get("agent_ref")}) + "\n")
    with open(out_dir / "dpo.jsonl", "w") as dpo:
        for rollouts in groups.values():
            if len(rollouts) < 2:
                continue
            rollout_1, rollout_2 = rollouts[:2]
            out_1 = rollout_1.get("output") or rollout_1["response"]["output"]
            out_2 = rollout_2.get("output") or rollout_2["response"]["output"]
            if rollout_1["reward"] > rollout_2["reward"]:
                chosen, rejected = out_1, out_2
            else:
                chosen, rejected = out_2, out_1
            dpo.write(json.dumps({"prompt": rollout_1["responses_create_params"]["input"],
                                  "chosen": chosen, "rejected": rejected}) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
