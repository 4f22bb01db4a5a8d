"""The fastText baseline: its stage (skipgram vectors on the filtered corpus) and its bag-of-words encoder."""
