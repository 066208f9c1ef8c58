"""``model --sweep-batch LIST --sweep-context LIST``: the batch × context grid as a command. Its
cells equal the single-point ``model --batch B --context C --json`` answers (two paths through
the code: arrays over the layer table, and one scalar step), one cell is checked by hand, and a
100 × 100 grid answers in well under a second."""

from __future__ import annotations

import json
import math

import pytest

from attnroof.model.config import builtin
from attnroof.model.grid import grid, summary
from attnroof.model.layers import params
from attnroof.roofline import Roof
from conftest import assert_one_line_error, run_cli

L8 = ("model", "--model", "llama-3.1-8b", "--device", "h100")


def _json(*argv: str) -> dict:
    r = run_cli(*argv, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    ("model", "phase"), [("llama-3.1-8b", "decode"), ("llama-3.1-8b", "prefill"), ("mixtral-8x7b", "decode")]
)
def test_the_grids_cells_equal_single_point_answers(model, phase):
    batches, contexts = [1, 8, 64], [1024, 32768]
    head = ("model", "--model", model, "--device", "h100", "--phase", phase)
    g = _json(*head, "--sweep-batch", "1,8,64", "--sweep-context", "1024,32768")
    assert (g["batch"], g["context"]) == (batches, contexts)
    for i, b in enumerate(batches):
        for j, c in enumerate(contexts):
            one = _json(*head, "--batch", str(b), "--context", str(c))
            t, mem = one["totals"], one["memory"]
            for key in ("flops", "bytes", "time_s", "memory_bound_share", "attention_share"):
                assert math.isclose(g[key][i][j], t[key], rel_tol=1e-12), (key, b, c)
            assert g["limiter"][i][j] == t["limiter"]
            assert math.isclose(g["memory_bytes"][i][j], mem["total_bytes"], rel_tol=1e-12)
            assert g["fits"][i][j] == mem["fits"]
            if phase == "decode":
                assert math.isclose(g["tokens_per_s"][i][j], t["tokens_per_s"], rel_tol=1e-12)
    assert g["tokens_per_s"] is None if phase == "prefill" else len(g["tokens_per_s"]) == 3


def test_one_decode_cell_by_hand():
    """Llama-3.1-8B decode, batch 1 at 8,192 tokens on an H100 (3.35 TB/s): every kernel is
    memory-bound, so the step is its bytes over the bandwidth — the weights it streams, 8.03 B
    parameters less the gathered embedding table (128,256 × 4,096) at 2 B: 15.01 GB, and the KV
    cache, 8,192 tokens × 32 layers × 2 (K, V) × 8 heads × 128 × 2 B = 1.07 GB — 4.80 ms, 208
    tokens/s ≤, within the activations' few MB (on the single-level roof: with the L2 counted,
    each kernel reads the few kB the one before it wrote from there)."""
    m = builtin("llama-3.1-8b")
    g = _json(*L8, "--sweep-context", "8192", "--memory-levels", "1")  # --batch 1 is the grid's one row
    weights = (params(m) - 128_256 * 4096) * 2
    kv = 8192 * 32 * 2 * 8 * 128 * 2
    assert kv == 1_073_741_824 and round(weights / 1e9, 2) == 15.01
    assert g["limiter"] == [["memory"]] and g["memory_bound_share"] == [[1.0]]
    assert g["time_s"][0][0] == pytest.approx(g["bytes"][0][0] / 3.35e12, rel=1e-12)
    assert g["time_s"][0][0] == pytest.approx((weights + kv) / 3.35e12, rel=2e-3)
    assert round(g["tokens_per_s"][0][0]) == 208


def test_where_the_step_turns_compute_bound_and_stops_fitting():
    """Per context, the first batch whose step is compute-bound and the largest that fits:
    Llama-3.1-8B prefill is compute-bound from one sequence. At 131,072 tokens each sequence adds
    its KV cache, 131,072 tokens × 131,072 B = 17.18 GB, and its activations: 2 sequences take
    67.6 GB of the H100's 85.9 GB, 4 would take 119 GB; at 4,096 tokens all 8 fit."""
    argv = (*L8, "--phase", "prefill", "--sweep-batch", "1,2,4,8", "--sweep-context", "4096,131072")
    g = _json(*argv)
    assert g["compute_bound_from_batch"] == [1, 1]
    assert g["largest_fitting_batch"] == [8, 2]
    grown = g["memory_bytes"][1][1] - g["memory_bytes"][0][1]  # one more sequence at 131,072
    assert grown > 131_072 * 131_072 == 17_179_869_184
    assert g["fits"][1][1] and not g["fits"][2][1]
    text = run_cli(*argv)
    assert "c: compute-bound, ✗ does not fit in 85.9 GB" in text.stdout
    assert "| 131,072 |                        1 |                       2 |" in text.stdout


def test_a_100_by_100_grid_answers():
    """10,000 cells, in the library and as a command (how fast: ``benchmarks/speed.py``, whose
    targets are under a second for each; a test asserts no time)."""
    m = builtin("llama-3.1-8b")
    batches, contexts = list(range(1, 101)), [256 * i for i in range(1, 101)]
    g = grid(m, "decode", batches, contexts, Roof(989e12, 3.35e12), capacity_bytes=80e9)
    summary(g)
    assert g.time_s.shape == (100, 100)
    r = run_cli(
        *L8, "--sweep-batch", ",".join(map(str, batches)), "--sweep-context", ",".join(map(str, contexts))
    )
    assert r.returncode == 0 and "10,000 cells: --json gives each" in r.stdout


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (("--context", "8192"), ("--context", "--sweep-context")),
        (("--phase", "train"), ("--sweep-context", "--phase train")),
        (("--tp", "2"), ("--sweep-context", "parallel flags")),
        (("--sweep-context", "0"), ("--sweep-context", "'0'")),
    ],
)
def test_the_grid_refuses_what_it_cannot_cost(extra, needles):
    assert_one_line_error(run_cli(*L8, "--sweep-context", "1024", *extra), *needles)
