"""Every encoder the pipeline trains or scores, and the baseline and infersent stages that train baselines.

`transformer` is the trained encoder (a masked-LM transformer, pooled) and its export, `packing` its
padding-free attention over packed rows; `exported` loads an export and embeds sentences; `embed_file`
embeds a text file into Parquet (`cpipe embed`); `kinds` builds any kind of encoder the evaluate stage
scores from a small spec. Baselines: `baseline` is the
baseline stage (fastText vectors on the corpus) and `bow` their averaged bag of words; `vectors`
averages pretrained or random word vectors; `infersent_stage` is the infersent stage, training
`infersent`'s BiLSTM on NLI; `postprocess` whitens or flow-transforms any encoder's embeddings.
"""
