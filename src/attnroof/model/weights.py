"""How a model's weights are counted, grouped by format: the checkpoint's own on the rows its
``quantization_config`` converts (:mod:`attnroof.model.quantization`), the step's weight dtype
on the rest; what the model's JSON, text and notes show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnroof.formats import WeightFormat
from attnroof.model.layers import OpInstance, Precision, layer_table
from attnroof.model.spec import ModelConfig

ROWS_BARE = 2
"""A group of more rows is written as their number with every name in parentheses, so that the
names' commas stay apart from those of the sentence around them."""


@dataclass(frozen=True, slots=True)
class WeightGroup:
    """The rows whose weights share a format: ``format`` None for those at the step's weight
    dtype (``--weight-dtype``, default ``--dtype``)."""

    format: WeightFormat | None
    itemsize: float
    params: int
    bytes: float
    rows: tuple[str, ...]

    @property
    def rows_text(self) -> str:
        """Every row by name: bare up to :data:`ROWS_BARE` of them, else their number and the
        names in parentheses (the layer table's rows have no order a range could stand for).

        >>> WeightGroup(None, 2, 0, 0, ("router", "LM head", "embedding")).rows_text
        '3 rows (router, LM head and embedding)'
        """
        names = self.rows[0] if len(self.rows) == 1 else f"{', '.join(self.rows[:-1])} and {self.rows[-1]}"
        return names if len(self.rows) <= ROWS_BARE else f"{len(self.rows)} rows ({names})"

    def to_json(self, dtype_name: str) -> dict[str, Any]:
        name = dtype_name if self.format is None else self.format.name
        return {
            "format": name,
            "bits_per_weight": self.itemsize * 8,
            "params": self.params,
            "bytes": self.bytes,
            "rows": list(self.rows),
        }


def weights_by_format(model: ModelConfig, prec: Precision) -> list[WeightGroup]:
    """The weights grouped by the format they are counted in, largest first.

    >>> from attnroof.model.config import builtin
    >>> [(g.format and g.format.name, g.rows) for g in weights_by_format(builtin("gpt-oss-120b"), Precision())]
    [('mxfp4', ('expert gate/up', 'expert down')), (None, ('embedding', 'attention norm', 'QKV projection', 'attention (window 128)', 'output projection', 'MLP norm', 'router', 'attention (global)', 'final norm', 'LM head'))]
    """
    groups: dict[WeightFormat | None, list[OpInstance]] = {}
    for i in layer_table(model):
        if i.params:
            groups.setdefault(i.weight_format if prec.stored else None, []).append(i)
    out = [
        WeightGroup(
            fmt,
            prec.weight_bytes(rows[0]),
            sum(i.count * i.params for i in rows),
            sum(i.count * i.params * prec.weight_bytes(i) for i in rows),
            tuple(i.name for i in rows),
        )
        for fmt, rows in groups.items()
    ]
    return sorted(out, key=lambda g: -g.bytes)


def weights_json(
    model: ModelConfig, prec: Precision, dtype_name: str, *, always: bool = False
) -> dict[str, Any]:
    """``weights``: whether they are counted as stored, their bytes, and each format's rows, for a
    checkpoint with a ``quantization_config`` (``always``: for any model); else nothing."""
    if model.quantization is None and not always:
        return {}
    groups = weights_by_format(model, prec)
    formats = [g.to_json(dtype_name) for g in groups]
    return {"weights": {"as_stored": prec.stored, "bytes": sum(g.bytes for g in groups), "formats": formats}}


def stored_rows(model: ModelConfig, prec: Precision) -> tuple[tuple[str, str], ...]:
    """(format, rows) of the weights counted in the checkpoint's own format (none when
    ``--weight-dtype`` counts every row at one dtype)."""
    if model.quantization is None or not prec.stored:
        return ()
    groups = weights_by_format(model, prec)
    return tuple((g.format.name, g.rows_text) for g in groups if g.format is not None)
