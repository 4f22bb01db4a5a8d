"""The tokenizer stage (`stage`) and the helpers every later stage loads and uses its tokenizer with (`loading`)."""
