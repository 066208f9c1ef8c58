"""The choices a training step offers, apart from the code that costs them, so that the command
line can list them without importing the training model."""

from __future__ import annotations

TRAIN = "train"
"""The training step's phase name (beside prefill and decode)."""

FORWARD, BACKWARD, RECOMPUTE_PASS = "forward", "backward", "recompute"
PASS_NAMES = (FORWARD, BACKWARD, RECOMPUTE_PASS)
"""The passes of a training step."""

NONE, SELECTIVE, FULL = "none", "selective", "full"
RECOMPUTE = (NONE, SELECTIVE, FULL)

OPTIMIZER_STATES = {"adamw": 2, "sgd": 1}
"""States kept per parameter: AdamW's first and second moments; SGD's momentum."""

EVERY_PASS, EVERY_MICROBATCH, ONCE_A_STEP = "pass", "microbatch", "step"
WEIGHT_GATHERS = (EVERY_PASS, EVERY_MICROBATCH, ONCE_A_STEP)
"""When ZeRO 3 all-gathers the weights (:mod:`attnroof.model.sharding`): before each pass of
every micro-batch (FSDP's ``reshard_after_forward=True``), once a micro-batch and kept to its
backward (``reshard_after_forward=False``), or once a step and kept through every micro-batch."""
GRAD_REDUCES = (EVERY_MICROBATCH, ONCE_A_STEP)
"""When ZeRO 2 and 3 reduce-scatter the gradients: after every micro-batch's backward, or once a
step, accumulated unsharded until the last."""

MEMORY_HEADROOM = 0.10
"""The share of each device's memory a plan leaves free by default: what a run needs beyond its
weights, gradients, optimizer state and activations — CUDA's context, NCCL's buffers and the
caching allocator's fragmentation, none of which attnroof counts. A tenth, the share vLLM leaves
by default (``gpu_memory_utilization`` 0.9); without it the fastest plan of Llama-3.1-70B on 256
H100s held 98.8% of a device."""
