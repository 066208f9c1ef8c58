#!/usr/bin/env bash
# GPU check: every CUDA branch of attnroof once, then calibrate and forecast held-out shapes, on
# the local CUDA device, and one screen that says whether the model holds. Never run on a GPU
# before: the whole check ends within DEADLINE_S (420 s: 7 minutes on an H200), each phase has
# its own limit inside it, and summary.txt is written AS IT GOES (a step that fails, or a phase
# that times out, is marked and the next runs), so a run cut short still says what it saw.
#
#   benchmarks/gpu_check.sh [OUTDIR]   # writes under OUTDIR, else $OUT if set, else results/
#
# Phases (limit), one Python process each (torch starts once a phase: ~5 s, not ~15 times):
#   env      the interpreter, torch, CUDA, triton, ncu (60 s)
#   measure  ceilings (measured once: every later step reads them), each implementation × dtype
#            (bf16, fp16, fp32 with the tf32 switch), the timers (do_bench, CUDA events), the
#            quick suite (220 s)
#   ncu      a probe case, then --ncu on a prefill and a decode case (120 s; ncu's own limit is
#            the time left less 25 s, so its bytes are kept before the phase is killed)
#   report   calibrate on two shapes in three, forecast the third, the accuracy table and the
#            verdict: bytes ncu/model, efficiency and forecast error per implementation (40 s)
# The steps of a phase are in benchmarks/gpu_check.py.
#
# Without CUDA (torch importable, CUDA not usable) the flow runs on the CPU with CPU-sized
# shapes: the CUDA-only steps (timers, ncu) are skipped, each with the reason in the summary
# (some 15 s on two idle cores, under a minute on loaded ones).
#
# Leaves exactly two files in the output folder (only a few files of a folder come back from a
# remote GPU machine): summary.txt, written as it goes, and gpu_check.tar.gz, packed on every exit
# (a trap: done, failed, or interrupted) with everything else it wrote: summary.txt, env.txt,
# ceilings.json, results.jsonl, ncu.jsonl, cal.json, forecast.txt, verdict.txt, one <step>.log
# per step and one phase-<phase>.log per phase.
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
    if [ -n "$child" ]; then  # a phase still running: stop it (timeout passes TERM on) and wait
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

DEADLINE_S=${GPU_CHECK_DEADLINE_S:-420}  # the whole check, packing included
PACK_S=10                                # kept for packing the archive at the end
deadline=$(( $(date +%s) + DEADLINE_S - PACK_S ))

failed=()  # the phases that failed or timed out (the steps not ok are in $work/failed.txt)

# phase NAME LIMIT_S: one Python process for the phase's steps (benchmarks/gpu_check.py), under
# the phase's limit or the time left before the deadline, whichever is less; its own output in
# phase-NAME.log, each step's line in the summary as the step ends
phase() {
    local name=$1 limit=$2
    local left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt "$limit" ]; then limit=$left; fi
    if [ "$limit" -lt 5 ]; then
        failed+=("$name")
        say "NOT RUN phase $name: the deadline (${DEADLINE_S} s) has passed"
        return 0
    fi
    local t0=$SECONDS rc
    # in the background and waited for, so that a signal to this script is handled at once (bash
    # defers a trap until a foreground child ends): the trap stops the phase, then packs
    # the phase's own end is its deadline: its steps (and ncu's limit) fit inside the phase
    timeout --kill-after=5 "$limit" "$py" benchmarks/gpu_check.py "$name" "$work" --deadline "$(( $(date +%s) + limit ))" \
        --summary "$summary" "${no_cuda[@]}" > "$work/phase-$name.log" 2>&1 &
    child=$!
    wait "$child"
    rc=$?
    child=
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        failed+=("$name")
        say "TIMEOUT phase $name after ${limit} s (the steps after the last line above did not end)"
    elif [ $rc -ne 0 ]; then
        failed+=("$name")
        say "FAILED  phase $name (exit $rc, $((SECONDS - t0)) s): $(grep -m1 -E 'Error|error' "$work/phase-$name.log" || tail -n 1 "$work/phase-$name.log")"
    fi
    return 0
}

say "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
# the CUDA check says what it found: the interpreter, torch.__version__, torch.version.cuda and,
# when CUDA is not usable, torch's own error (torch.cuda.init() raises with the reason)
cuda_check=$(timeout --kill-after=5 60 "$py" - 2>&1 <<'PY'
import sys
print("interpreter", sys.executable, "(Python", sys.version.split()[0] + ")")
try:
    import torch
except Exception as e:
    print("torch: cannot import:", type(e).__name__, " ".join(str(e).split())[:200])
    sys.exit(3)
print("torch", torch.__version__, "torch.version.cuda", torch.version.cuda)
try:
    import triton
    print("triton", triton.__version__)
except Exception as e:
    print("triton: absent (CUDA events timing; no Triton read kernel):", type(e).__name__)
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
no_cuda=()
if [ $cuda_rc -eq 124 ] || [ $cuda_rc -eq 137 ]; then
    say "gpu_check: the CUDA check did not end within 60 s (a hung driver?): nothing else can run"
    exit 1
fi
if [ $cuda_rc -ne 0 ]; then
    if [ $cuda_rc -ne 1 ]; then
        say "gpu_check: torch is needed (pip install 'attnroof[measure]'; with CUDA on a GPU machine)"
        exit 2
    fi
    why="no CUDA here ($(echo "$cuda_check" | tail -n 1))"
    no_cuda=(--no-cuda "$why")
    say "gpu_check: $why: the CUDA-only steps are skipped, the rest runs on the CPU"
fi

tools=$({
    command -v cc >/dev/null && echo "C compiler: $(command -v cc)" || echo "C compiler: none (do_bench cannot build; CUDA events)"
    command -v ncu >/dev/null && ncu --version | tail -1 || echo "ncu: not on PATH"
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null || true
} 2>&1)
echo "$tools" >> "$work/env.txt"
echo "$tools" | sed 's/^/  env: /' | tee -a "$summary"

phase measure 220
phase ncu 120
phase report 40

steps=()
[ -s "$work/failed.txt" ] && mapfile -t steps < "$work/failed.txt"
bad=("${steps[@]}" "${failed[@]}")
holds=$(grep -m1 '^the model holds:' "$work/verdict.txt" 2>/dev/null | sed 's/ — .*//')
holds=${holds:-the model holds: NOT KNOWN (no verdict)}
if [ ${#bad[@]} -gt 0 ]; then
    say "gpu_check: done $(date -u +%H:%M:%SZ) in ${SECONDS} s; ${#bad[@]} step(s) not ok: ${bad[*]}; $holds; every step's log is in $archive"
    exit 1
fi
say "gpu_check: done $(date -u +%H:%M:%SZ) in ${SECONDS} s; every step ok; $holds; every step's log is in $archive"
