"""The corpus stage: documents read from every source.

`stage` is the corpus stage (sources into documents: doc_id, source, title_or_url, text); `sources`
says where documents come from, with one reader per format (`openwebtext`, `wikipedia`, `wikitext`)
and the local files; `download` fetches remote sources resumably and verified, `credentials` keeps
passwords in URLs out of logs and fingerprints. `segment` splits documents into sentences; `sentences` reads a
documents dataset's sentences as the sentence objectives, back-translation and post-processing draw them. The
tokenizer trained on the corpus is pipeline.tokenizer's.
"""
