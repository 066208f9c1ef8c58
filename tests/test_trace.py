"""``attnroof trace`` (issue 38): any PyTorch module run on meta tensors, every ATen operator
recorded, costed and placed, unfused and fused.

Checked against what no one here wrote: PyTorch's ``FlopCounterMode`` and the models
transformers builds from published configs (Llama 3.1 8B, ViT-Base/16, T5), beside
``attnroof model``'s own counts of the same step; and bytes of single ATen operators by hand.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from attnroof.model.analysis import analyse  # noqa: E402
from attnroof.model.config import builtin  # noqa: E402
from attnroof.ops.attention import attention  # noqa: E402
from attnroof.roofline import Roof  # noqa: E402
from attnroof.trace import FUSED, UNFUSED, rules, trace  # noqa: E402
from attnroof.trace.capture import ATTENTION  # noqa: E402
from attnroof.trace.kernels import attention_cost  # noqa: E402
from conftest import assert_one_line_error, run_cli  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "trace"
BF16 = 2


def _meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def _one(fn, *args):
    """The trace of ``fn(*args)`` and its one costed record."""
    t = trace(fn, args)
    costed = [r for r in t.records if r.kind != rules.UNCOSTED]
    assert len(costed) == 1, [r.name for r in t.records]
    return t, costed[0]


# ---------------------------------------------------------------- bytes by hand


def test_a_view_is_free_and_the_add_after_it_reads_its_bytes():
    """x.view(...).transpose(...) dispatches two views: no record. The add then reads the 1024 × 512
    bf16 x and y (1 MiB each) and writes 1 MiB: 3 MiB, 524,288 FLOPs (one a element)."""
    x, y = _meta(1024, 512), _meta(512, 1024)
    t, r = _one(lambda a, b: a.view(512, 1024) + b, x, y)
    assert r.name == "add" and r.flops == 512 * 1024
    assert (
        sum(a.bytes for a in r.reads) == 2 * 1024 * 512 * BF16
        and sum(w.bytes for w in r.writes) == 1024 * 512 * BF16
    )
    assert t.bytes(UNFUSED) == 3 * 2**20


def test_a_broadcast_input_is_read_once():
    """x (4096 × 1024) + bias (1024,): the bias is expanded (stride 0) and read as its own 2 KiB,
    not as 4096 copies: reads 8 MiB + 2 KiB, writes 8 MiB."""
    _, r = _one(lambda a, b: a + b, _meta(4096, 1024), _meta(1024))
    assert sorted(a.bytes for a in r.reads) == [1024 * BF16, 4096 * 1024 * BF16]


def test_in_place_and_out_count_what_they_touch():
    """x.add_(y) reads x and y and writes x (3 × 2 MiB); torch.add(x, y, out=z) reads x and y and
    writes z, its out= argument (also 3 × 2 MiB, z once although it is an argument too)."""
    x, y, z = _meta(1024, 1024), _meta(1024, 1024), _meta(1024, 1024)
    t, r = _one(lambda a, b: a.add_(b), x, y)
    assert r.name == "add_" and t.bytes(UNFUSED) == 3 * 2 * 2**20
    t, r = _one(lambda a, b: torch.add(a, b, out=z), x, y)
    assert t.bytes(UNFUSED) == 3 * 2 * 2**20


def test_an_embedding_reads_the_rows_it_gathers_not_the_table():
    """8 tokens looked up in a 128,256 × 4096 table: 8 rows of 8 KiB read (64 KiB), not 1 GiB, the
    64 B of int64 ids, and 64 KiB written."""
    emb = torch.nn.Embedding(128256, 4096, dtype=torch.bfloat16)
    t = trace(emb, (torch.zeros(8, dtype=torch.long, device="meta"),))
    assert t.bytes(UNFUSED) == 8 * 4096 * BF16 + 8 * 8 + 8 * 4096 * BF16


def test_an_in_place_scatter_writes_its_rows_and_a_grouped_gemm_reads_every_group():
    """x.index_put_((idx,), v): 64 rows of 512 bf16 written into a 1024-row x: it reads v (64 KiB)
    and the 64 int64 indices (512 B), and writes 64 KiB, not x's 1 MiB. torch._grouped_mm of
    256 rows of 64 against 4 experts' 64 × 32 (an MoE kernel's shape): 2 · 256 · 64 · 32 FLOPs,
    every expert's weights read once (16 KiB), which PyTorch's registry does not count."""
    x, v = _meta(1024, 512), _meta(64, 512)
    idx = torch.empty(64, dtype=torch.long, device="meta")
    _, r = _one(lambda a, i, b: a.index_put_((i,), b), x, idx, v)
    assert r.kind == rules.SCATTER and r.flops == 0
    assert sum(a.bytes for a in r.reads) == 64 * 512 * BF16 + 64 * 8
    assert [w.bytes for w in r.writes] == [64 * 512 * BF16]
    offs = torch.empty(4, dtype=torch.int32, device="meta")
    _, g = _one(lambda a, b, o: torch._grouped_mm(a, b, offs=o), _meta(256, 64), _meta(4, 64, 32), offs)
    assert g.kind == rules.MATMUL and g.flops == 2 * 256 * 64 * 32
    assert sum(a.bytes for a in g.reads) == (256 * 64 + 4 * 64 * 32) * BF16 + 4 * 4


def test_a_router_s_top_k_and_sort_are_costed():
    """topk over 128 experts of 64 tokens compares each score once (8,192); sort compares each of
    them log2(128) = 7 times (57,344)."""
    scores = _meta(64, 128, dtype=torch.float32)
    _, r = _one(lambda a: torch.topk(a, 8, dim=-1), scores)
    assert r.kind == rules.REDUCTION and r.flops == 64 * 128
    _, r = _one(lambda a: torch.sort(a, dim=-1), scores)
    assert r.flops == 64 * 128 * 7


def test_an_operator_no_rule_costs_is_named_and_left_out():
    """torch.linalg.qr has no rule: it is listed as uncosted, never counted as zero bytes."""
    t = trace(lambda a: torch.linalg.qr(a.float())[0] + 1, (_meta(64, 64),))
    assert t.uncosted and all(name.startswith("linalg") for name in t.uncosted)
    assert all(r.name not in t.uncosted for k in t.kernels[FUSED] for r in k.records)


# ---------------------------------------------------------------- attention and fusion


@pytest.fixture(scope="module")
def block():
    import importlib.util

    spec = importlib.util.spec_from_file_location("trace_attention_example", EXAMPLES / "attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m, args = mod.make(seq=8192)
    return trace(m, args)


def test_the_custom_block_by_hand_recorded(block):
    """examples/trace/attention.py at 8192 tokens: QKV is 8192 × 4096 by 4096 × 6144 (32 + 2·8
    heads of 128): 2 · 8192 · 4096 · 6144 = 412.3 GFLOP. The SDPA call is one record, costed as
    attnroof's causal attention of 32 query heads on 8 KV heads; fused it moves Q, K, V, O only:
    8192 · 128 · (32 + 8 + 8 + 32) · 2 B = 167.8 MB."""
    qkv = next(r for r in block.records if r.module == "Block.qkv" and r.kind == rules.MATMUL)
    assert qkv.flops == 2 * 8192 * 4096 * 6144
    att = [r for r in block.records if r.kind == ATTENTION]
    assert len(att) == 1 and att[0].attention | {"mask_bytes": 0} == att[0].attention
    want = attention(8192, 128, fused=True, causal=True, group=4, kv_heads=8)
    assert attention_cost(att[0], fused=True).flops == want.flops
    assert attention_cost(att[0], fused=True).bytes == want.bytes == 8192 * 128 * (32 + 8 + 8 + 32) * BF16
    assert attention_cost(att[0], fused=False).bytes > 50 * want.bytes  # S and P: 32 · 8192² · 2 B each way


def test_the_rmsnorm_decomposition_fuses_into_one_kernel(block):
    """nn.RMSNorm on meta runs as eight ATen operators (to float, pow, mean, add, rsqrt, mul, mul,
    to bf16): unfused eight kernels, fused one, which reads x (64 MiB) and the 8 KiB scale and
    writes the normalised bf16 x (64 MiB) — what a compiler's single kernel moves."""
    norm = [k for k in block.kernels[FUSED] if k.module == "Block.norm"]
    assert len(norm) == 1 and len(norm[0].records) == 8
    x = 8192 * 4096 * BF16
    assert norm[0].stage.bytes == 2 * x + 4096 * BF16
    assert len([k for k in block.kernels[UNFUSED] if k.module == "Block.norm"]) == 8


