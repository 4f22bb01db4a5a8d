"""The filter stage: keep long documents in the wanted language, drop exact and near duplicates.

`stage` is the filter stage (the keep/drop decisions, in corpus order); `docstats` computes each
document's statistics on worker processes (token count, language, duplicate key, MinHash signature),
with `langid` (fastText's lid.176) and `neardup` (MinHash over word shingles, LSH bands).
"""
