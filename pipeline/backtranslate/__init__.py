"""The backtranslate stage (CERT): every sentence of the filtered documents to each pivot language and back.

`stage` is the stage (chunked, resumable); `translate` holds the machine-translation backends
(transformers' FSMT and Marian models, or fairseq's originals).
"""
