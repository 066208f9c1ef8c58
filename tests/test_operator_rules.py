"""An operator is one entry: a toy rotary embedding (``toy rotary``, beside attnroof's own
``rotary`` entry, which every RoPE model's layer table holds), registered here and nowhere else,
runs through the whole model — costed forward and backward, cut under TP, saved for the backward pass,
forecast, listed in ``--json`` — and an entry that lacks a rule is refused in one line naming it.

The toy: rotary position embedding on each token's queries and keys (q width + kv width
elements), three FLOPs per element (two multiplies and an add of the rotation), reading the
elements and writing them once; its backward the same rotation transposed. Split by heads.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from attnroof import cli, operators
from attnroof.cost import Access, Cost, Stage
from attnroof.model import layers, rows
from attnroof.model.config import builtin
from attnroof.model.costs import model_ops
from attnroof.model.parallel import Shard
from attnroof.model.training import train_ops
from attnroof.model.training_memory import TrainPrecision, activation_bytes
from attnroof.operators import MEMORY_PASS, Call, cut_width, saves_input
from attnroof.row import HEADS, LAYER, OpInstance

ROTARY_FLOPS_PER_ELEMENT = 3
TOY = "toy rotary"
LLAMA = builtin("llama-3.1-8b")
WIDTH = LLAMA.q_width + LLAMA.kv_width  # 4096 + 1024 = 5120 elements per token


def rotary(n: Any, width: Any, *, itemsize: Any = 2, name: str = TOY) -> Cost:
    """Rotate each token's q and k: three FLOPs per element, read once, written once."""
    x = n * width * itemsize
    return Cost((Stage(name, ROTARY_FLOPS_PER_ELEMENT * n * width, (Access("X", x),), (Access("Y", x),)),))


def rotary_backward(n: Any, width: Any, *, itemsize: Any = 2, name: str = TOY) -> Cost:
    return rotary(n, width, itemsize=itemsize, name=f"{name} backward")


def bind_rotary(i: OpInstance, st: Any) -> Call:
    return Call((st.tokens(), i.shape["width"]), {"itemsize": st.prec.itemsize, "name": i.name})


FULL_ENTRY = dict(
    kind=MEMORY_PASS,
    backward=rotary_backward,
    bind=bind_rotary,
    cuts={HEADS: cut_width("width")},
    saved=saves_input("width"),
)


@contextlib.contextmanager
def toy_model(monkeypatch: pytest.MonkeyPatch, **entry: Any):
    """Register the toy operator with ``entry`` and put a row of it after each layer's QKV projection."""
    operators.register(TOY, rotary, **entry)
    real = rows.layer_rows

    def with_rotary(model, *a, **kw):
        out = real(model, *a, **kw)
        at = next(k for k, r in enumerate(out) if r.name == "QKV projection") + 1
        row = OpInstance(TOY, TOY, 1, LAYER, {"width": model.q_width + model.kv_width}, split=HEADS)
        return [*out[:at], row, *out[at:]]

    monkeypatch.setattr(rows, "layer_rows", with_rotary)
    layers._layer_table.cache_clear()
    layers._device_table.cache_clear()
    try:
        yield
    finally:
        operators.unregister(TOY)
        monkeypatch.undo()
        layers._layer_table.cache_clear()
        layers._device_table.cache_clear()


