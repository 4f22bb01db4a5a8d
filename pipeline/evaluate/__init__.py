"""The evaluate stage: one encoder scored on every task present in the evaluation data.

`stage` is the stage; `data` makes the evaluation data named file by file one local directory; `encoders` builds
every kind of encoder it scores, `readouts` how one is read (mean or [CLS] pooling), `given` names the rows of
`cpipe evaluate --model`. Similarity: pipeline.readers.sts reads STS12-16, STS-B, SICK-R and STS pair files, `sts`
scores them, `relatedness` is SentEval's supervised relatedness regressor. Transfer: pipeline.readers.transfer finds
and reads SentEval's transfer tasks, `transfer` scores them with `logreg` (SentEval's PyTorch logistic regression).
Each is a kind, as are the user's own task kinds (`retrieval`, `clustering`, `pairclass`, `reranking`) and the
`analysis`: each one module ending in its declaration (`kind`), listed one line each in pipeline.readers.registry,
found and loaded by `kinds`; `column` is a leaderboard
column as a typed object. `analysis`: alignment,
uniformity and anisotropy. `items` keeps each test item for the leaderboard's bootstrap, `mteb_results` writes
MTEB's result files; pipeline.readers.names holds the tasks' and columns' names.
"""
