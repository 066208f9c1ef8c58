"""The operator table: one entry per operator, each pointing at its formula; the layer table
is built from it; a model's shapes live in one place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnroof import operators, ops
from attnroof.errors import InputError
from attnroof.model.config import builtin
from attnroof.model.layers import gemm_shapes, layer_table, params

SRC = Path(__file__).resolve().parents[1] / "src" / "attnroof"


def test_every_formula_is_registered_once():
    cost_formulas = {
        "attention",
        "decode",
        "chunk",
        "linear",
        "softmax",
        "norm",
        "add",
        "activation",
        "copy",
        "embedding",
        "experts",
        "latent attention",
        "rotary",
        # issue 23: beyond softmax
        "linear attention",
        "linear attention step",
        "ssd",
        "ssd step",
        "selective scan",
        "selective scan step",
        "chunked attention",
        "chunked attention chunk",
        "sparse attention",
    }
    collectives = {"all-reduce", "reduce-scatter", "all-gather", "all-to-all", "send/recv"}
    assert set(operators.OPERATORS) == cost_formulas | collectives
    assert {n for n, o in operators.OPERATORS.items() if o.kind == "collective"} == collectives
    with pytest.raises(ValueError, match="already registered"):
        operators.register("linear", ops.linear, kind=operators.GEMM)


def test_kinds_group_operators_for_calibration_and_reports():
    kinds = {name: op.kind for name, op in operators.OPERATORS.items()}
    assert kinds["linear"] == kinds["experts"] == "gemm"
    assert kinds["attention"] == kinds["decode"] == kinds["latent attention"] == "attention"
    assert {kinds[n] for n in ("softmax", "norm", "add", "activation", "copy", "embedding")} == {"memory"}


NO_BACKWARD = {
    "linear attention step",
    "ssd step",
    "selective scan step",
    "sparse attention",
    "chunked attention chunk",
}
"""The recurrent decode steps run only at decode (a training step runs the chunked forms), a
chunk of new queries against a cache under chunked local attention only in serving, and
DeepSeek's sparse attention is not trained here (its indexer's KL warm-up is not modelled): a
training step on it is refused for want of a ``saved`` rule."""


def test_every_operator_has_a_backward():
    assert {n for n, op in operators.OPERATORS.items() if op.backward is None} == NO_BACKWARD
    # an all-gather's gradient is a reduce-scatter of the same buffer: (n − 1)/n · M either way
    back = operators.operator("all-gather").backward(1024, 4)
    assert (back.collective, back.bytes_per_device) == ("reduce-scatter", 768.0)


def test_unknown_operator_suggests():
    with pytest.raises(InputError, match="did you mean 'attention'"):
        operators.operator("atention")


def test_forward_is_the_formula():
    # 2·n·k·m = 2 · 16 · 4096 · 1024
    assert operators.operator("linear").forward(16, 4096, 1024).flops == 2 * 16 * 4096 * 1024
    # softmax alone: 5 FLOPs per score; reads S, writes P (2 B each in bf16)
    sm = operators.operator("softmax").forward(1000)
    assert (sm.flops, sm.bytes) == (5 * 1000, 2 * 1000 * 2)


def test_layer_table_rows_name_registered_operators():
    for name in ("llama-3.1-8b", "gpt2", "qwen2.5-7b", "mistral-7b"):
        for inst in layer_table(builtin(name)):
            assert inst.operator in operators.OPERATORS, inst


def test_llama_parameters_from_the_table_arithmetic():
    # per layer: QKV 4096·(4096 + 2·1024) + O 4096·4096 + gate/up 4096·2·14336 + down 14336·4096
    #            + two RMSNorm scales 2·4096
    layer = 4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096 + 2 * 4096
    total = 32 * layer + 128256 * 4096 * 2 + 4096  # untied embedding and head, final norm
    assert params(builtin("llama-3.1-8b")) == total == 8_030_261_248


def test_gemm_shapes_come_from_the_table():
    assert gemm_shapes(builtin("llama-3.1-8b")) == [
        ("QKV projection", 4096, 6144),
        ("output projection", 4096, 4096),
        ("gate/up projection", 4096, 28672),
        ("down projection", 14336, 4096),
        ("LM head", 4096, 128256),
    ]


def test_layer_shapes_exist_once():
    """The gated MLP's input width (2 × intermediate, 2 × an expert's width) is written in the layer
    table's rows only."""
    pattern = re.compile(r"2\s*\*\s*(\w+\.)?(intermediate|width|w)\b")
    hits = [
        str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert hits == ["model/rows.py"]
