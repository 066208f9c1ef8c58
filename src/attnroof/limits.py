"""What one run may hold in memory: a simulation or a grid whose arrays would not fit is refused
before it starts, in one line that names the bytes it would need and the bytes there are.

The bytes a run needs are estimated beside the arrays that take them (a serving simulation's per
request, per token and per step: :func:`attnroof.serve.run.simulation_bytes`; a grid's per point:
:func:`attnroof.model.grid.grid_bytes`). The bytes there are: the memory the system has free
(``MemAvailable`` in ``/proc/meminfo``, what it can hand out without swapping; elsewhere half the
physical memory), or what :data:`BUDGET_ENV` says, for a user who wants a smaller ceiling (or a
test that wants a fixed one).

>>> require_memory("a grid of 4 points", 8e3, "fewer values", budget=1e9)   # fits: nothing said
>>> require_memory("a grid of 10^9 points", 2e12, "fewer values", budget=16e9)
Traceback (most recent call last):
    ...
attnroof.errors.InputError: a grid of 10^9 points would need about 2 TB of memory, and 16 GB is free: fewer values
"""

from __future__ import annotations

import os
from pathlib import Path

from attnroof.errors import InputError

BUDGET_ENV = "ATTNROOF_MEMORY_BUDGET"
"""An environment variable that sets the bytes a run may take (``8G``, ``500M``, ``2e9``) in
place of the memory free."""


def memory_budget_bytes() -> float:
    """The bytes one run may take: :data:`BUDGET_ENV` where set, else the memory free now."""
    from attnroof.units import parse_quantity

    given = os.environ.get(BUDGET_ENV, "").strip()
    if given:
        try:
            value = parse_quantity(given.removesuffix("B"))
        except ValueError:
            value = 0.0
        if not value > 0:
            raise InputError(f"{BUDGET_ENV}={given!r} is not a number of bytes (such as 8G or 2e9)")
        return value
    return _free_bytes()


def _free_bytes() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024  # kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / 2
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): no refusal
        return float("inf")


def require_memory(what: str, need_bytes: float, advice: str, *, budget: float | None = None) -> None:
    """:class:`InputError` unless ``need_bytes`` fit in ``budget`` (default
    :func:`memory_budget_bytes`): ``"<what> would need about N of memory, and M is free: <advice>"``."""
    from attnroof.units import si

    have = memory_budget_bytes() if budget is None else budget
    if need_bytes <= have:
        return
    source = f" ({BUDGET_ENV})" if budget is None and os.environ.get(BUDGET_ENV, "").strip() else ""
    raise InputError(
        f"{what} would need about {si(need_bytes, 'B', 2)} of memory, and {si(have, 'B', 2)} is free"
        f"{source}: {advice}"
    )
