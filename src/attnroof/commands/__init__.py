"""Command-line commands. Each module defines ``COMMANDS``: a sequence of :class:`Command`.

A module must import only the light core at import time; torch, matplotlib and sympy are
imported inside the handlers.
"""
