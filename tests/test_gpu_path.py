"""The CUDA path's failure modes, each exercised on the CPU with stand-ins: ncu without counter
permission, a timed-out ncu's process group, ncu's cache control beside the bytes, triton's
``do_bench`` failing to build its helper, the tf32 switch and the pinned SDPA backend's warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
import warnings

import pytest

from attnroof.measure import ncu
from attnroof.measure.ncu import NcuError

PERM_OUTPUT = """==PROF== Connected to process 4242 (/usr/bin/python3.11)
==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0. For instructions on enabling permissions and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM
==PROF== Disconnected from process 4242
==WARNING== No kernels were profiled.
"""


def test_counter_permission_is_said_not_no_csv_header():
    with pytest.raises(NcuError, match="ERR_NVGPUCTRPERM: no permission to read GPU performance counters"):
        ncu.check_errors(PERM_OUTPUT, 0)  # ncu exits 0 here: the return code alone does not tell


def test_other_ncu_errors_surface_ncu_own_line():
    with pytest.raises(NcuError, match="ncu: Failed to connect"):
        ncu.check_errors("==ERROR== Failed to connect to process\n", 1)
    ncu.check_errors("==WARNING== something\n", 0)  # warnings are not errors


def test_profile_with_a_fake_ncu_without_permission(tmp_path, monkeypatch):
    from attnroof.measure.kernels import linear_case

    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\ncat <<'EOF'\n" + PERM_OUTPUT + "EOF\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(NcuError, match="ERR_NVGPUCTRPERM") as e:
        ncu.profile([linear_case(16, 64, 64)], timeout_s=30)
    assert "CSV header" not in str(e.value)


def test_timed_out_ncu_takes_its_child_with_it(tmp_path):
    pidfile = tmp_path / "pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    t = time.monotonic()
    code, _, _ = ncu.run_group(["sh", "-c", script], dict(os.environ), 3.0)  # time to start `sleep`, loaded
    assert code is None and time.monotonic() - t < 30
    child = int(pidfile.read_text())
    # the grandchild (the profiled process, here `sleep`) is gone, not re-parented and alive; its
    # exit can lag the pipes' closing a little on a loaded machine, so look again for a while
    deadline = time.monotonic() + 10
    while True:
        alive = subprocess.run(
            ["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True
        ).stdout.strip()
        if alive == "" or alive.startswith("Z") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert alive == "" or alive.startswith("Z"), alive  # Z, or ZN under nice


def test_ncu_cache_control_is_said_beside_the_bytes():
    res = ncu.NcuResult(100.0, 50.0, 1e-3, 2)
    rec = {"key": "a", "bytes": 100.0}
    ncu.attach([rec], {"a": res})
    assert rec["ncu_bytes"] == 150.0 and rec["ncu_cache_control"].startswith("all: L2 flushed")


# ---------------------------------------------------------------- timing: do_bench that cannot build


class _Dev:
    is_cuda = True


def test_do_bench_failing_falls_back_to_cuda_events_and_says_so_once(monkeypatch):
    from attnroof.measure import timing

    def do_bench(*a, **k):
        raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")

    fake = types.ModuleType("triton.testing")
    fake.do_bench = do_bench  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setitem(sys.modules, "triton.testing", fake)
    monkeypatch.setattr(timing, "_DO_BENCH_BROKEN", None)
    calls = []
    monkeypatch.setattr(
        timing,
        "_cuda_events",
        lambda fn, dev, budget, flush: calls.append(1) or timing.Timing(1e-3, 3, "CUDA events"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t1 = timing.time_kernel(lambda: None, _Dev())  # type: ignore[arg-type]
        t2 = timing.time_kernel(lambda: None, _Dev())  # type: ignore[arg-type]
    assert t1.method == t2.method == "CUDA events" and len(calls) == 2
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "do_bench" in said[0] and "C compiler" in said[0] and "CUDA events" in said[0]


def test_do_bench_called_process_error_is_caught_too(monkeypatch):
    from attnroof.measure import timing

    def do_bench(*a, **k):
        raise subprocess.CalledProcessError(1, ["gcc"])

    fake = types.ModuleType("triton.testing")
    fake.do_bench = do_bench  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton.testing", fake)
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setattr(timing, "_DO_BENCH_BROKEN", None)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert timing._do_bench(lambda: None, timing.QUICK) is None
    assert timing._DO_BENCH_BROKEN and "CalledProcessError" in timing._DO_BENCH_BROKEN


# ---------------------------------------------------------------- the tf32 switch


def test_tf32_switch_keeps_legacy_reads_working():
    """Setting only ``fp32_precision`` (torch ≥ 2.9) makes a legacy ``allow_tf32`` read inside the
    block fail torch's "mix of the legacy and new APIs" check; the switch does not."""
    torch = pytest.importorskip("torch")
    from attnroof.measure.ceilings import _tf32

    before = torch.get_float32_matmul_precision()
    with _tf32(torch, True):
        assert torch.backends.cuda.matmul.allow_tf32 is True  # a legacy read: no error
        assert torch.get_float32_matmul_precision() == "high"
    with _tf32(torch, False):
        assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.get_float32_matmul_precision() == before


