"""Charts and the HTML report (the ``attnroof[plot]`` extra), on matplotlib's Agg backend.

The charts are checked by reading their data back from the artists and comparing it with the
core formulas, not by eye: a line's ``get_xydata()`` is (FLOP/byte, FLOP/s) in SI units.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnroof import Roof, attention, decode, linear
from attnroof.devices import device_from_record, get_device
from attnroof.dtypes import dtype
from attnroof.text.sheet import sheet_markdown
from conftest import SRC, assert_one_line_error

pytest.importorskip("matplotlib")
import matplotlib

matplotlib.use("Agg")

from attnroof.plot import figure_svg, read_measured, report_html, roofline_figure, save_figure
from attnroof.plot.markdown import inline, to_html
from attnroof.plot.series import DEFAULT_S, size_label

R = Roof(1200e12, 4.0e12, "R", "bf16")  # device R: P = 1200 TFLOP/s, B = 4.0 TB/s, ridge 300 (D1)
D = 128
S = np.array(DEFAULT_S, dtype=np.float64)

# A device with two dtypes, to draw one roof per dtype (fp8: 1 byte per element).
TWO = device_from_record(
    {"name": "T2", "peak_flops_per_s": {"bf16": 1000e12, "fp8": 2000e12}, "bandwidth_bytes_per_s": 3.35e12}
)


def _by_gid(fig, gid):
    ax = fig.axes[0]
    found = [a for a in (*ax.lines, *ax.collections, *ax.patches) if a.get_gid() == gid]
    assert len(found) == 1, (gid, [a.get_gid() for a in (*ax.lines, *ax.collections)])
    return found[0]


def _model_xy(cost, roof=R):
    intensity = cost.flops / cost.bytes
    return np.column_stack([intensity, roof.attainable(intensity)])


# ---------------------------------------------------------------- the numbers on the chart


def test_attention_trajectories_are_the_models_numbers():
    fig = roofline_figure("R", "bf16", d=D, causal=True)
    for gid, kw in (
        ("traj-attention-unfused", {}),
        ("traj-attention-fused", {"fused": True}),
        ("traj-attention-causal-unfused", {"causal": True}),
        ("traj-attention-causal-fused", {"fused": True, "causal": True}),
    ):
        xy = _by_gid(fig, gid).get_xydata()
        np.testing.assert_allclose(xy, _model_xy(attention(S, D, **kw)), rtol=1e-12)
    fused = _by_gid(fig, "traj-attention-fused").get_xydata()
    unfused = _by_gid(fig, "traj-attention-unfused").get_xydata()
    # C3: I_fused(512) = 517·512/1024 = 258.5 FLOP/byte, on the slope: 258.5 · 4e12 FLOP/s
    assert fused[0] == pytest.approx([258.5, 258.5 * 4.0e12])
    # C4: I_unfused(8192) = 8192·517/(8·(128 + 8192)) = 63.6; D4: 63.6 × 4 TB/s = 254 TFLOP/s
    i8k = DEFAULT_S.index(8192)
    assert unfused[i8k][0] == pytest.approx(8192 * 517 / (8 * (128 + 8192)))
    assert unfused[i8k][1] == pytest.approx(254.5e12, rel=1e-3)
    # fused from s = 1024 on is on the compute roof (D2: s ≥ 595); unfused never is (D3)
    assert np.all(fused[1:, 1] == 1200e12)
    assert np.all(unfused[:, 1] < 1200e12 / 4)


def test_roof_ridge_and_band():
    fig = roofline_figure("R", "bf16", d=D)
    x, y = _by_gid(fig, "roof-bf16").get_xydata().T
    np.testing.assert_allclose(y, R.attainable(x))
    assert x[1] == 300 and y[1] == 1200e12  # the corner: ridge 1200e12 / 4.0e12 = 300 FLOP/byte (D1)
    assert _by_gid(fig, "ridge-bf16").get_xydata().tolist() == [[300.0, 1200e12]]
    band = _by_gid(fig, "band-bf16")
    assert (band.get_x(), band.get_x() + band.get_width()) == (150.0, 600.0)  # ridge/2 .. 2·ridge
    xlim = fig.axes[0].get_xlim()
    assert x[0] <= xlim[0] and x[-1] >= xlim[1]  # the roof spans the whole chart
    assert fig.axes[0].get_xscale() == fig.axes[0].get_yscale() == "log"


def test_one_roof_per_dtype_and_operators_in_the_first():
    fig = roofline_figure(TWO, "fp8,bf16", d=D)
    for dt in ("bf16", "fp8"):
        roof = Roof.of(TWO, dt)
        x, y = _by_gid(fig, f"roof-{dt}").get_xydata().T
        np.testing.assert_allclose(y, roof.attainable(x))
        assert x[1] == pytest.approx(roof.ridge)  # bf16: 1000/3.35 = 298.5; fp8: 597.0
    fp8 = Roof.of(TWO, "fp8")
    xy = _by_gid(fig, "traj-attention-fused").get_xydata()
    np.testing.assert_allclose(xy, _model_xy(attention(S, D, fused=True, itemsize=1), fp8))
    assert "fp8, bf16" in fig.axes[0].get_title()


def test_decode_gqa_and_linear_trajectories():
    fig = roofline_figure("R", "bf16", d=D, attention=False, groups=[1, 8], linear=(4096, 4096))
    assert not [ln for ln in fig.axes[0].lines if (ln.get_gid() or "").startswith("traj-attention")]
    for g in (1, 8):
        xy = _by_gid(fig, f"traj-decode-g{g}").get_xydata()
        np.testing.assert_allclose(xy, _model_xy(decode(S, D, group=g, fused=True)))
    g1 = _by_gid(fig, "traj-decode-g1").get_xydata()
    # decode at s = 8192, d = 128, fused (no score vector in memory): (4sd + 5s) / (2·(2sd + 2d)) = 1.0097
    assert g1[DEFAULT_S.index(8192)][0] == pytest.approx(4_235_264 / (2 * (2 * 8192 * 128 + 2 * 128)))
    n = np.array([1, 4, 16, 64, 256, 1024, 4096, 16384], dtype=np.float64)
    np.testing.assert_allclose(_by_gid(fig, "traj-linear").get_xydata(), _model_xy(linear(n, 4096, 4096)))


def test_points_are_labelled_with_their_size():
    fig = roofline_figure("R", "bf16", d=D)
    texts = [
        t.get_text()
        for t in fig.axes[0].texts
        if re.fullmatch(r"label-attention-fused-\d+", t.get_gid() or "")
    ]
    # fused points are far apart: every s has its own label, the first one says what it is
    assert texts == ["s=512"] + [size_label(s) for s in DEFAULT_S[1:]]
    assert size_label(131072) == "128k"
    unfused = [
        t.get_text()
        for t in fig.axes[0].texts
        if re.fullmatch(r"label-attention-unfused-\d+", t.get_gid() or "")
    ]
    # unfused saturates (I → 64.6): its points pile up under the ridge and share labels
    assert unfused[-1].endswith("–128k") and len(unfused) < len(DEFAULT_S)


def test_axes_units_legend_and_title():
    fig = roofline_figure("R", "bf16", d=D)
    ax = fig.axes[0]
    assert "FLOP/byte" in ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel()
    assert "R" in ax.get_title() and "bf16" in ax.get_title()
    fig.draw_without_rendering()  # runs the layout
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert "1000" in labels  # 1e15 FLOP/s shown as 1000 TFLOP/s
    legend = fig.legends[0]
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # beside the axes, not over the data


# ---------------------------------------------------------------- measured points and ceilings

# What attnroof measure writes: the model's FLOPs, bytes and intensity for the implementation that ran.
EAGER = attention(1024, 128, batch=1, kv_heads=8)  # unfused
FLASH = attention(8192, 128, fused=True, causal=True, group=4, batch=2, kv_heads=8)
DECODE = decode(8192, 128, fused=True, group=8, batch=4, kv_heads=4)
LINEAR = linear(256, 4096, 4096)


def _model(cost, achieved_flops_per_s):
    """The counts of ``cost`` timed at ``achieved_flops_per_s``: time = FLOPs / rate, so that the
    record's derived figures agree with its counts (a reader refuses one that does not)."""
    flops = float(cost.flops)
    return {"flops": flops, "bytes": float(cost.bytes), "intensity": float(cost.intensity),
            "time_s": flops / achieved_flops_per_s, "achieved_flops_per_s": achieved_flops_per_s}  # fmt: skip


