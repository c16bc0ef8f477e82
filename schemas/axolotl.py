"""Contract of the Axolotl rows: TRL's conversational SFT rows ``{"messages", "tools"}`` whose
every message carries ``train`` (Axolotl's ``message_field_training``).

Beyond the TRL rules it checks ``trained_roles``: the roles of the messages flagged ``train:
true``, one letter each (``schemas/shapes.py``), which must be assistant turns only, and at
least one: a row that trains nothing, or trains a user's or a tool's words, is a wrong row.
"""

import pandera.pandas as pandera
from pandera.typing import Series

from schemas.shapes import role_shape
from schemas.trl import TrlSftSchema
from schemas.validation import ArrowString

TRAINS_ASSISTANT_TURNS_ONLY = r"^a+$"


class AxolotlSchema(TrlSftSchema):
    trained_roles: Series[ArrowString] = pandera.Field(str_matches=TRAINS_ASSISTANT_TURNS_ONLY)
    every_message_flagged: Series[bool] = pandera.Field(eq=True)

    @classmethod
    def row(cls, record):
        messages = record["messages"]
        trained = [message for message in messages if message.get("train") is True]
        return {**super().row(record),
                "trained_roles": role_shape(trained).replace("c", "a"),  # an assistant turn with calls is one
                "every_message_flagged": all(isinstance(message.get("train"), bool) for message in messages)}

    class Config:
        strict = True
