"""Pandera contracts, one module per format. Checks run vectorized over flat columns;
nested message payloads are summarised into ``*_shape`` strings (see
``trajectory_assets.chat.messages``) so the role rules are one regex per column."""