MEASURED = [
    {"kind": "attention", "impl": "eager", "dtype": "bf16", "status": "ok",
     "shape": {"s": 1024, "d": 128, "batch": 1, "heads": 8, "group": 1, "causal": False},
     **_model(EAGER, 1.2e14)},
    {"kind": "attention", "impl": "sdpa-flash", "dtype": "bf16", "status": "ok",
     "shape": {"s": 8192, "d": 128, "batch": 2, "heads": 32, "group": 4, "causal": True},
     **_model(FLASH, 6.1e14)},
    {"kind": "attention", "impl": "sdpa-flash", "dtype": "bf16", "status": "skip",
     "reason": "out of memory",
     "shape": {"s": 131072, "d": 128, "batch": 1, "heads": 8, "group": 1, "causal": False}},
    {"kind": "decode", "impl": "sdpa", "dtype": "bf16", "status": "ok",
     "shape": {"s": 8192, "d": 128, "batch": 4, "heads": 32, "group": 8},
     **_model(DECODE, 2.2e13)},
    {"kind": "linear", "impl": "torch.mm", "dtype": "bf16", "status": "ok",
     "shape": {"n": 256, "k": 4096, "m": 4096},
     **_model(LINEAR, 7.5e14)},
]  # fmt: skip


@pytest.fixture
def measured_file(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in MEASURED) + "\n\n", encoding="utf-8")
    return path


