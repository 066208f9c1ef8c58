"""The mixed step forecast from a calibration instead of bounded by the roofline: the same
three parts as :class:`attnroof.serve.step.StepCost`, each by the fit that forecasts it.

    token rows, LM head   :func:`attnroof.calibration.forecast.step_forecast` at a grid of token
                          (sequence) counts — every count to 64, then every 32nd — and linear
                          in between (a GEMM's forecast is close to linear between them; its
                          wave steps are blurred)
    attention             per step, each kernel on its summed FLOPs and bytes by the decode or
                          prefill fit, at the step's sequences and their mean context
    collectives           at their link-roof time: links are not calibrated

A forecast is an estimate, named as one; the roofline bound stays the step's floor.
"""

from __future__ import annotations

from typing import Any

from attnroof.calibration import Calibration
from attnroof.calibration.forecast import step_forecast
from attnroof.cost import Access, Cost, Stage
from attnroof.model.costs import Op
from attnroof.model.layers import DECODE
from attnroof.operators import ATTENTION, rule
from attnroof.row import CHUNK, LAST_TOKEN
from attnroof.serve.step import StepCost

DENSE_GRID, GRID_STRIDE = 64, 32


def _grid(top: int) -> Any:
    import numpy as np

    dense = np.arange(1, min(top, DENSE_GRID) + 1)
    sparse = np.arange(DENSE_GRID + GRID_STRIDE, top + 1, GRID_STRIDE)
    return np.unique(np.concatenate((dense, sparse, [top])))


class ForecastStepCost(StepCost):
    """A :class:`StepCost` whose kernels are forecast by ``calibration`` (``impl``: the
    attention implementation, default the fastest calibrated)."""

    def __init__(self, *args: Any, calibration: Calibration, impl: str | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        import numpy as np

        self.cal, self.impl = calibration, impl
        bound_token, bound_last = self.token_s.copy(), self.last_s.copy()
        comm_token = bound_token - self._kernel_rows(np.arange(len(bound_token)), last=False, forecast=False)
        comm_last = bound_last - self._kernel_rows(np.arange(len(bound_last)), last=True, forecast=False)
        self.token_s = self._interpolated(len(bound_token) - 1, last=False) + comm_token
        self.last_s = self._interpolated(len(bound_last) - 1, last=True) + comm_last
        attn = next((r for r in self.attention_rows), None)
        self._heads = 0 if attn is None else rule(attn).query_heads(attn)
        self._group = 1 if attn is None else attn.shape.get("group", 1)

    def _rows(self, last: bool) -> list[Any]:
        return [r for r in self.table if rule(r).kind != ATTENTION and (r.tokens == LAST_TOKEN) == last]

    def _kernel_rows(self, counts: Any, *, last: bool, forecast: bool) -> Any:
        """The rows' bound (``forecast`` False) at each count; index 0 is 0."""
        import numpy as np

        from attnroof.serve.step import _row_time

        out = np.zeros(len(counts))
        if len(counts) > 1:
            at = self.options.step(DECODE, counts[1:], 1)
            for i, row in enumerate(self.table):
                if rule(row).kind != ATTENTION and (row.tokens == LAST_TOKEN) == last:
                    out[1:] += _row_time(self.table, i, at, self.roof, self._held)
        return out

    def _forecast_rows(self, count: int, last: bool) -> float:
        at = self.options.step(DECODE, count, 1)
        ops = [
            Op(r.name, rule(r).cost(r, at), r.count, False, r.layer_kind, r.operator)
            for r in self._rows(last)
        ]
        fcs = step_forecast(
            self.cal, ops, phase=DECODE, context=1, head_dim=self.model.head_dim, impl=self.impl
        )
        return sum(f.count * f.time_s for f in fcs)

    def _interpolated(self, top: int, *, last: bool) -> Any:
        import numpy as np

        grid = _grid(top)
        times = np.array([self._forecast_rows(int(c), last) for c in grid])
        out = np.interp(np.arange(top + 1), grid, times)
        out[0] = 0.0
        return out

    def _attention(self, costs: list[tuple[Any, Cost]], phase: str, n: int, context: float) -> float:
        ops = [Op(row.name, cost, row.count, True, row.layer_kind, row.operator) for row, cost in costs]
        shape = {"batch": n, "heads": self._heads, "group": self._group}
        fcs = step_forecast(
            self.cal, ops, phase=phase, context=max(1, round(context)), head_dim=self.model.head_dim,
            impl=self.impl, decode_shape=shape,
        )  # fmt: skip
        return sum(f.count * f.time_s for f in fcs)

    @staticmethod
    def _summed(stages: Any) -> Cost:
        return Cost(tuple(Stage(name, float(f), (Access("step", float(b)),)) for name, f, b in stages))

    def decode_attention_s(self, contexts: Any, steps: int = 0, tokens: int | None = None) -> Any:
        """A forecast, by the fits: ``tokens`` (the step's, for the bound's cache rule) is not asked."""
        import numpy as np

        if len(contexts) == 0:
            return 0.0
        if steps:
            return np.array([self.decode_attention_s(contexts + j) for j in range(steps)])
        at = self.options.step(DECODE, 1, contexts)
        costs = []
        for row in self.attention_rows:
            c = rule(row).cost(row, at)
            costs.append((row, self._summed((s.name, s.flops.sum(), s.bytes.sum()) for s in c)))
        return self._attention(costs, "decode", len(contexts), float(contexts.mean()))

    def chunk_attention_s(self, queries: Any, contexts: Any, tokens: int | None = None) -> float:
        if len(queries) == 0:
            return 0.0
        at = self.options.step(CHUNK, 1, contexts, queries)
        costs = []
        for row in self.attention_rows:
            c = rule(row).cost(row, at)
            costs.append((row, self._summed((s.name, s.flops.sum(), s.bytes.sum()) for s in c)))
        return self._attention(costs, "prefill", len(queries), float(contexts.mean()))
