"""The corpus stage: documents read from every source.

`stage` is the corpus stage (sources into documents: doc_id, source, title_or_url, text); `sources`
says where documents come from, with one reader per format (`openwebtext`, `wikipedia`, `wikitext`)
and the local files; `download` fetches remote sources resumably and verified, `credentials` keeps
passwords in URLs out of logs and fingerprints. The tokenizer trained on the corpus is pipeline.tokenizer's.
"""
