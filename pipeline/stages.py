"""The registry of stage modules, by stage name."""

from pipeline.augment import stage as augment
from pipeline.backtranslate import stage as backtranslate
from pipeline.corpus import stage as corpus
from pipeline.corpus import tokenizer
from pipeline.encoders import baseline
from pipeline.encoders import infersent_stage
from pipeline.evaluate import stage as evaluate
from pipeline.filter import stage as filter
from pipeline.leaderboard import stage as ranking
from pipeline.train import init
from pipeline.train import stage as train

STAGES = {m.NAME: m for m in (corpus, tokenizer, filter, backtranslate, augment, init, train, baseline,
                              infersent_stage, evaluate, ranking)}