@pytest.fixture
def ceilings_file(tmp_path):
    path = tmp_path / "ceilings.json"
    doc = {"device": {"name": "R", "peak_flops_per_s": {"bf16": 9.8e14}, "bandwidth_bytes_per_s": 3.3e12}}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_measured_points_linked_to_the_models_point(measured_file):
    fig = roofline_figure("R", "bf16", d=D, measured=measured_file)
    (eager_xy,) = _model_xy(EAGER)
    (flash_xy,) = _model_xy(FLASH)
    np.testing.assert_allclose(_by_gid(fig, "measured-eager").get_offsets(), [[eager_xy[0], 1.2e14]])
    # the skipped (out of memory) run is not drawn
    np.testing.assert_allclose(_by_gid(fig, "measured-sdpa-flash").get_offsets(), [[flash_xy[0], 6.1e14]])
    # each measured point is linked to the model's point on R's roof at the same intensity:
    # eager is unfused attention at s = 1024; sdpa-flash fused, causal, GQA 4 (8 KV heads)
    (seg,) = _by_gid(fig, "link-eager").get_segments()
    np.testing.assert_allclose(seg, [[eager_xy[0], 1.2e14], eager_xy])
    (seg,) = _by_gid(fig, "link-sdpa-flash").get_segments()
    np.testing.assert_allclose(seg[1], flash_xy)
    # decode through SDPA is fused: the score vector stays on chip (8.07 FLOP/byte, not F2's 7.17)
    (seg,) = _by_gid(fig, "link-sdpa").get_segments()
    np.testing.assert_allclose(seg[1], _model_xy(DECODE)[0])
    (seg,) = _by_gid(fig, "link-torch.mm").get_segments()
    np.testing.assert_allclose(seg[1], _model_xy(LINEAR)[0])
    np.testing.assert_allclose(_by_gid(fig, "model-eager").get_offsets(), [eager_xy])


def test_measured_ceilings_beside_the_catalogs(ceilings_file):
    fig = roofline_figure("R", "bf16", d=D, ceilings=ceilings_file)
    x, y = _by_gid(fig, "ceiling-bf16").get_xydata().T
    measured = Roof(9.8e14, 3.3e12)
    np.testing.assert_allclose(y, measured.attainable(x))
    assert x[1] == pytest.approx(9.8e14 / 3.3e12)  # the measured ridge, 297 FLOP/byte
    _by_gid(fig, "roof-bf16")  # the catalog's roof is still there


def test_read_measured_skips_failed_runs_and_ceiling_probes(tmp_path, measured_file):
    rows = read_measured(measured_file)
    assert [m.impl for m in rows] == ["eager", "sdpa-flash", "sdpa", "torch.mm"]
    assert [m.is_fused for m in rows[:2]] == [False, True]
    # what attnroof measure writes: every key present (None where it does not apply), the model
    # named, and the ceiling probes in the same file
    probe = {**dict.fromkeys(MEASURED[0]), "kind": "ceiling", "impl": "read", "status": "ok",
             "dtype": "fp32", "shape": {"bytes": 2**28}, "time_s": 1e-4, "flops": 0, "bytes": 2**28}  # fmt: skip
    math_ = {**MEASURED[0], "impl": "sdpa-math", "model": "unfused", "reason": None, "ncu_bytes": None}
    named = {**MEASURED[1], "impl": "my-kernel", "model": "unfused"}
    path = tmp_path / "measure.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (probe, math_, named)), encoding="utf-8")
    rows = read_measured(path)
    assert [(m.impl, m.is_fused) for m in rows] == [("sdpa-math", False), ("my-kernel", False)]