def _main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_one_entry_runs_through_the_whole_model(monkeypatch):
    with toy_model(monkeypatch, **FULL_ENTRY):
        # forward, one device: decode of 16 sequences is 16 tokens through 5120 elements, 32 layers
        (op,) = [o for o in model_ops(LLAMA, "decode", 16, 8192) if o.operator == TOY]
        assert op.count == 32 and op.cost.flops == 3 * 16 * 5120
        assert op.cost.bytes == 2 * 16 * 5120 * 2

        # tensor parallel 8: each device rotates its own heads, 5120 / 8 = 640 elements a token
        (row,) = [r for r in layers.layer_table(LLAMA, Shard(8, 1, 0, 32)) if r.operator == TOY]
        assert row.shape["width"] == 640
        (op8,) = [
            o for o in model_ops(LLAMA, "decode", 16, 8192, shard=Shard(8, 1, 0, 32)) if o.operator == TOY
        ]
        assert op8.cost.flops == op.cost.flops / 8 == 3 * 16 * 640

        # training: forward and backward, 4096 tokens; its input saved: 4096 · 5120 · 2 B a layer
        ops = [(p, o) for p, o in train_ops(LLAMA, 1, 4096, TrainPrecision()) if o.operator == TOY]
        assert [p for p, _ in ops] == ["forward", "backward"]
        assert ops[1][1].cost.flops == 3 * 4096 * 5120 and ops[1][1].cost.stages[0].name == f"{TOY} backward"
    without = activation_bytes(LLAMA, 1, 4096, 2, fused=True, recompute="none")["total"]
    with toy_model(monkeypatch, **FULL_ENTRY):
        with_toy = activation_bytes(LLAMA, 1, 4096, 2, fused=True, recompute="none")["total"]
    assert with_toy - without == 32 * 4096 * 5120 * 2


def test_one_entry_is_listed_in_json_and_forecast(monkeypatch, tmp_path):
    data = Path(__file__).parent / "data" / "h200-reference.jsonl"
    cal = tmp_path / "cal.json"
    assert _main("calibrate", str(data), "-o", str(cal))[0] == 0
    argv = ["model", "--model", "llama-3.1-8b", "--context", "8192", "--batch", "16", "--device", "h200"]
    with toy_model(monkeypatch, **FULL_ENTRY):
        code, out, err = _main(*argv, "--calibration", str(cal), "--json")
        assert code == 0, err
        doc = json.loads(out)
        (op,) = [o for o in doc["ops"] if o["operator"] == TOY]
        assert op["flops"] == 3 * 16 * 5120 and op["count"] == 32
        (fc,) = [o for o in doc["predicted"]["ops"] if o["name"] == TOY]
        assert fc["by"] == "memory pass" and fc["time_s"] > 0
        code, out, err = _main(*argv, "--tp", "8", "--json")
        assert code == 0, err
        (op8,) = [o for o in json.loads(out)["ops"] if o.get("operator") == TOY]
        assert op8["flops"] == 3 * 16 * 640


@pytest.mark.parametrize(
    "lacks, argv, needle",
    [
        (
            "cuts",
            ["--tp", "8", "--context", "4096"],
            "has no rule for the heads split (row 'toy rotary' under tensor parallelism)",
        ),
        (
            "saved",
            ["--phase", "train", "--context", "4096"],
            "has no rule for the bytes its backward pass keeps",
        ),
        (
            "backward",
            ["--phase", "train", "--context", "4096"],
            "the backward pass of toy rotary is not modelled yet",
        ),
        ("bind", ["--context", "4096"], "has no binder"),
    ],
)
def test_an_entry_without_a_rule_is_refused_in_one_line(monkeypatch, lacks, argv, needle):
    entry = {k: v for k, v in FULL_ENTRY.items() if k != lacks}
    with toy_model(monkeypatch, **entry):
        code, out, err = _main("model", "--model", "llama-3.1-8b", "--device", "h200", "--batch", "8", *argv)
    assert code == 2 and out == "", (code, err)
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_a_matrix_product_must_say_what_it_multiplies():
    with pytest.raises(ValueError, match="matmul rule"):
        operators.register("toy gemm", rotary, kind=operators.GEMM)
    assert "toy gemm" not in operators.OPERATORS


def test_no_row_asks_its_operators_name_outside_the_table():
    """Every ``row.operator == ...`` question goes to the entry: no module but the table names an
    operator to decide how a row is costed, cut, saved or forecast."""
    import re

    src = Path(operators.__file__).parent
    pattern = re.compile(r"\.operator\s*(==|!=|in\b|not in\b)|operator\s*==\s*[\"']")
    found = [
        f"{p.relative_to(src)}:{n}"
        for p in sorted(src.rglob("*.py"))
        if p.name != "operators.py"
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


def test_the_toy_is_gone_after_the_test():
    assert TOY not in operators.OPERATORS
    assert all(r.operator != TOY for r in layers.layer_table(replace(LLAMA)))