# ---------------------------------------------------------------- SDPA's skip reason


def test_skip_reason_keeps_the_pinned_backend_line():
    from attnroof.measure.kernels import pinned_warnings

    caught = [
        "Memory efficient kernel not used because: the head dim 512 is above 256",
        "Flash attention kernel not used because: head dim 512 > 256",
        "cuDNN attention kernel not used because: cudnn does not support head dim 512",
    ]
    assert pinned_warnings("sdpa-cudnn", caught) == [caught[2]]
    assert pinned_warnings("sdpa-flash", caught) == [caught[1]]
    assert pinned_warnings("sdpa-efficient", caught) == [caught[0]]
    assert pinned_warnings("sdpa-cudnn", ["something else"]) == ["something else"]  # nothing better to say


# ---------------------------------------------------------------- models that match what runs


def test_eager_mask_is_counted_per_query_head_like_s():
    from attnroof.ops import attention

    s, d, g = 512, 64, 4
    cost = attention(s, d, causal=True, mask_pass=True, group=g)
    mask = next(a for st in cost for a in st.reads if a.tensor == "mask")
    score = next(a for st in cost for a in st.writes if a.tensor == "S")
    assert mask.bytes == g * s * s * 1  # one bool byte per score, 4 query heads
    assert score.bytes == g * s * s * 2  # bf16 scores: the same count of elements


def test_sdpa_math_is_not_in_efficiency_claims():
    from attnroof.devices import get_device
    from attnroof.measure.records import new_record, place_record, set_time

    dev = get_device("h200")
    shape = {"s": 512, "d": 64, "batch": 1, "heads": 2, "group": 1, "causal": False}
    math_rec = set_time(new_record("k", "attention", "sdpa-math", shape, "bf16", "x"), 1e-3, 1e9, 1e7)
    eager = set_time(new_record("k", "attention", "eager", shape, "bf16", "x"), 1e-3, 1e9, 1e7)
    place_record(math_rec, dev, dev)
    place_record(eager, dev, dev)
    assert math_rec["bound_time_s"] == eager["bound_time_s"] and math_rec["efficiency"] is None
    assert eager["efficiency"] is not None


# ---------------------------------------------------------------- true ceilings


def test_stream_readers_need_triton(monkeypatch):
    from attnroof.measure import stream

    monkeypatch.setitem(sys.modules, "triton", None)
    stream.read_kernel.cache_clear()
    try:
        assert stream.stream_readers(object(), object()) == {}  # x.sum() stands alone: no error
    finally:
        stream.read_kernel.cache_clear()  # a later test with triton builds the kernel again


