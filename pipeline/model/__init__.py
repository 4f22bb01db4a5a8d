"""The transformer encoder: found (`locate`: a model directory or a hub name), built (`transformer`), packed
(`packing`), exported and loaded (`exported`), embedding files (`embed_file`), and its model card (`card`)."""
