"""Command-line commands. Each module defines ``COMMANDS``: a sequence of :class:`Command`.

A module must import only the light core at import time; torch, matplotlib and sympy are
imported inside the handlers, and so are the library parts that only some runs use (the
many-devices code, calibration, measurement, charts).
"""

COMMAND_INDEX = (
    ("sheet", "sheet", "the whole worked analysis as Markdown: parts A–F, and G (the backward) with --pass"),
    ("attention", "analysis", "attention, unfused vs fused, on a device: forward, backward or both (--pass)"),
    ("sweep", "sizes", "attention's intensity and verdict over sequence lengths (the sheet's part C table)"),
    (
        "crossover",
        "sizes",
        "exact sequence length where attention turns compute-bound, or proof it never does",
    ),
    ("decode", "analysis", "one token against a KV cache: grouped-query or latent (MLA) attention"),
    ("linear", "analysis", "a linear layer over n tokens, and the n where batching makes it compute-bound"),
    ("footprint", "sizes", "bytes of the materialised score matrices vs device memory"),
    ("model", "model", "a whole model's prefill, decode or training step, operator by operator"),
    ("plan", "plan", "every parallel plan on up to N devices, and the fastest that fit (the Pareto front)"),
    (
        "serve-sim",
        "serve",
        "a deployment under traffic, scheduled as vLLM does: latency percentiles, SLO rate, cost",
    ),
    (
        "explore",
        "explore",
        "a local web page: pick a model, device, plan and load, and see the roofline move",
    ),
    ("devices", "devices", "the device catalog, or one device with every figure and its source"),
    (
        "measure",
        "measure",
        "time kernels here on the measured roofline, collectives on the link roof (needs torch)",
    ),
    (
        "trace",
        "trace",
        "any PyTorch module on the roofline: its operators on meta tensors, unfused against fused",
    ),
    ("plot", "plot", "roofline chart (PNG, SVG, PDF) with operator trajectories and measured points"),
    ("report", "plot", "self-contained HTML report: the worked analysis with its charts"),
    (
        "calibrate",
        "calibrate",
        "fit a calibration (fixed cost, efficiencies) to measured results, for forecasts",
    ),
)
"""Every command as (name, the module that defines it, its one-line summary), in the order
``attnroof --help`` lists them: the top-level parser is built from this table alone, and a
command's module is imported only when that command is parsed. A test keeps it in step with
the modules (names, summaries and order)."""

MODULE_OF_COMMAND = {name: module for name, module, _ in COMMAND_INDEX}
"""Which module defines each command."""
