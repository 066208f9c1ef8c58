"""Which pass of an operator to cost: the forward, the backward, or both (a training step's
share of that operator), read from the operator table's slots.

    fwd       the ``forward`` slot (what every command answered before training)
    bwd       the ``backward`` slot: the gradients, with the forward's arguments
    fwd+bwd   both, one after the other: the stages of the forward, then of the backward

>>> pass_formula("linear", BWD)(1, 8192, 8192).flops == 2 * pass_formula("linear", FWD)(1, 8192, 8192).flops
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnroof.cost import Cost
from attnroof.errors import InputError
from attnroof.operators import CostFn, operator

if TYPE_CHECKING:
    from attnroof.roofline import Roof
    from attnroof.solve import Crossover

FWD, BWD, FWD_BWD = "fwd", "bwd", "fwd+bwd"
PASSES = (FWD, BWD, FWD_BWD)
WORDS = {FWD: "forward", BWD: "backward", FWD_BWD: "forward + backward"}


def pass_formula(name: str, which: str = FWD) -> CostFn:
    """The formula of operator ``name`` for pass ``which`` (one of :data:`PASSES`)."""
    op = operator(name)
    if which == FWD:
        return op.forward
    if which not in PASSES:
        raise InputError(f"unknown pass {which!r}; known: {', '.join(PASSES)}", param="pass")
    backward = op.backward
    if backward is None:
        raise InputError(f"operator {name!r} has no backward pass", param="pass")
    if which == BWD:
        return backward

    def both(*args: Any, **kwargs: Any) -> Cost:
        return op.forward(*args, **kwargs) + backward(*args, **kwargs)

    both.__doc__ = f"{name}: forward then backward."
    return both


def pass_crossover(name: str, which: str, d: int, roof: Roof, **kwargs: Any) -> Crossover:
    """Where operator ``name``'s pass ``which`` (attention, decode) at head dimension ``d``
    reaches ``roof``'s ridge, solved exactly over s by :func:`attnroof.solve.crossover`.

    >>> from attnroof.roofline import Roof
    >>> c = pass_crossover("attention", BWD, 128, Roof(1200e12, 4.0e12), fused=True)
    >>> c.s_min, c.exact          # 1285·s² / (2·9·128·s + 12·s) ≥ 300; the forward needs 595
    (541, '138960/257')
    """
    from attnroof.solve import crossover

    formula = pass_formula(name, which)

    def intensity(s: Any) -> Any:
        return formula(s, d, **kwargs).intensity

    return crossover(intensity, roof.peak_flops_per_s, roof.bandwidth_bytes_per_s)
