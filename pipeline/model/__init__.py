"""The transformer encoder: built (`transformer`), packed (`packing`), exported and loaded (`exported`),
embedding files (`embed_file`), and its model card (`card`)."""
