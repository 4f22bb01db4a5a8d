"""The baseline encoders the leaderboard ranks the trained ones against: fastText's bag of words
(`fasttext`, a stage), InferSent (`infersent`, a stage), averaged word vectors (`vectors`), the Universal Sentence
Encoder (`use`), and BERT-whitening / BERT-flow of any encoder (`postprocess`)."""
