"""The decontaminate stage: evaluation text kept out of the training documents.

`evalsets` gathers every sentence the run will score, by task; `ngrams` indexes them as hashed word n-grams;
`match` finds those in corpus documents (and cuts them out, for mode mask); `stage` writes the documents kept.
"""