# ---------------------------------------------------------------- published models


def _hf(name: str, **fields):
    transformers = pytest.importorskip("transformers", minversion="5.0")
    transformers.logging.set_verbosity_error()
    cfg = transformers.AutoConfig.for_model(name, **fields)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if getattr(cfg, "is_encoder_decoder", False):
            return cfg, transformers.AutoModelForSeq2SeqLM.from_config(cfg, attn_implementation="eager")
        if name == "vit":
            return cfg, transformers.AutoModel.from_config(cfg, attn_implementation="sdpa")
        return cfg, transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")


def test_llama_8b_against_flop_counter_and_attnroof_model():
    """Llama 3.1 8B's published config, a 128-token prefill, the LM head on the last token. The
    trace's GEMMs are FlopCounterMode's GEMMs (the same registry: every product was seen) and
    attnroof model's GEMM rows, exactly: 1,787,757,068,288 FLOPs. Its attention is model's
    attention row exactly (4,336,910,336, causal, softmax 5 a score); FlopCounterMode counts the
    SDPA decomposition's two bmm over the whole 128² matrix, 2× the causal half within 1% (s(s+1)/2
    against s²/2). The fused bytes lie within 10% of model's (17.3 against 16.5 GB: the trace reads
    the RoPE tables, the masks and writes the cache as transformers does)."""
    from test_transformers_flops import raw_config

    fields = {k: v for k, v in raw_config("llama-3.1-8b").items() if k != "quantization_config"}
    _, m = _hf(fields.pop("model_type"), **fields)
    m = m.to(torch.bfloat16).requires_grad_(False)
    kw = {
        "input_ids": torch.zeros(1, 128, dtype=torch.long, device="meta"),
        "use_cache": True,
        "logits_to_keep": 1,
    }
    from torch.utils.flop_counter import FlopCounterMode

    fc = FlopCounterMode(display=False)
    with torch.no_grad(), fc:
        m(**kw)
    with torch.no_grad():
        t = trace(m, (), kw)
    assert not t.uncosted
    gemm = sum(r.flops for r in t.records if r.kind == rules.MATMUL)
    a = analyse(builtin("llama-3.1-8b"), "prefill", 1, 128, Roof(989e12, 4.8e12))
    rows = ("QKV projection", "output projection", "gate/up projection", "down projection", "LM head")
    assert gemm == sum(o.count * o.flops for o in a.ops if o.name in rows) == 1_787_757_068_288
    att = sum(attention_cost(r, fused=True).flops for r in t.records if r.kind == ATTENTION)
    assert att == sum(o.count * o.flops for o in a.ops if o.name == "attention") == 4_336_910_336
    counts = fc.get_flop_counts()  # the SDPA decomposition's bmm, inside each attention module
    bmm = sum(c.get(torch.ops.aten.bmm, 0) for name, c in counts.items() if name.endswith(".self_attn"))
    assert fc.get_total_flops() - bmm == gemm
    softmax = 32 * 32 * (128 * 129 // 2) * 5  # layers · heads · kept scores · 5
    assert bmm == pytest.approx(2 * (att - softmax), rel=0.01)
    assert t.bytes(FUSED) == pytest.approx(a.totals.bytes, rel=0.10)


def test_vit_base_end_to_end():
    """ViT-Base/16 (transformers' ViTConfig defaults are google/vit-base-patch16-224's): a 224²
    image is 196 patches + [CLS] = 197 tokens of 768. The patch embedding is a 16×16 stride-16
    convolution: 2 · 196 · 768 · (3·16·16) = 173.4 MFLOP an image; attention is non-causal over 197
    tokens, 12 heads of 64, 12 layers."""
    _, m = _hf("vit")
    t = trace(m.to(torch.bfloat16), (), {"pixel_values": _meta(2, 3, 224, 224)})
    conv = next(r for r in t.records if r.kind == rules.MATMUL and "patch_embeddings" in r.module)
    assert conv.flops == 2 * 2 * 196 * 768 * 3 * 16 * 16
    att = [r for r in t.records if r.kind == ATTENTION]
    assert len(att) == 12 and {(r.attention["s_q"], r.attention["heads"], r.attention["d"]) for r in att} == {
        (197, 12, 64)
    }
    assert not any(r.attention["causal"] for r in att)
    assert t.bytes(FUSED) < t.bytes(UNFUSED)


def test_t5_encoder_decoder_end_to_end():
    """T5 (transformers' T5Config defaults, t5-small's shape: d_model 512, 6 + 6 layers, 8 heads,
    vocabulary 32,128) on 64 source and 64 target tokens, forward and backward. Its attention is its
    own (matmuls and a softmax, with the relative position bias), so its products are GEMM records;
    the LM head is 64 × 512 by 512 × 32128: 2 · 64 · 512 · 32128 FLOPs."""
    _, m = _hf("t5")
    ids = torch.zeros(1, 64, dtype=torch.long, device="meta")
    t = trace(m, (), {"input_ids": ids, "decoder_input_ids": ids}, phase="train")
    head = [
        r for r in t.records if r.module.endswith("lm_head") and r.kind == rules.MATMUL and not r.backward
    ]
    assert [r.flops for r in head] == [2 * 64 * 512 * 32128]
    assert any(r.backward for r in t.records) and t.phase == "train"


def test_dit_block_forward_and_backward():
    """examples/trace/dit.py, DiT-XL/2's block on 8 images of 256 tokens: adaLN's linear is
    8 × 1152 by 1152 × 6912 (shift, scale, gate for both branches): 2 · 8 · 1152 · 6912 FLOPs.
    Training triples the GEMMs (dX and dW beside the forward), so the step's FLOPs are about 3× the
    forward's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("trace_dit_example", EXAMPLES / "dit.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fwd = trace(*mod.make())
    ada = next(r for r in fwd.records if r.module == "DiTBlock.adaLN_modulation.1")
    assert ada.flops == 2 * 8 * 1152 * 6912
    train = trace(*mod.make(), phase="train")
    assert 2.8 < train.flops / fwd.flops < 3.2


# ---------------------------------------------------------------- the command


def test_the_command_prints_the_tables_json_and_chart(tmp_path):
    src = f"{EXAMPLES / 'attention.py'}:make"
    r = run_cli("trace", src, "--device", "h100", "--seq", "2048")
    assert r.returncode == 0, r.stderr
    assert "unfused (one kernel per operator)" in r.stdout and "fusion saves" in r.stdout
    assert "| Block.norm |" in r.stdout and "scaled_dot_product_attention" in r.stdout
    doc = run_cli("trace", src, "--device", "h100", "--seq", "2048", "--json").json()
    assert (
        doc["fused"]["bytes"] < doc["unfused"]["bytes"] and doc["fused"]["time_s"] <= doc["unfused"]["time_s"]
    )
    assert sum(k["flops"] for k in doc["kernels"]) == pytest.approx(doc["flops"])
    chart = tmp_path / "trace.png"
    pytest.importorskip("matplotlib")
    assert run_cli("trace", src, "--device", "h100", "--chart", str(chart)).returncode == 0
    assert chart.read_bytes()[:4] == b"\x89PNG"


def test_bad_sources_are_one_line(tmp_path):
    assert_one_line_error(run_cli("trace", str(tmp_path / "none.py")), "no such file")
    f = tmp_path / "m.py"
    f.write_text("def make():\n    return 3\n")
    assert_one_line_error(run_cli("trace", f"{f}:make"), "must return (module, inputs)")
    assert_one_line_error(run_cli("trace", f"{f}:other"), "no function 'other'")
    f.write_text("def make():\n    raise ValueError('boom')\n")
    assert_one_line_error(run_cli("trace", f"{f}:make"), "raised ValueError: boom")
    assert_one_line_error(run_cli("trace", "model.onnx"), "not one of")


def test_each_kernel_is_forecast_at_or_above_its_bound():
    """On an H100 (profile h100 bf16) every fused kernel's forecast is at least its bound, the
    GEMMs' within the profile's ceiling; --profile none prints the bound alone."""
    src = f"{EXAMPLES / 'dit.py'}:make"
    doc = run_cli("trace", src, "--device", "h100", "--phase", "train", "--json").json()
    assert doc["profile"] and doc["fused"]["forecast_time_s"] >= doc["fused"]["time_s"]
    assert all(k["forecast_time_s"] >= k["time_s"] * (1 - 1e-12) for k in doc["kernels"])
    bare = run_cli("trace", src, "--device", "h100", "--profile", "none", "--json").json()
    assert bare["profile"] is None and bare["fused"]["forecast_time_s"] is None
    assert "forecast" not in run_cli("trace", src, "--device", "h100", "--profile", "none").stdout


def test_a_config_json_and_an_exported_program(tmp_path):
    """A published config.json (Phi-3-mini, from tests/data/configs) is built by transformers on the
    meta device: its 32 layers' QKV products are 64 × 3072 by 3072 × 9216 each. A torch.export-ed
    Linear(64, 32) + ReLU on 8 rows runs on its example inputs: 2 · 8 · 64 · 32 + 8 · 32 FLOPs."""
    pytest.importorskip("transformers", minversion="5.0")
    cfg = Path(__file__).parent / "data" / "configs" / "phi-3-mini-4k.json"
    doc = run_cli("trace", str(cfg), "--seq", "64", "--device", "h100", "--json").json()
    assert doc["source"] == "phi-3-mini-4k.json" and not doc["uncosted"]
    qkv = [k for k in doc["kernels"] if k["module"].endswith("qkv_proj")]
    assert len(qkv) == 32 and {k["flops"] for k in qkv} == {2 * 64 * 3072 * 9216}

    class Small(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(64, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.lin(x))

    program = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(Small(), (torch.randn(8, 64),)), program)
    doc = run_cli("trace", str(program), "--device", "h100", "--json").json()
    assert doc["flops"] == 2 * 8 * 64 * 32 + 8 * 32
    assert [k["operators"] for k in doc["kernels"]] == [["addmm"], ["relu"]]
    assert_one_line_error(run_cli("trace", str(tmp_path / "none.pt2")), "no such file")
    (tmp_path / "bad.json").write_text('{"hidden_size": 3}')
    assert_one_line_error(run_cli("trace", str(tmp_path / "bad.json")), "no model_type")
