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
