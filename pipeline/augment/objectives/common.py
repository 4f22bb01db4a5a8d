"""Moved to pipeline.augment.pairs; kept while pipeline.evaluate.encoders, another change's file, imports it here."""

from pipeline.augment.pairs import SPREAD, epoch_seed, pair, record_drawn, sentences  # noqa: F401
