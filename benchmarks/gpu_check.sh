#!/usr/bin/env bash
# GPU check: every CUDA branch of attnroof once, then calibrate and forecast held-out shapes, on
# the local CUDA device. Never run on a GPU before: each step has its own time limit, and
# summary.txt is written AS IT GOES (a step that fails or times out is marked and the next runs),
# so a run cut short still says what it saw.
#
#   benchmarks/gpu_check.sh [OUTDIR]   # writes under OUTDIR, else $OUT if set, else results/
#
# Without CUDA (torch importable, CUDA not usable) the flow runs on the CPU: the CUDA-only steps
# (ncu-probe, timer-do-bench, ncu-suite) are skipped, each with the reason in the summary, and the
# rest runs as on a GPU (about 200 s on a 2-core machine).
#
# Steps (limit): env; ncu permission probe (60 s); ceilings with the Triton read kernel (120 s);
# each implementation × dtype once (bf16, fp16, fp32 with the tf32 switch; 240 s); the timers
# (do_bench and CUDA events, 60 s); `--ncu` through the real child (180 s); the quick suite
# (300 s); calibrate on part of it and forecast the rest (120 s).
# Leaves exactly two files in the output folder (only a few files of a folder come back from a
# remote GPU machine): summary.txt, written as it goes, and gpu_check.tar.gz, packed on every exit
# (a trap: done, failed, or interrupted) with everything else it wrote: summary.txt, env.txt,
# ceilings.json, results.jsonl, cal.json, forecast.txt, accuracy.txt, one <step>.log per step.
set -uo pipefail

cd "$(dirname "$0")/.."
out="${1:-${OUT:-results}}"  # the output folder: the first argument, else $OUT, else results/
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
py="${PYTHON:-}"  # the interpreter: $PYTHON, else python3 (what CUDA images have), else python
if [ -z "$py" ]; then
    if command -v python3 >/dev/null; then py=python3; else py=python; fi
fi
summary="$out/summary.txt"
: > "$summary"
archive="$out/gpu_check.tar.gz"
work=$(mktemp -d "$out/.gpu_check.XXXXXX")  # every file but the summary, until packed

# pack: the summary and every file written into one archive, the work folder removed
child=
pack() {
    local rc=$?
    trap - EXIT
    if [ -n "$child" ]; then  # a step still running: stop it (timeout passes TERM on) and wait
        kill -TERM "$child" 2>/dev/null
        wait "$child" 2>/dev/null
    fi
    cp "$summary" "$work/summary.txt" 2>/dev/null
    local n; n=$(find "$work" -type f | wc -l)
    if tar -czf "$archive.part" -C "$work" . && mv -f "$archive.part" "$archive"; then
        rm -rf "$work"
        echo "gpu_check: packed $n files into $archive" >&2
    else
        echo "gpu_check: could not pack $work into $archive; the files stay in $work" | tee -a "$summary" >&2
    fi
    exit "$rc"
}
trap pack EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { echo "$*" | tee -a "$summary"; }

failed=()  # the steps that failed, timed out, or had a case that is not ok or skipped

# statuses FILE...: "N skip, N wrong, ..." of the records' "status" fields in FILE (JSON lines, or
# the pretty JSON that --json prints), every status but ok, one count each
statuses() {
    cat "$@" 2>/dev/null | grep -o '"status": *"[a-z]*"' | sed 's/.*"\([a-z]*\)"$/\1/' | grep -vx ok \
        | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}'
}

