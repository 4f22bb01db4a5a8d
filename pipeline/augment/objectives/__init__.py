"""PAIR_MAKERS: the module making each objective's pairs, by objective name. Each module turns its source
dataset into anchor/positive pairs for the augment stage.

A module exposes NAME, INPUTS ({input name: the stage whose dataset it reads}),
SETTINGS (the `augment` config keys it uses, beyond epochs/seed/rows_per_shard)
and `pairs(config, inputs, tokenizer, out)`; one that reads files rather than datasets
exposes `files(cfg)`, which names them (with their snapshot) in the stage config. Every
objective's pairs share one schema, so the train stage runs them all with one step.
"""

from pipeline.objectives import cert, clear, declutr, simcse, simcse_sup, tsdae

PAIR_MAKERS = {m.NAME: m for m in (declutr, cert, simcse, clear, tsdae, simcse_sup)}
