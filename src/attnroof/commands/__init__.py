"""Command-line commands. Each module defines ``COMMANDS``: a sequence of :class:`Command`.

A module must import only the light core at import time; torch, matplotlib and sympy are
imported inside the handlers.
"""

MODULE_OF_COMMAND = {
    "sheet": "sheet",
    "attention": "analysis",
    "decode": "analysis",
    "linear": "analysis",
    "sweep": "sizes",
    "crossover": "sizes",
    "footprint": "sizes",
    "devices": "devices",
    "measure": "measure",
    "plot": "plot",
    "report": "plot",
    "model": "model",
    "calibrate": "calibrate",
}
"""Which module defines each command, so that running one imports only its module (the full
parser, for ``--help`` and a mistyped command, imports them all). A test keeps it in step."""
