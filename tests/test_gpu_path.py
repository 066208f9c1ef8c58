"""The CUDA path's failure modes, each exercised on the CPU with stand-ins: ncu without counter
permission, a timed-out ncu's process tree and the bytes it finished, an ``==ERROR==`` line beside
a whole profile, ncu's cache control beside the bytes, triton's ``do_bench`` failing to build its
helper or to find libcuda, the tf32 switch and the pinned SDPA backend's warning.

No test here asserts how long anything takes (benchmarks/speed.py does), and none depends on a
signal arriving within a window: a signal is sent once the code under test has shown, by a file
it wrote, that it is where the signal is meant to find it, and each outcome is waited for by its
state (a process gone), never by a sleep. A wait that sees nothing for :data:`HANG_S` is a hang."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import types
import warnings

import pytest

from attnroof.measure import ncu
from attnroof.measure.ncu import NcuError

SAMPLE = os.path.join(os.path.dirname(__file__), "data", "ncu-sample.csv")
HANG_S = 600.0
"""How long a wait for a state lasts before the test calls it a hang: never a time the code must
meet (each wait ends as soon as the state is seen)."""
DEAD_S = 60.0
"""How long a process sent SIGKILL may take to be seen ended (gone or a zombie) before it is
called a survivor: SIGKILL cannot be caught, so only a loaded scheduler delays its end."""


def _wait_for(what: str, seen, proc: subprocess.Popen | None = None) -> None:
    """Until ``seen()`` holds (the state, looked at every 20 ms); a hang after :data:`HANG_S`."""
    end = time.monotonic() + HANG_S
    while not seen():
        assert proc is None or proc.poll() is None, f"{what}: the process ended first"
        assert time.monotonic() < end, f"{what}: not seen in {HANG_S:.0f} s (a hang)"
        time.sleep(0.02)


def _pid_in(path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else None


def _default_sigint() -> str:
    """The line a child script starts with: SIGINT raises KeyboardInterrupt, as a terminal's Ctrl-C
    finds it, whatever this test runs under (a shell's background job inherits SIGINT ignored,
    and so would every process it starts)."""
    return "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


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
        ncu.profile([linear_case(16, 64, 64)], timeout_s=HANG_S)  # a limit the stand-in meets unless stuck
    assert "CSV header" not in str(e.value)


def test_timed_out_ncu_takes_its_child_with_it(tmp_path):
    """Past its time, ncu (here ``sh``) and the profiled child under it (``sleep``) are killed, not
    left holding the GPU. The time limit is doubled until the stand-in had started its child
    before the limit came (a loaded machine can be slower than any one limit): the outcome is
    then checked, however long that took."""
    pidfile = tmp_path / "pid"
    script = f"sleep 600 & echo $! > {pidfile}; wait"
    for limit in (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0):
        code, _, _ = ncu.run_group(["sh", "-c", script], dict(os.environ), limit)
        assert code is None  # ran past its limit
        if _pid_in(pidfile) is not None:
            break
    child = _pid_in(pidfile)
    assert child is not None, "the stand-in never started its child"
    assert _gone(child), f"the profiled stand-in {child} outlived ncu's time limit"


def test_timed_out_ncu_keeps_the_bytes_of_the_cases_it_finished(tmp_path, monkeypatch):
    """ncu prints its report only when the profiled child ends: killing ncu at the time limit
    threw away every byte it had counted, and the message blamed a missing CSV header. Now the
    child is killed first and ncu prints what it has. Stand-in ncu: it marks the first of two
    cases done, starts a child that never ends (``sleep``) and prints the report of the one case
    once that child is gone, with the line a killed child makes ncu print. The limit doubles
    until the stand-in's child was known before the limit came."""
    from attnroof.measure.kernels import linear_case

    fake = tmp_path / "ncu"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, subprocess, sys\n"
        "args = sys.argv[1:]\n"
        "c = json.load(open(args[-2]))[0]\n"
        "key = '{kind}/{impl}/{dtype}/'.format(**c) + ','.join(f'{k}={v}' for k, v in c['shape'].items())\n"
        "json.dump({'marked': [[key, True]], 'end': None}, open(args[-1], 'w'))\n"
        "app = subprocess.Popen(['sleep', '600'])\n"
        "open(os.environ['ATTNROOF_NCU_CHILD_PID'], 'w').write(str(app.pid))\n"
        "app.wait()\n"
        f"sys.stdout.write(open({SAMPLE!r}).read())\n"
        "print('==ERROR== The application returned an error code (9).')\n"
        "sys.exit(9)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    cases = [linear_case(16, 64, 64), linear_case(32, 64, 64)]
    said: list[str] = []
    for limit in (8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0):
        said.clear()
        try:
            results = ncu.profile(cases, timeout_s=limit, say=said.append)
            break
        except NcuError as e:  # the limit came before the stand-in's child was known: longer
            assert "printed no profile" in str(e), str(e)
    else:
        raise AssertionError("the stand-in never got its child started within a limit")
    assert list(results) == [cases[0].key]
    assert results[cases[0].key].bytes == (34_391_552 + 536_887_552 + 556_054_016) + (
        507_348_992 + 516_424_704 + 8_956_672
    )
    assert said == [f"ncu ran past {limit:.0f} s; DRAM bytes for 1 of 2 cases only"]