def test_roof_check_tells_a_low_ceiling_from_a_wrong_count():
    from attnroof.text.measure import roof_check

    base = {"efficiency": 1.1, "impossible": True, "bytes": 1000.0}
    low = roof_check([{**base, "key": "decode/sdpa-cudnn", "ncu_bytes": 1010.0}])
    wrong = roof_check([{**base, "key": "attention/eager", "ncu_bytes": 600.0}])
    unknown = roof_check([{**base, "key": "linear/linear", "ncu_bytes": None}])
    assert "a kernel beat the ceiling, so the ceiling is low" in low
    assert "ncu counted only 0.60× the model's bytes: the byte count is wrong" in wrong
    assert "rerun with --ncu" in unknown


# ---------------------------------------------------------------- the Triton read kernel


def test_triton_read_kernel_has_no_annotations_triton_cannot_resolve():
    """Triton 3.6/3.7 resolves a jit parameter's annotation as a global of the kernel: ``Any``
    raised ``NameError: Cannot access global variable Any`` and the kernel never compiled."""
    import ast
    import inspect

    from attnroof.measure import stream

    tree = ast.parse(inspect.getsource(stream))
    kernels = [
        f
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in f.decorator_list)
    ]
    assert [f.name for f in kernels] == ["_read"]
    for f in kernels:
        args = f.args.posonlyargs + f.args.args + f.args.kwonlyargs
        assert all(a.annotation is None or ast.unparse(a.annotation) == "tl.constexpr" for a in args), (
            ast.unparse(f.args)
        )
        assert f.returns is None


def test_triton_read_kernel_compiles_for_sm90_without_a_gpu(tmp_path, monkeypatch):
    """The kernel goes through Triton's whole pipeline for an H100/H200 (sm_90) on the CPU:
    Python → TTIR → TTGIR → LLVM IR → PTX → cubin (Triton's own ptxas). A NameError as the
    annotations' raised here, where the first GPU run would only have seen x.sum() win."""
    pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from attnroof.measure import stream

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compiled afresh, not from a cache
    kernel = stream.read_kernel()
    src = ASTSource(kernel, stream.STREAM_SIGNATURE, constexprs={"BLOCK": stream.STREAM_BLOCKS[0]})
    compiled = compile(src, target=GPUTarget("cuda", 90, 32))
    ptx = compiled.asm["ptx"]
    assert ".target sm_90" in ptx and ".visible .entry _read" in ptx
    assert "ld.global" in ptx and "atom.global" in ptx  # it reads x and adds once per program
    assert ".evict_first" in ptx or "evict_first" in ptx  # streamed, not kept in L2
    assert compiled.asm["cubin"][:4] == b"\x7fELF"  # ptxas made a cubin


def test_a_read_kernel_that_fails_is_recorded_with_its_reason(monkeypatch):
    torch = pytest.importorskip("torch")
    from attnroof.measure import ceilings
    from attnroof.measure.env import TorchDevice
    from attnroof.measure.timing import Timing

    class CudaLike(TorchDevice):
        is_cuda = True  # type: ignore[assignment]  # the CUDA branch, on the CPU

        def free_memory(self) -> None:
            pass

    dev = CudaLike(torch, torch.device("cpu"), "stand-in", 1.0, 1.0)  # smallest buffer (16 MiB)

    def broken():
        raise NameError("Cannot access global variable Any from within @jit'ed function")

    monkeypatch.setattr(ceilings, "stream_readers", lambda torch, x: {"triton stream, block 2048": broken})
    monkeypatch.setattr(
        ceilings, "time_kernel", lambda fn, *a, **k: (fn(), Timing(1e-3, 3, "stand-in", 1e-3))[1]
    )
    recs = [r for r, _ in ceilings._bandwidth(dev, {})]
    read = next(r for r in recs if r["impl"] == ceilings.READ)
    assert (
        read["skipped"]
        == "triton stream, block 2048: NameError: Cannot access global variable Any from within @jit'ed function"
    )
    assert read["timing"].endswith("(torch)") and read["status"] == "ok"
    assert all("skipped" not in r for r in recs if r["impl"] != ceilings.READ)

    monkeypatch.setattr(ceilings, "stream_readers", lambda torch, x: {})  # no triton: said too
    read = next(r for r, _ in ceilings._bandwidth(dev, {}) if r["impl"] == ceilings.READ)
    assert read["skipped"] == "triton stream: triton is not importable"


