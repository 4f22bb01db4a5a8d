"""Moved: each objective is one module of pipeline.objectives; `common` re-exports pipeline.augment.pairs for its
last importer."""
