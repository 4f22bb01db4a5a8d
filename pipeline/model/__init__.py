"""The transformer encoder: found (`locate`: a model directory or a hub name), built (`transformer`), packed
(`packing`), exported and loaded (`exported`; a kept head as Dense modules: `head`), embedding files
(`embed_file`), its model card (`card`), and out of the project: ONNX (`onnx_export`) and the Hub (`hub_card`)."""
