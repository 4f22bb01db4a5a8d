"""The init and train stages: the encoder before training, and its contrastive pretraining on Ray Train.

`init` is the init stage (the starting weights, from scratch or a base model); `stage` is the train
stage, its Ray Train driver and its training loop and step. The step's parts: `losses` (NT-Xent,
InfoNCE, MLM masking), `optim` (AdamW, the schedules), `memory_bank` (cross-batch negatives, MoCo's
queue), `moco` (the momentum key encoder), `gradcache` (batches larger than memory). `devset` selects
the best checkpoint on a dev set, `curves` writes the training curves; the exported model's card is
pipeline.model.card's.
"""
