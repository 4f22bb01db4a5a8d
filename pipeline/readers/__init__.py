"""The files' formats, read: STS, SentEval transfer, NLI and BEIR; and the names they and the kinds go by."""
