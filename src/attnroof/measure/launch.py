"""A rank started by a launcher: ``torchrun`` (or any that sets the ``env://`` variables) starts
one process per rank on each node, and each finds its place in the group from its environment.

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint node0:29500 \\
        -m attnroof measure collectives --device h100 --link scale-out -o coll.jsonl
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from attnroof.errors import InputError

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""What ``torchrun`` sets for each process it starts, and ``env://`` reads."""


@dataclass(frozen=True, slots=True)
class Launch:
    """This process's place in a group a launcher (``torchrun``) started."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    master: str

    @property
    def nodes(self) -> int:
        """Nodes in the group (torchrun starts ``--nproc-per-node`` ranks on each)."""
        return max(1, self.world // self.local_world)


def launched(environ: Mapping[str, str] | None = None) -> Launch | None:
    """The launcher's variables when this process is one rank of a group (``RANK`` and
    ``WORLD_SIZE`` set), else None; one missing or not a number is an :class:`InputError`.

    >>> launched({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
    ...           "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}).nodes
    2
    """
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    missing = [v for v in LAUNCH_VARS if not env.get(v)]
    if missing:
        raise InputError(
            f"RANK and WORLD_SIZE are set but not {', '.join(missing)}: start the ranks with torchrun "
            "(it sets them all), or unset RANK and WORLD_SIZE to let attnroof start its own"
        )
    numbers = {}
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
        text = env.get(v, env["WORLD_SIZE"] if v == "LOCAL_WORLD_SIZE" else "")
        if not text.isdigit():
            raise InputError(f"{v}={text!r}: not a whole number (what torchrun sets)")
        numbers[v] = int(text)
    if not 0 <= numbers["RANK"] < numbers["WORLD_SIZE"] or numbers["WORLD_SIZE"] < 2:
        raise InputError(
            f"RANK={numbers['RANK']}, WORLD_SIZE={numbers['WORLD_SIZE']}: a collective needs 2 ranks or "
            "more, each rank below WORLD_SIZE"
        )
    return Launch(
        numbers["RANK"],
        numbers["WORLD_SIZE"],
        numbers["LOCAL_RANK"],
        numbers["LOCAL_WORLD_SIZE"],
        f"{env['MASTER_ADDR']}:{numbers['MASTER_PORT']}",
    )
