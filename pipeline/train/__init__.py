"""The train stage: an encoder's contrastive pretraining on Ray Train, one run (and repeat) at a time.

`stage` is the train stage and its Ray Train driver (the starting weights are pipeline.init's; each objective's
pairs and recipe, pipeline.objectives'). Training, by concern: `batching` (rows to padded tensors, MLM masks,
length-sorted blocks), `shard` (each worker's micro-batches from the pairs' shards), `step` (one optimizer step:
autocast, loss scaling, accumulation, GradCache, MoCo's keys, the gather across workers), `optim` (AdamW and the
learning-rate schedules), `loop` (each worker's training loop: checkpoints, resuming, dev scores). The step's parts:
`losses` (NT-Xent, InfoNCE, MLM masking), `memory_bank` (cross-batch negatives, MoCo's queue), `moco` (the momentum
key encoder), `gradcache` (batches larger than memory). Model selection: `selection` (train.select_by), `devset`,
`scorers`, `heldout`, `splits` (no test split is a dev set). `resources` checks Ray can hold the workers, `failures`
tells the user's errors from Ray Train's failures, `resume` finds where a stopped run resumes, `curves` writes the
training curves; the exported model's card is pipeline.train.card's.
"""
