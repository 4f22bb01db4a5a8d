"""The augment stage: each objective's anchor/positive pairs, materialised epoch by epoch.

`stage` is the augment stage; `objectives` holds one module per objective (DeCLUTR, CERT, SimCSE,
CLEAR), each saying what a pair is; `spans` is DeCLUTR's span sampler, `clear_operations` CLEAR's
sentence augmentations (deletion, span deletion, reordering, substitution), and `segment` the rule-based
sentence splitter the sentence-level objectives and the backtranslate stage read documents with.
"""