# [results=FILE] step NAME LIMIT_S COMMAND...: run with a time limit, log to NAME.log, one line in
# the summary now: "ok", "ok, N skip" (cases that cannot run here, each with its reason in the
# records), or ERRORS when a case is wrong or errored or ncu measured nothing; the statuses are
# read from the log (what --json printed) and from FILE, where the step writes its records
step() {
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS rc log="$work/$name.log"
    # in the background and waited for, so that a signal to this script is handled at once (bash
    # defers a trap until a foreground child ends): the trap stops the step, then packs
    timeout --kill-after=10 "$limit" "$@" < /dev/stdin > "$log" 2>&1 &  # stdin kept: a here-doc step
    child=$!
    wait "$child"
    rc=$?
    child=
    local took=$((SECONDS - t0))
    if [ $rc -eq 0 ]; then
        local counts bad ncu
        counts=$(statuses "$log" ${results:+"$results"})
        bad=$(echo "$counts" | tr ',' '\n' | grep -v ' skip$' | sed 's/^ //' | paste -sd, - | sed 's/,/, /g')
        ncu=$(grep -m1 -o 'ncu: .*DRAM bytes not measured' "$log")
        if [ -n "$bad" ] || [ -n "$ncu" ]; then
            failed+=("$name")
            say "ERRORS  $name (${took} s): ${counts:-all ok}${ncu:+; $ncu}"
        elif [ -n "$counts" ]; then
            say "ok      $name (${took} s), $counts"
        else
            say "ok      $name (${took} s)"
        fi
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        failed+=("$name")
        say "TIMEOUT $name after ${limit} s: $(tail -n 1 "$log")"
    else
        failed+=("$name")
        say "FAILED  $name (exit $rc, ${took} s): $(grep -m1 -E 'error|Error' "$log" || tail -n 1 "$log")"
    fi
    return 0
}

say "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
# the CUDA check says what it found: the interpreter, torch.__version__, torch.version.cuda and,
# when CUDA is not usable, torch's own error (torch.cuda.init() raises with the reason)
cuda_check=$("$py" - 2>&1 <<'PY'
import sys
print("interpreter", sys.executable, "(Python", sys.version.split()[0] + ")")
try:
    import torch
except Exception as e:
    print("torch: cannot import:", type(e).__name__, " ".join(str(e).split())[:200])
    sys.exit(1)
print("torch", torch.__version__, "torch.version.cuda", torch.version.cuda)
try:
    torch.cuda.init()
    print("CUDA device:", torch.cuda.get_device_name())
except Exception as e:
    print("CUDA: not usable:", type(e).__name__, " ".join(str(e).split())[:200])
    sys.exit(1)
PY
)
cuda_rc=$?
[ -n "$cuda_check" ] || cuda_check="$py: cannot run (exit $cuda_rc)"
echo "$cuda_check" | sed 's/^/  env: /' | tee -a "$summary"
echo "$cuda_check" > "$work/env.txt"
cuda=1
if [ $cuda_rc -ne 0 ]; then
    if ! "$py" -c 'import torch' 2>/dev/null; then
        say "gpu_check: torch is needed (pip install 'attnroof[measure]'; with CUDA on a GPU machine)"
        exit 2
    fi
    cuda=
    no_cuda="no CUDA here ($(echo "$cuda_check" | tail -n 1))"
    say "gpu_check: $no_cuda: the CUDA-only steps are skipped, the rest runs on the CPU"
fi

# cuda_step NAME LIMIT_S COMMAND...: a step that needs CUDA; without it, skipped and said why
cuda_step() {
    if [ -n "$cuda" ]; then
        step "$@"
    else
        say "skipped $1: $no_cuda"
    fi
}
tools=$({
    "$py" -c 'import triton; print("triton", triton.__version__)' 2>/dev/null || echo "triton: absent (CUDA events timing)"
    command -v cc >/dev/null && echo "C compiler: $(command -v cc)" || echo "C compiler: none (do_bench cannot build; CUDA events)"
    command -v ncu >/dev/null && ncu --version | tail -1 || echo "ncu: not on PATH"
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null || true
} 2>&1)
echo "$tools" >> "$work/env.txt"
echo "$tools" | sed 's/^/  env: /' | tee -a "$summary"

dev=(--device h200)
"$py" -m attnroof attention -s 1k -d 64 --device h200 >/dev/null 2>&1 || dev=()

# ncu permission: one tiny case under ncu; ERR_NVGPUCTRPERM is said in one line
cuda_step ncu-probe 60 "$py" -m attnroof measure linear -n 16 -k 256 -m 256 --ncu --json

