"""The evaluate stage: one encoder scored on every task present in the evaluation data.

`stage` is the stage; `data` makes the evaluation data named file by file one local directory.
Similarity: `sts` (STS12-16, STS-B, SICK-R and pair files: reading and scoring) and `relatedness`
(SentEval's supervised relatedness regressor). Transfer: `transfer_data` finds and reads SentEval's
transfer tasks, `transfer` scores them with `logreg` (SentEval's PyTorch logistic regression).
`analysis`: alignment, uniformity and anisotropy of the embedding space.
"""