# ---------------------------------------------------------------- files


@pytest.mark.parametrize(
    "kind, kwargs",
    [
        ("attention", {}),
        ("causal", {"causal": True}),
        ("decode", {"attention": False, "groups": [1, 8]}),
        ("linear", {"attention": False, "linear": (8192, 8192)}),
        ("measured", {"measured": "MEASURED", "ceilings": "CEILINGS"}),
    ],
)
def test_each_chart_kind_renders_to_png_and_svg(tmp_path, measured_file, ceilings_file, kind, kwargs):
    files = {"MEASURED": measured_file, "CEILINGS": ceilings_file}
    kwargs = {k: files.get(v, v) if isinstance(v, str) else v for k, v in kwargs.items()}
    fig = roofline_figure("R", "bf16", d=D, **kwargs)
    png = save_figure(fig, tmp_path / f"{kind}.png")
    svg = save_figure(fig, tmp_path / f"{kind}.svg")
    assert png.stat().st_size > 30_000 and svg.stat().st_size > 30_000
    pixels = matplotlib.image.imread(png)[..., :3]
    assert pixels.shape[0] > 800 and pixels.shape[1] > 1400  # 11 × 6.5 in at 150 dpi
    assert pixels.std() > 0.05 and (pixels.mean(axis=2) < 0.9).mean() > 0.01  # not blank
    text = svg.read_text(encoding="utf-8")
    assert text.lstrip().startswith("<?xml") and 'id="roof-bf16"' in text
    assert "Date" not in text  # no timestamp: regenerating gives the same file


def test_pdf_and_unknown_suffix(tmp_path):
    fig = roofline_figure("R", "bf16", d=D)
    pdf = save_figure(fig, tmp_path / "r.PDF")
    assert pdf.read_bytes()[:5] == b"%PDF-"
    from attnroof.errors import InputError

    with pytest.raises(InputError, match=r"unknown image format '\.gif'"):
        save_figure(fig, tmp_path / "r.gif")


def test_report_rings_its_shape_and_figures_show_in_notebooks():
    from attnroof.plot.chart import mark_shape
    from attnroof.plot.series import trajectories

    trajs = trajectories(R, d=D, causal=True)
    fig = roofline_figure("R", "bf16", d=D, causal=True)
    mark_shape(fig, trajs, 8192, "s = 8192")
    ring = _by_gid(fig, "shape-8192").get_offsets()
    expected = [
        _model_xy(attention(8192, D, fused=f, causal=c))[0] for c in (False, True) for f in (False, True)
    ]
    np.testing.assert_allclose(ring, expected)
    assert fig.legends[-1].get_texts()[-1].get_text() == "s = 8192" and len(fig.legends) == 1
    assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"  # no pyplot needed to display it


def test_inline_svg_has_no_prolog_and_prefixed_ids():
    svg = figure_svg(roofline_figure("R", "bf16", d=D), "c1-")
    assert svg.startswith("<svg") and "<?xml" not in svg and "DOCTYPE" not in svg
    assert 'id="c1-traj-attention-fused"' in svg
    ids = re.findall(r'\bid="([^"]+)"', svg)
    assert all(i.startswith("c1-") for i in ids)


# ---------------------------------------------------------------- command line


def test_cli_plot_writes_the_file_and_json_has_the_models_numbers(cli, tmp_path):
    out = tmp_path / "chart.svg"
    r = cli(
        "plot", "-o", str(out), "--causal", "--decode", "--groups", "8", "--linear", "4096,4096", "--json"
    )
    assert r.returncode == 0, r.stderr
    data = r.json()
    assert data["output"] == str(out) and out.stat().st_size > 30_000
    assert data["roofs"][0]["ridge"] == 300
    traj = {t["key"]: t for t in data["trajectories"]}
    assert set(traj) == {
        "attention-unfused", "attention-fused", "attention-causal-unfused", "attention-causal-fused",
        "decode-g1", "decode-g8", "linear",
    }  # fmt: skip
    np.testing.assert_allclose(traj["attention-fused"]["intensity"], attention(S, D, fused=True).intensity)
    np.testing.assert_allclose(
        traj["decode-g8"]["attainable_flops_per_s"], _model_xy(decode(S, D, group=8, fused=True))[:, 1]
    )


