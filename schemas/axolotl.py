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
    def columns(cls, records):
        conversations = [record["messages"] for record in records]
        return {**super().columns(records),
                # an assistant turn with calls is one
                "trained_roles": [role_shape([message for message in messages if message.get("train") is True])
                                  .replace("c", "a") for messages in conversations],
                "every_message_flagged": [all(isinstance(message.get("train"), bool) for message in messages)
                                          for messages in conversations]}

    class Config:
        strict = True
