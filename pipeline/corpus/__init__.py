"""The corpus and tokenizer stages: documents read from every source, and the tokenizer trained on them.

`stage` is the corpus stage (sources into documents: doc_id, source, title_or_url, text); `sources`
says where documents come from, with one reader per format (`openwebtext`, `wikipedia`, `wikitext`)
and the local files; `download` fetches remote sources resumably and verified, `credentials` keeps
passwords in URLs out of logs and fingerprints. `tokenizer` is the tokenizer stage (a byte-level BPE
trained on the corpus, or the base model's), and the tokenizer helpers every later stage uses.
"""