def test_cli_plot_png_with_measured_and_ceilings(cli, tmp_path, measured_file, ceilings_file):
    out = tmp_path / "m.png"
    r = cli("plot", "-o", str(out), "--measured", str(measured_file), "--ceilings", str(ceilings_file))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"wrote {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["-o", "chart.gif"], "'.gif'"),
        (["-o", "chart"], "unknown image format"),
        (["-o", "c.png", "--dtype", "bf16,fp9"], "'fp9'"),
        (["-o", "c.png", "--dtype", "fp8"], "fp8"),
        (["-o", "c.png", "--linear", "4096"], "'4096'"),
        (["-o", "c.png", "--groups", "0"], "'0'"),
        (["-o", "c.png", "-s", "512,x"], "'x'"),
        (["-o", "c.png", "--measured", "nope.jsonl"], "nope.jsonl"),
        (["-o", "c.png", "--ceilings", "nope.json"], "nope.json"),
        (["-o", "c.png", "--dtype", "bf16,fp16", "--peak-flops", "900T"], "--peak-flops"),
        (["-o", "no/such/dir/c.png"], "no/such/dir"),
        (["-o", "c.png", "--no-attention"], "nothing to plot"),
        (["-o", "c.png", "--tokens", "1,8"], "--linear"),
    ],
)
def test_cli_plot_bad_input_is_one_line(cli, tmp_path, args, needle):
    args = [str(tmp_path / a) if a.endswith((".png", ".gif", ".jsonl", ".json")) else a for a in args]
    if args[1] == "chart":
        args[1] = str(tmp_path / "chart")
    assert_one_line_error(cli("plot", *args), needle)


