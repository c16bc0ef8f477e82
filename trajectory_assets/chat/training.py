"""Which messages of a conversation are training targets: the rule ``sft.train_on`` picks.

Trainers decide this per message (Axolotl's ``message_field_training``), for the last turn
only (LLaMA-Factory's ``mask_history``, NeMo RL's ``only_unmask_final``) or for every
assistant turn (TRL's ``assistant_only_loss``). One rule, written once here, says what every
SFT export must reproduce:

- ``all_assistant``: every assistant message (the default, what the SFT exports always did);
- ``final_assistant``: the last assistant message only;
- ``after_last_user``: the assistant messages after the last user turn (the answer to the
  final request, tool calls included);
- ``not_after_failed_tool_call``: every assistant message but those right after a tool
  result that failed (``chat/messages.py: tool_result_failed``): the turns that react to an
  error, often a retry, are context, not a target.

Whatever the rule, a turn the harness wrote is never a target: a context summary
(``is_context_summary``), and any message a source lists as not the policy's (``untrained``).
Pure functions; no Dagster.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from trajectory_assets.chat.messages import is_context_summary, tool_result_failed
from trajectory_assets.config import TrainingRule  # the config names the rules this module applies

# where a source lists the messages that are not the policy's own words (ATIF's copied context
# and non-LLM steps): a ``metadata`` key holding their indices, and a quality flag of the same
# name, so a reader fetches the metadata of only the rows that have such a list
UNTRAINED_MESSAGES = "untrained_messages"



def trained_messages(messages: list[dict[str, Any]], rule: TrainingRule = "all_assistant",
                     untrained: Collection[int] = ()) -> list[bool]:
    """Per message, whether it is trained on under ``rule``; only assistant messages can be.

    >>> run = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{}]},
    ...        {"role": "tool", "content": "Error: no such file"}, {"role": "assistant", "content": "retry"},
    ...        {"role": "user", "content": "thanks"}, {"role": "assistant", "content": "bye"}]
    >>> trained_messages(run)
    [False, True, False, True, False, True]
    >>> trained_messages(run, "final_assistant")
    [False, False, False, False, False, True]
    >>> trained_messages(run, "not_after_failed_tool_call")
    [False, True, False, False, False, True]
    >>> trained_messages(run, "after_last_user", untrained={5})
    [False, False, False, False, False, False]
    """
    assistant = [m.get("role") == "assistant" and not is_context_summary(m) and i not in untrained
                 for i, m in enumerate(messages)]
    if rule == "all_assistant":
        return assistant
    if rule == "final_assistant":
        final = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
        return [a and i == final for i, a in enumerate(assistant)]
    if rule == "after_last_user":
        # a context summary written as a user turn is no request of the user's
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user" and not is_context_summary(m)),
                        default=-1)
        return [a and i > last_user for i, a in enumerate(assistant)]
    if rule == "not_after_failed_tool_call":
        trained, failed_since_last_turn = [], False
        for message, is_target in zip(messages, assistant):
            if message.get("role") == "tool":
                failed_since_last_turn |= isinstance(message.get("content"), str) and tool_result_failed(
                    message["content"])
            trained.append(is_target and not failed_since_last_turn)
            if message.get("role") in ("assistant", "user"):
                failed_since_last_turn = False
        return trained
    raise ValueError(f"unknown training rule {rule!r}")


def trains_every_assistant_message(messages: list[dict[str, Any]], trained: list[bool]) -> bool:
    """Whether ``trained`` is what a global "train on assistant turns" switch trains.

    >>> trains_every_assistant_message([{"role": "user"}, {"role": "assistant"}], [False, True])
    True
    """
    return all(flag == (m.get("role") == "assistant") for m, flag in zip(messages, trained))


def trains_final_assistant_message_only(messages: list[dict[str, Any]], trained: list[bool]) -> bool:
    """Whether ``trained`` is what a global "train on the last turn only" switch trains.

    >>> trains_final_assistant_message_only([{"role": "assistant"}, {"role": "assistant"}], [False, True])
    True
    """
    final = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    return final is not None and all(flag == (i == final) for i, flag in enumerate(trained))