def test_a_complete_profile_is_kept_beside_an_error_line(tmp_path, monkeypatch):
    """An ``==ERROR==`` line (here: the child's exit status) threw away a profile that held every
    case; now the bytes are kept and the line said beside them."""
    from attnroof.measure.kernels import linear_case

    fake = tmp_path / "ncu"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "args = sys.argv[1:]\n"
        "c = json.load(open(args[-2]))[0]\n"
        "key = '{kind}/{impl}/{dtype}/'.format(**c) + ','.join(f'{k}={v}' for k, v in c['shape'].items())\n"
        "json.dump({'marked': [[key, True]], 'end': 'finished'}, open(args[-1], 'w'))\n"
        f"sys.stdout.write(open({SAMPLE!r}).read())\n"
        "print('==ERROR== The application returned an error code (1).')\n"
        "sys.exit(1)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    case = linear_case(16, 64, 64)
    said: list[str] = []
    results = ncu.profile([case], timeout_s=HANG_S, say=said.append)
    assert list(results) == [case.key] and results[case.key].kernels == 3
    assert said == [
        "ncu said 'The application returned an error code (1).', but its report holds every case: kept"
    ]
    # without a profile, ncu's own line is the error, as before
    with pytest.raises(NcuError, match="ncu: The application returned an error code"):
        ncu.check_errors("==ERROR== The application returned an error code (1).\n", 1)


def test_the_child_does_not_start_a_case_that_would_not_end_before_its_deadline(tmp_path, monkeypatch):
    """Inside ncu, the child stops before a case when less than 1.5× its longest case is left
    before its deadline: it ends by itself and ncu prints the cases it finished. A clock that
    moves 5 s a kernel run: each case (a warm-up and the marked run) takes 10 s; 25 s left."""
    from attnroof.measure import env, kernels

    clock = [1_000.0]

    def run():
        clock[0] += 5.0

    monkeypatch.setattr(ncu, "time", types.SimpleNamespace(time=lambda: clock[0], monotonic=lambda: clock[0]))
    dev = _child_device()
    monkeypatch.setattr(env, "local_device", lambda *a: dev)
    monkeypatch.setattr(kernels, "prepare", lambda case, dev: kernels.Prepared(run, lambda out: 0.0))
    monkeypatch.setenv(ncu.CHILD_DEADLINE, str(clock[0] + 25))
    monkeypatch.setenv(ncu.CHILD_PID, str(tmp_path / "child.pid"))
    cases = [
        {"kind": "linear", "impl": "linear", "shape": {"n": n, "k": 8, "m": 8}, "dtype": "bf16"}
        for n in (1, 2, 3)
    ]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    assert ncu._child(str(tmp_path / "cases.json"), str(tmp_path / "done.json")) == 0
    assert int((tmp_path / "child.pid").read_text()) == os.getpid()  # the process stopped first
    done = json.loads((tmp_path / "done.json").read_text())
    # case 1: 25 s left (nothing timed yet); case 2: 15 s left, 1.5 × 10 s; case 3: 5 s left
    assert done["marked"] == [
        ["linear/linear/bf16/n=1,k=8,m=8", True],
        ["linear/linear/bf16/n=2,k=8,m=8", True],
    ]
    assert done["end"] == (
        "stopped before linear/linear/bf16/n=3,k=8,m=8: 5 s left before its deadline, and a case took up to 10 s"
    )


def _child_device():
    class Cuda:
        _sleep = staticmethod(lambda cycles: None)
        profiler = types.SimpleNamespace(start=lambda: None, stop=lambda: None)

    return types.SimpleNamespace(
        torch=types.SimpleNamespace(cuda=Cuda), sync=lambda: None, free_memory=lambda: None
    )


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


