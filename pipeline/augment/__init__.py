"""The augment stage: each objective's anchor/positive pairs, materialised epoch by epoch.

`stage` is the augment stage; what a pair is, objective by objective, is each objective's own module
(pipeline.objectives). Here: `pairs`, the row every objective writes and sentences read from documents; `spans`,
DeCLUTR's span sampler; `clear_operations` (and `clear_names`), CLEAR's sentence augmentations (deletion, span
deletion, reordering, substitution); `segment`, the rule-based sentence splitter the sentence-level objectives and
the backtranslate stage read documents with; `heldout`, the documents held out of training for
train.select_by heldout-loss. `objectives` is the former home of the pair makers, kept for its last importer.
"""