# ---------------------------------------------------------------- the cache flush reads


def test_cache_flush_reads_its_buffer_and_writes_nothing(monkeypatch):
    """A flush that writes leaves dirty lines for the timed kernel to write back: it reads."""
    pytest.importorskip("torch")
    from attnroof.measure import env

    monkeypatch.setattr(env, "cpu_flush_bytes", lambda: 1 << 20)
    dev = env.local_device("cpu")
    dev.flush_caches()
    buf = dev._flush
    # 1 MiB of 8-byte words: 2**20 / 8 = 131,072 of them
    assert buf.numel() * buf.element_size() == 1 << 20 and buf.numel() == 131_072
    assert int(dev._sink) == 0
    buf[12345] = 7  # a sentinel: the next flush must see it (read) and leave it (no write)
    before = buf.clone()
    dev.flush_caches()
    assert dev._flush is buf and int(dev._sink) == 7  # read: the sum saw the sentinel
    assert bool((buf == before).all())  # not written: the content is as it was


def test_cache_flush_reads_at_memory_speed(monkeypatch):
    """The flush sums 8-byte words: a sum of int8 widened each byte and took ~1.5 s for 64 MiB on
    the test machine (the suite ran past 15 minutes); int64 words take ~2 ms. 0.5 s is the bound
    even on a loaded machine (64 MiB at 128 MB/s)."""
    pytest.importorskip("torch")
    import time

    from attnroof.measure import env

    monkeypatch.setattr(env, "cpu_flush_bytes", lambda: 64 * env.MiB)
    dev = env.local_device("cpu")
    dev.flush_caches()  # allocates and zeroes
    t0 = time.perf_counter()
    for _ in range(3):
        dev.flush_caches()
    assert (time.perf_counter() - t0) / 3 < 0.5


# ---------------------------------------------------------------- inputs drawn once, on the device


def test_inputs_are_drawn_on_the_device_once_per_shape(monkeypatch):
    """A CPU draw moved to the device was 6.5e10 normals for the quick CUDA plan, drawn again for
    each implementation: the inputs are drawn on the device given, by its own seeded generator,
    in the case's dtype, once per shape, and the shape before is let go."""
    torch = pytest.importorskip("torch")
    from attnroof.measure import env
    from attnroof.measure.kernels import attention_case, decode_case
    from attnroof.measure.runner import measure_case
    from attnroof.measure.timing import QUICK

    draws = []

    class CountingTorch:  # torch, with every randn call written down
        def __getattr__(self, name):
            return getattr(torch, name)

        def randn(self, *shape, generator, device, dtype):
            draws.append((shape, generator.device, device, dtype, generator.initial_seed()))
            return torch.randn(*shape, generator=generator, device=device, dtype=dtype)

    monkeypatch.setattr(env, "cpu_flush_bytes", lambda: 1 << 20)
    real = env.local_device("cpu")
    dev = env.TorchDevice(CountingTorch(), real.device, real.name, real.memory_limit_bytes, 1.0)
    prefill = [
        attention_case(impl, 128, 32, heads=2, causal=causal)
        for causal in (False, True)
        for impl in ("eager", "sdpa-math", "sdpa-flash")
    ]
    recs = [measure_case(c, dev, budget=QUICK) for c in prefill]
    assert [r["status"] for r in recs] == ["ok"] * 6, [r.get("reason") for r in recs]
    # six cases, one shape: q, k, v drawn once (seeds 0, 1, 2), on the CPU, in bf16
    assert draws == [((1, 2, 128, 32), real.device, real.device, torch.bfloat16, seed) for seed in (0, 1, 2)]
    q = dev.inputs[0]
    assert measure_case(prefill[0], dev, budget=QUICK)["rel_error"] == recs[0]["rel_error"]  # same numbers
    assert len(draws) == 3 and dev.inputs[0] is q

    measure_case(decode_case("eager-gqa", 256, 32, heads=4, group=2), dev, budget=QUICK)
    measure_case(decode_case("sdpa-math", 256, 32, heads=4, group=2), dev, budget=QUICK)
    # a new shape: q (1, 2 kv heads, 2 queries, 32), k and v (1, 2, 256, 32), once for both
    assert [d[0] for d in draws[3:]] == [(1, 2, 2, 32), (1, 2, 256, 32), (1, 2, 256, 32)]
    assert all(t is not q for t in dev.inputs.values())  # the prefill inputs are let go
    dev.drop_inputs()
    assert dev.inputs == {}


