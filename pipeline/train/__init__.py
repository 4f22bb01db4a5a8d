"""The init and train stages: the encoder before training, and its contrastive pretraining on Ray Train.

`init` is the init stage (the starting weights, from scratch or a base model); `stage` is the train
stage and its Ray Train driver. Training, by concern: `batching` (rows to padded tensors, MLM masks,
length-sorted blocks), `step` (one optimizer step: autocast, loss scaling, accumulation, GradCache, MoCo's
keys, the gather across workers), `optim` (AdamW and the learning-rate schedules), `loop` (each worker's
training loop: checkpoints, resuming, dev scores). The step's parts: `losses` (NT-Xent, InfoNCE, MLM
masking), `memory_bank` (cross-batch negatives, MoCo's queue), `moco` (the momentum key encoder),
`gradcache` (batches larger than memory). `devset` selects the best checkpoint on a dev set, `curves`
writes the training curves; the exported model's card is pipeline.model.card's.
"""
