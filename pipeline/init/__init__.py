"""The init stage: the encoder before training, from scratch (seeded) or the base model."""
