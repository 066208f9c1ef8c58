"""Command-line commands. Each module defines ``COMMANDS``: a sequence of :class:`Command`.

A module must import only the light core at import time; torch, matplotlib and sympy are
imported inside the handlers, and so are the library parts that only some runs use (the
many-devices code, calibration, measurement, charts).
"""

COMMAND_INDEX = (
    ("sheet", "sheet", "the whole worked analysis (parts A–F) as Markdown"),
    ("attention", "analysis", "attention forward, unfused vs fused, on a device"),
    ("sweep", "sizes", "intensity and verdict over sequence lengths (the C4 table)"),
    ("crossover", "sizes", "exact sequence length where attention turns compute-bound"),
    ("decode", "analysis", "one token against a KV cache, with grouped-query attention"),
    ("linear", "analysis", "a linear layer over n tokens: the batching argument"),
    ("footprint", "sizes", "bytes of the materialised score matrices vs device memory"),
    ("model", "model", "a whole model's prefill or decode, layer by layer, on a device"),
    ("devices", "devices", "the device catalog, or one device with every figure and its source"),
    ("measure", "measure", "time real kernels here and place them on the measured roofline (needs torch)"),
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
