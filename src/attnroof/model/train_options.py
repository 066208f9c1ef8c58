"""The choices a training step offers, apart from the code that costs them, so that the command
line can list them without importing the training model."""

from __future__ import annotations

NONE, SELECTIVE, FULL = "none", "selective", "full"
RECOMPUTE = (NONE, SELECTIVE, FULL)

OPTIMIZER_STATES = {"adamw": 2, "sgd": 1}
"""States kept per parameter: AdamW's first and second moments; SGD's momentum."""
