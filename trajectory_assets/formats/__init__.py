"""Pure format conversion: source formats <-> canonical OpenAI Chat Completions messages."""
