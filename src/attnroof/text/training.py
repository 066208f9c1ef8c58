"""Training in words: an operator's backward stages on the roof, the crossover of a pass, and a
whole model's training step (FLOPs by pass, time, MFU, and the memory it must hold)."""

from __future__ import annotations

from typing import Any

from attnroof.cost import Cost
from attnroof.passes import WORDS
from attnroof.roofline import Roof, place
from attnroof.text import render
from attnroof.text.render import table


def stages_placed_text(cost: Cost, roof: Roof) -> str:
    """Each kernel of ``cost`` placed on ``roof`` on its own: the backward's GEMMs and passes
    each have their own intensity."""
    rows = [render.placement_row(st.name, place((st.flops, st.bytes), roof)) for st in cost]
    return table(render.PLACEMENT_HEADERS, rows)


def linear_pass_text(which: str, forward_text: str, cost: Cost, roof: Roof) -> str:
    """The linear command's text for a backward or combined pass: its lines, the pass named in
    the title, and each GEMM on the roof."""
    first, *rest = forward_text.splitlines()
    return "\n".join([f"{first} ({WORDS[which]})", *rest, "", "kernels:", stages_placed_text(cost, roof)])


def forward_crossover_line(forward: dict[str, Any]) -> str:
    """How the forward pass's crossovers compare: ``forward: unfused never, fused from s = 595``."""
    parts = [f"{label} {'never' if c.never else f'from s = {c.s_min}'}" for label, c in forward.items()]
    return "the forward pass, for comparison: " + ", ".join(parts)
