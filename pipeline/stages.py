"""The registry of stage modules, by stage name."""

from pipeline import (augment, backtranslate, baseline, corpus, evaluate, filter, infersent_stage, init, ranking,
                      tokenizer, train)

STAGES = {m.NAME: m for m in (corpus, tokenizer, filter, backtranslate, augment, init, train, baseline,
                              infersent_stage, evaluate, ranking)}
