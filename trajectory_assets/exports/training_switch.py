"""How an SFT trainer form reproduces ``sft.train_on`` (``chat/training.py``): the setting its
dataset card names, and the rows that setting cannot reproduce.

Axolotl reads a training flag per message, so it writes the rule itself. TRL, NeMo RL and
LLaMA-Factory have one switch for the whole dataset: train every assistant message, or (NeMo
RL's ``only_unmask_final``, LLaMA-Factory's ``mask_history``) the final one only. A row whose
targets under the rule are not what the switch trains (an earlier turn the rule leaves out, a
turn the harness wrote) would be trained wrongly, so it is left out, counted as
``needs_per_message_mask``: a dataset the switch reproduces exactly, never one it silently
over-trains.
"""

from __future__ import annotations

from dataclasses import dataclass

from trajectory_assets.exports.families.sft import SftItem
from trajectory_assets.exports.unrepresentable import Unrepresentable


@dataclass(frozen=True)
class GlobalSwitch:
    trainer: str
    every_assistant: str  # the setting that trains every assistant message
    final_only: str | None = None  # the setting that trains the final assistant message only, if any

    def uses_final_only(self, rule: str) -> bool:
        return rule == "final_assistant" and self.final_only is not None

    def setting(self, rule: str) -> str:
        """What the dataset card says: the setting, and what it cannot express."""
        chosen = self.final_only if self.uses_final_only(rule) else self.every_assistant
        return (f"`sft.train_on: {rule}`. {self.trainer} has one switch for the whole dataset; {chosen} trains "
                "exactly the messages the rule picks in every row written here. A row where the rule picks other "
                "messages (an earlier turn it leaves out, a turn the harness wrote) was left out, counted as "
                "`needs_per_message_mask`; the `axolotl` export keeps such rows with a flag per message.")

    def require(self, item: SftItem) -> None:
        """Raises ``needs_per_message_mask`` for a row the switch would train differently."""
        reproduced = (item.trains_final_assistant_message_only if self.uses_final_only(item.train_on)
                      else item.trains_every_assistant_message)
        if not reproduced:
            raise Unrepresentable("needs_per_message_mask")