results="$work/ceilings.json" step ceilings 120 "$py" -m attnroof measure ceilings --quick "${dev[@]}" -o "$work/ceilings.json"
ceil=()
[ -s "$work/ceilings.json" ] && ceil=(--ceilings "$work/ceilings.json")

for dt in bf16 fp16 fp32; do
    step "attention-$dt" 120 "$py" -m attnroof measure attention -s 1024 -d 128 --heads 8 --causal --dtype "$dt" "${ceil[@]}" --json
    step "decode-$dt" 60 "$py" -m attnroof measure decode -s 4096 -d 128 --batch 4 --heads 32 --group 4 --dtype "$dt" "${ceil[@]}" --json
    step "linear-$dt" 60 "$py" -m attnroof measure linear -n 1024 -k 4096 -m 4096 --dtype "$dt" "${ceil[@]}" --json
done

# the two timers: do_bench (triton; falls back to CUDA events, said once) and plain CUDA events
cuda_step timer-do-bench 60 "$py" - <<'PY'
import torch
from attnroof.measure.env import local_device
from attnroof.measure.timing import QUICK, time_kernel
dev = local_device("cuda")
x = torch.randn(1 << 24, device="cuda")
print(time_kernel(lambda: x.sum(), dev, QUICK), time_kernel(lambda: x.sum(), dev, QUICK, flush=False))
PY

cuda_step ncu-suite 180 env ATTNROOF_NCU_TIMEOUT_S=150 "$py" -m attnroof measure attention -s 2048 -d 128 --heads 16 --ncu "${ceil[@]}" --json

results="$work/results.jsonl" step suite 300 "$py" -m attnroof measure suite --quick "${ceil[@]}" "${dev[@]}" -o "$work/results.jsonl" --resume
tail -n 3 "$work/suite.log" | sed 's/^/  suite: /' | tee -a "$summary"

# calibrate on every other shape, forecast the rest, compare with what was measured
step calibrate 120 "$py" - "$work" <<'PY'
import json, sys
from pathlib import Path
from attnroof import calibration
from attnroof.calibration.forecast import forecast
from attnroof.calibration.fit import summary
out = Path(sys.argv[1])
recs = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines() if l.strip()]
ok = [r for r in recs if r["status"] == "ok" and r["kind"] in ("attention", "decode", "linear") and r["impl"] != "sdpa-math"]
held = [r for i, r in enumerate(ok) if i % 3 == 1]
train = [r for r in recs if r not in held]
cals = calibration.calibrate(train)
calibration.write(out / "cal.json", cals)
errs, lines, inside = [], [], 0
for r in held:
    cal = next(c for c in cals if c.dtype == r["dtype"])
    try:
        (fc,) = forecast(cal, r["kind"], r["shape"], r["impl"])
    except Exception as e:
        lines.append(f"{r['key']}: no forecast ({e})"); continue
    errs.append(fc.time_s / r["time_s"] - 1); inside += fc.low_s <= r["time_s"] <= fc.high_s
    lines.append(f"{r['key']}: measured {r['time_s']:.3e} s forecast {fc.time_s:.3e} s ({errs[-1]:+.1%})")
s = summary(errs)
lines.append(f"held-out forecasts: {s['n']}, median {s['median']}, p90 {s['p90']}, inside band {inside}")
(out / "forecast.txt").write_text("\n".join(lines) + "\n")
print(lines[-1])
PY
tail -n 1 "$work/forecast.txt" 2>/dev/null | sed 's/^/  forecast: /' | tee -a "$summary"
[ -s "$work/results.jsonl" ] && "$py" benchmarks/calibration.py "$work/results.jsonl" > "$work/accuracy.txt" 2>&1 \
    && sed 's/^/  accuracy: /' "$work/accuracy.txt" | tee -a "$summary"
if [ ${#failed[@]} -gt 0 ]; then
    say "gpu_check: done $(date -u +%H:%M:%SZ); ${#failed[@]} step(s) not ok: ${failed[*]}; every step's log is in $archive"
    exit 1
fi
say "gpu_check: done $(date -u +%H:%M:%SZ); every step ok; every step's log is in $archive"