def test_do_bench_that_cannot_find_libcuda_falls_back_to_cuda_events(monkeypatch):
    """Triton asserts when it finds no libcuda.so where it looks ("libcuda.so cannot found"),
    for the median as for every repetition: that AssertionError crashed the timing of every case;
    now it is said once and CUDA events time them."""
    from attnroof.measure import timing

    asked = []

    def do_bench(*a, return_mode="mean", **k):
        asked.append(return_mode)
        raise AssertionError("libcuda.so cannot found!")

    fake = types.ModuleType("triton.testing")
    fake.do_bench = do_bench  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setitem(sys.modules, "triton.testing", fake)
    monkeypatch.setattr(timing, "_DO_BENCH_BROKEN", None)
    monkeypatch.setattr(
        timing, "_cuda_events", lambda fn, dev, budget, flush: timing.Timing(1e-3, 3, "CUDA events")
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t1 = timing.time_kernel(lambda: None, _Dev())  # type: ignore[arg-type]
        t2 = timing.time_kernel(lambda: None, _Dev())  # type: ignore[arg-type]
    assert t1.method == t2.method == "CUDA events"
    assert asked == ["all", "median"]  # tried once (both modes), never again in this process
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "AssertionError: libcuda.so cannot found!" in said[0], said


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


def _gone(pid: int) -> bool:
    """Ended (gone, or a zombie: Z, or ZN under nice), looked at until :data:`DEAD_S`."""
    end = time.monotonic() + DEAD_S
    while True:
        stat = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout
        if stat.strip() == "" or stat.strip().startswith("Z"):
            return True
        if time.monotonic() > end:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # the survivor goes, the test fails
            return False
        time.sleep(0.05)


def _measuring(pidfile, **popen) -> subprocess.Popen:
    """A measuring process running a stand-in ncu (``sh``) whose profiled child (``sleep``) writes
    its id to ``pidfile`` once started: the state a stop signal is meant to find."""
    script = (
        _default_sigint() + "import os; from attnroof.measure import ncu\n"
        f"ncu.run_group(['sh', '-c', 'sleep 600 & echo $! > {pidfile}; wait'], dict(os.environ), 600)\n"
    )
    return subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.parametrize("sig, code", [("SIGTERM", -15), ("SIGINT", -2)])
def test_a_stopped_measurement_takes_ncu_and_its_child_with_it(tmp_path, sig, code):
    """A stop signal to the measuring process kills ncu and the profiled child before it takes
    its course (SIGTERM: the default, the process ends by it; SIGINT: KeyboardInterrupt). It is
    sent once the child is running, and the outcome waited for by state."""
    pidfile = tmp_path / "pid"
    parent = _measuring(pidfile)
    try:
        _wait_for("the stand-in's child", lambda: _pid_in(pidfile) is not None, parent)
        parent.send_signal(getattr(signal, sig))
        assert parent.wait(timeout=HANG_S) == code, parent.stderr.read()
    finally:
        if parent.poll() is None:
            parent.kill()
    child = _pid_in(pidfile)
    assert child is not None and _gone(child), f"the profiled stand-in {child} outlived the measurement"


def test_a_hard_kill_of_the_measuring_group_takes_ncu_too(tmp_path):
    """``timeout --kill-after`` ends a step with SIGKILL to its process group, which no handler
    sees: ncu started in a session of its own outlived it, the profiled child holding the GPU.
    ncu now stays in its caller's group, and goes with it."""
    pidfile = tmp_path / "pid"
    parent = _measuring(pidfile, start_new_session=True)  # a group of its own, as timeout makes
    try:
        _wait_for("the stand-in's child", lambda: _pid_in(pidfile) is not None, parent)
        os.killpg(parent.pid, signal.SIGKILL)
        assert parent.wait(timeout=HANG_S) == -9
    finally:
        if parent.poll() is None:
            parent.kill()
    child = _pid_in(pidfile)
    assert child is not None and _gone(child), f"the profiled stand-in {child} outlived a hard kill"


@pytest.mark.parametrize("sig, code", [("SIGTERM", -15), ("SIGINT", -2)])
def test_a_stop_before_the_process_is_known_still_takes_it(tmp_path, sig, code):
    """A stop signal that comes while ncu is still starting (before its process id is known)
    waits for it and kills it: here the signal is sent, and handled, before the stand-in starts,
    and the stand-in does not outlive it."""
    pidfile = tmp_path / "pid"
    script = _default_sigint() + (
        "import os, signal, subprocess; from attnroof.measure import processes\n"
        "with processes.tree_dies_with_us() as started:\n"
        f"    os.kill(os.getpid(), signal.{sig})  # handled before os.kill returns: now pending\n"
        "    p = subprocess.Popen(['sleep', '600'])\n"
        f"    open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "    started(p.pid)\n"
        "    p.wait()\n"
    )
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_S)
    assert parent.returncode == code, parent.stderr
    assert _gone(int(pidfile.read_text())), "the stand-in outlived the stop"


def test_ncu_child_replaces_done_json_whole_after_each_case(tmp_path, monkeypatch):
    """done.json is read by the parent after a timeout, possibly while the child writes it: each
    write is a whole new file renamed over the old (outfile's atomic write), never a half one."""
    from attnroof import outfile
    from attnroof.measure import env, kernels

    dev = _child_device()
    monkeypatch.setattr(env, "local_device", lambda *a: dev)
    monkeypatch.setattr(kernels, "prepare", lambda case, dev: kernels.Prepared(lambda: None, lambda out: 0.0))
    monkeypatch.delenv(ncu.CHILD_PID, raising=False)
    monkeypatch.delenv(ncu.CHILD_DEADLINE, raising=False)
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
    assert written == [  # after each case, then at the end
        {"marked": [first], "end": None},
        {"marked": [first, second], "end": None},
        {"marked": [first, second], "end": "finished"},
    ]
    assert json.loads((tmp_path / "done.json").read_text()) == written[-1]
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