# ---------------------------------------------------------------- ncu is never orphaned


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while True:
        stat = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout
        if stat.strip() == "" or stat.strip().startswith("Z"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.mark.parametrize("sig, code", [("SIGTERM", -15), ("SIGINT", -2)])
def test_a_stopped_measurement_takes_ncu_and_its_child_with_it(tmp_path, sig, code):
    """ncu runs in a session of its own, so a step's ``timeout`` (SIGTERM to the measuring
    process) never reached it: ncu and the profiled child kept the GPU. A stop signal now kills
    the group first. Stand-ins: ``sh`` for ncu, ``sleep`` for the profiled child."""
    import signal

    pidfile = tmp_path / "pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys; from attnroof.measure import ncu; "
            f"ncu.run_group(['sh', '-c', 'sleep 120 & echo $! > {pidfile}; wait'], dict(os.environ), 300)",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    child = int(pidfile.read_text())
    parent.send_signal(getattr(signal, sig))
    assert (
        parent.wait(timeout=30) == code
    )  # ended by the signal (SIGINT: by KeyboardInterrupt, as Python does)
    assert _gone(child), f"the profiled stand-in {child} outlived the measurement"


@pytest.mark.parametrize("sig, code", [("SIGTERM", -15), ("SIGINT", -2)])
def test_a_stop_before_the_group_is_known_still_takes_it(tmp_path, sig, code):
    """The stop signal that came while ncu was still starting (before its process id was known:
    the window that made the test above fail now and then under load) waits for the group and
    kills it: here it is sent before the stand-in starts, and the stand-in does not outlive it."""
    pidfile = tmp_path / "pid"
    script = (
        "import os, signal, subprocess; from attnroof.measure import ncu\n"
        "with ncu._group_dies_with_us() as started:\n"
        f"    os.kill(os.getpid(), signal.{sig})\n"
        "    p = subprocess.Popen(['sleep', '120'], start_new_session=True)\n"
        f"    open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "    started(p.pid)\n"
        "    p.wait()\n"
    )
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert parent.returncode == code, parent.stderr
    assert _gone(int(pidfile.read_text())), "the stand-in outlived the stop"


def test_ncu_child_replaces_done_json_whole_after_each_case(tmp_path, monkeypatch):
    """done.json is read by the parent after a timeout, possibly while the child writes it: each
    write is a whole new file renamed over the old (outfile's atomic write), never a half one."""
    from attnroof import outfile
    from attnroof.measure import env, kernels

    class Cuda:
        _sleep = staticmethod(lambda cycles: None)
        profiler = types.SimpleNamespace(start=lambda: None, stop=lambda: None)

    dev = types.SimpleNamespace(
        torch=types.SimpleNamespace(cuda=Cuda), sync=lambda: None, free_memory=lambda: None
    )
    monkeypatch.setattr(env, "local_device", lambda *a: dev)
    monkeypatch.setattr(kernels, "prepare", lambda case, dev: kernels.Prepared(lambda: None, lambda out: 0.0))
    written = []
    real = outfile._replace
    monkeypatch.setattr(
        outfile, "_replace", lambda path, data: (written.append(json.loads(data)), real(path, data))
    )
    cases = [
        {"kind": "linear", "impl": "linear", "shape": {"n": n, "k": 8, "m": 8}, "dtype": "bf16"}
        for n in (1, 2)
    ]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    assert ncu._child(str(tmp_path / "cases.json"), str(tmp_path / "done.json")) == 0
    first = ["linear/linear/bf16/n=1,k=8,m=8", True]
    second = ["linear/linear/bf16/n=2,k=8,m=8", True]
    assert written == [[first], [first, second], [first, second]]  # after each case, then at the end
    assert json.loads((tmp_path / "done.json").read_text()) == [first, second]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.json", "done.json"]  # no temporary left


def test_bandwidth_buffers_are_let_go_before_the_memory_is_given_back(monkeypatch):
    """free_memory() (torch.cuda.empty_cache) gives back only blocks nothing holds: the read,
    write and copy buffers (and the read kernels holding x) must be gone by then."""
    import gc

    torch = pytest.importorskip("torch")
    from attnroof.measure import ceilings
    from attnroof.measure.env import TorchDevice
    from attnroof.measure.timing import Timing

    n = 16 * 2**20 // 4  # the smallest buffer, 16 MiB of fp32
    alive_at_free = []

    class CudaLike(TorchDevice):
        is_cuda = True  # type: ignore[assignment]  # the CUDA branch, on the CPU

        def free_memory(self) -> None:
            gc.collect()
            alive_at_free.append(
                sum(1 for o in gc.get_objects() if type(o) is torch.Tensor and o.numel() == n)
            )

    dev = CudaLike(torch, torch.device("cpu"), "stand-in", 1.0, 1.0)
    monkeypatch.setattr(ceilings, "stream_readers", lambda torch, x: {"triton stream": lambda: x.sum()})
    monkeypatch.setattr(
        ceilings, "time_kernel", lambda fn, *a, **k: (fn(), Timing(1e-3, 3, "stand-in", 1e-3))[1]
    )
    recs = [r for r, _ in ceilings._bandwidth(dev, {})]
    assert [r["shape"]["bytes"] for r in recs] == [4 * n] * 3
    assert alive_at_free == [0]  # x and y (2 × 16 MiB) were gone when the memory was given back


def test_the_quick_cuda_plan_draws_once_per_shape_and_every_case_fits_an_h200():
    """The check's quick CUDA plan: 65 cases draw inputs for 14 shapes (once each, on the GPU),
    where each case drew its own on the CPU before; none is skipped for memory on an H200."""
    from attnroof.devices import get_device
    from attnroof.measure.env import MEMORY_SHARE
    from attnroof.measure.inputs import input_key
    from attnroof.measure.kernels import estimate_bytes
    from attnroof.measure.suite import plan_cases

    cases = plan_cases("cuda", quick=True)
    # prefill: 3 s × 2 (causal or not) × 5 implementations; decode: 3 s × 2 groups × 5; linear: 5
    assert len(cases) == 3 * 2 * 5 + 3 * 2 * 5 + 5 == 65
    # shapes: 3 prefill (causal shares its inputs), 3 × 2 decode, 5 linear
    assert len({input_key(c) for c in cases}) == 3 + 6 + 5 == 14
    room = get_device("h200").capacity_bytes * MEMORY_SHARE  # 150.1 GB × 0.8 = 120 GB
    biggest = max(cases, key=estimate_bytes)
    assert biggest.impl == "sdpa-math" and biggest.shape["s"] == 16384
    assert estimate_bytes(biggest) < room  # 64.8 GB: three fp32 score matrices of 16 heads
