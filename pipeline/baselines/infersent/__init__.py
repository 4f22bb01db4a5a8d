"""The InferSent baseline: its stage (training on NLI pairs) and its BiLSTM-max encoder."""
