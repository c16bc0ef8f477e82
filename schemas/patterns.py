"""The patterns the contracts check and the converters apply alike, kept on the contracts'
side: ``schemas/`` imports nothing from ``trajectory_assets/``, which imports these.

Each pattern reads a one-letter-per-item *shape* string, so a contract checks a rule over a
whole conversation with one vectorized regex.
"""

# role shape (``chat/messages.role_shape``): s system, u user, a assistant, c assistant with
# tool calls, t tool message answering the latest call, x any other tool message.
# System only first; every tool message answers the assistant call before it.
ROLE_SHAPE_PATTERN = r"^s?(?:u|a|ct*)*$"
HAS_ASSISTANT_PATTERN = r"[ac]"  # at least one assistant turn

# value types (``exports/template.value_types``) of messages a chat template renders right:
# text content, tool-call arguments as JSON objects
TEMPLATE_VALUE_TYPES = r"^(?:arguments:dict,)?content:str$"

# LLaMA-Factory turn shape (``exports/llama_factory.turn_shape``): h human, g gpt,
# f function_call, o observation. Its converter's alternation rule plus a human first turn
# (a conversation opening on a tool result has no prompt).
TURN_SHAPE_PATTERN = r"^h[gf](?:[ho][gf])*$"
