"""The augment stage: each objective's anchor/positive pairs, materialised epoch by epoch.

`stage` is the augment stage; what a pair is, objective by objective, is each objective's own module
(pipeline.objectives, with the row they write, DeCLUTR's spans and CLEAR's operations). Here: `heldout`, the
documents held out of training for train.select_by heldout-loss. Sentences are read from documents by
pipeline.corpus.sentences (split by pipeline.corpus.segment).
"""