@pytest.mark.parametrize(
    "content, needle",
    [
        ('{"kind": "attention"\n', ":1: not valid JSON"),
        ('\n{"kind": "attention", "impl": "x"}\n', ":2: missing key"),
        (json.dumps({**MEASURED[0], "time_s": "fast"}), "time_s = 'fast'"),
        (json.dumps({**MEASURED[0], "dtype": "fp9"}), "dtype = 'fp9' is not a dtype attnroof knows"),
    ],
)
def test_cli_plot_bad_measured_file(cli, tmp_path, content, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    r = cli("plot", "-o", str(tmp_path / "c.png"), "--measured", str(path))
    if needle is None:
        assert r.returncode == 0, r.stderr
    else:
        assert_one_line_error(r, needle)


def test_cli_plot_bad_ceilings_file(cli, tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"device": {"name": "R", "peak_flops_per_s": {"bf16": 1e15}}}', encoding="utf-8")
    assert_one_line_error(cli("plot", "-o", str(tmp_path / "c.png"), "--ceilings", str(path)), "bandwidth")


def test_cli_report_bad_input(cli, tmp_path):
    assert_one_line_error(cli("report", "-o", str(tmp_path / "r.pdf")), "HTML")
    bad = cli("report", "-o", str(tmp_path / "r.html"), "--heads", "30", "--group", "8")  # 30 = 8·3 + 6
    assert_one_line_error(bad, "--heads 30", "--group 8")
    assert not (tmp_path / "r.html").exists()


# ---------------------------------------------------------------- the core stays light


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_import_attnroof_loads_no_matplotlib():
    r = _python(
        "import sys, attnroof, attnroof.cli\n"
        "attnroof.cli.build_parser()\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'torch'))\n"
        "print(bad)"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_missing_matplotlib_names_the_extra(tmp_path):
    block = "import sys; sys.modules['matplotlib'] = None\n"  # what an uninstalled package looks like
    r = _python(
        block + f"from attnroof.cli import main\nraise SystemExit(main(['plot', '-o', r'{tmp_path}/c.png']))"
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert "pip install 'attnroof[plot]'" in r.stderr
    r = _python(block + "import attnroof.plot")
    assert "MissingExtra" in r.stderr and "attnroof[plot]" in r.stderr


# ---------------------------------------------------------------- Markdown → HTML


def test_markdown_blocks():
    md = (
        "# Sheet\n\nIntro line one\nline two.\n\n## Part A\n\n"
        "| s | I | verdict |\n|---:|:---:|:---|\n"
        "| 512 | 51.7 | memory-bound |\n| 8k | `a\\|b` | **near** |\n\n"
        "- one\n- two\n  continued\n  - nested\n- three\n\n1. first\n2. second\n\n```\nx < y\n```\n"
    )
    out = to_html(md)
    assert '<h1 id="sheet">Sheet</h1>' in out and '<h2 id="part-a">Part A</h2>' in out
    assert "<p>Intro line one\nline two.</p>" in out
    assert '<th class="right">s</th><th class="center">I</th><th class="left">verdict</th>' in out
    assert (
        '<td class="right">512</td>' in out and "<code>a|b</code>" in out and "<strong>near</strong>" in out
    )
    assert "<li>two continued\n<ul>\n<li>nested</li>\n</ul></li>" in out
    assert "<ol>\n<li>first</li>\n<li>second</li>\n</ol>" in out
    assert "<pre><code>x &lt; y</code></pre>" in out
    assert to_html("# T", heading_offset=1) == '<h2 id="t">T</h2>'


def test_markdown_escapes_html():
    out = to_html(
        "<script>alert(1)</script> & **<b>** `<i>` [x](javascript:alert(1)) [ok](https://a.b/?q=1&r=2)"
    )
    assert "<script>" not in out and "&lt;script&gt;" in out and "&amp;" in out
    assert "<strong>&lt;b&gt;</strong>" in out and "<code>&lt;i&gt;</code>" in out
    assert 'href="javascript' not in out and '<a href="https://a.b/?q=1&amp;r=2">ok</a>' in out
    assert inline("2 * 3 * 4 and *x*") == "2 * 3 * 4 and <em>x</em>"


# ---------------------------------------------------------------- the report

STANDIN_SHEET = """# Attention on R (bf16)

Device **R**: ridge `P/B = 300` FLOP/byte.

## C. Intensity

| s | I unfused | I fused |
|---:|---:|---:|
| 512 | 51.7 | 258 |
| 8192 | 63.6 | 4,136 |

- unfused: memory-bound at every s
- fused: compute-bound from s = 595
"""


@pytest.fixture
def report_file(tmp_path, measured_file, ceilings_file):
    text = report_html("R", "bf16", sheet=STANDIN_SHEET, measured=measured_file, ceilings=ceilings_file)
    path = tmp_path / "report.html"
    path.write_text(text, encoding="utf-8")
    return path


def test_report_is_self_contained(report_file):
    text = report_file.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.count("<svg") == 2
    for fetch in ("<script", "<link", "<img", "src=", "@import", "url(http"):
        assert fetch not in text, fetch
    urls = re.findall(r"https?://[^\"' )<]+", text)
    assert all(u.startswith("http://www.w3.org/") for u in urls), urls  # XML namespaces only
    assert "<style>" in text and '<h2 id="attention-on-r-bf16">' in text  # the sheet, headings demoted
    assert '<td class="right">63.6</td>' in text
    assert "Measured kernels" in text and "sdpa-flash" in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))  # two inline charts, no clashing ids


def test_cli_report_holds_the_sheet_for_the_same_shape(tmp_path, cli):
    out = tmp_path / "r.html"
    r = cli("report", "-o", str(out), "-s", "4096", "--device", "h100", "--json")
    assert r.returncode == 0, r.stderr
    assert r.json()["output"] == str(out) and r.json()["device"] == "H100 SXM"
    text = out.read_text(encoding="utf-8")
    sheet = sheet_markdown(get_device("h100"), dtype("bf16"), s=4096)
    assert to_html(sheet, heading_offset=1) in text  # the worked analysis, whole
    assert text.count("<svg") == 2 and "<table>" in text and "<script" not in text
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def test_report_renders_in_headless_chromium(tmp_path, measured_file, ceilings_file):
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    report_file = tmp_path / "report.html"  # the real sheet, measured points and ceilings
    report_file.write_text(
        report_html("R", "bf16", measured=measured_file, ceilings=ceilings_file), encoding="utf-8"
    )
    url = report_file.resolve().as_uri()
    shot = tmp_path / "shot.png"
    common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    r = subprocess.run(
        [*common, "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", "--window-size=1200,2000", url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shot.exists(), r.stderr[-2000:]
    console = [
        ln for ln in r.stderr.splitlines() if "Uncaught" in ln or ("CONSOLE" in ln and "error" in ln.lower())
    ]
    assert console == []
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2000, 1200)
    ink = (pixels.mean(axis=2) < 0.85).mean()
    assert pixels.std() > 0.05 and ink > 0.02, (pixels.std(), ink)  # text and charts, not a blank page
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<svg") == 2
    assert 'id="c1-traj-attention-fused"' in dom and 'id="c2-traj-decode-g8"' in dom
    assert 'id="c1-measured-eager"' in dom
