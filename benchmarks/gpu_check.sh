#!/usr/bin/env bash
# GPU check: every CUDA branch of attnroof once, then calibrate and forecast held-out shapes, on
# the local CUDA device, and one screen that says whether the model holds and which parts of it
# were checked. Never run on a GPU before: the whole check ends within ONE budget, DEADLINE_S
# (420 s: 7 minutes on an H200), and summary.txt is written AS IT GOES (a step that fails, or a
# phase that times out, is marked and the next runs), so a run cut short still says what it saw.
# Every line of the summary is printed on stdout too: on a remote GPU machine the tail of the
# output is what surely comes back.
#
#   benchmarks/gpu_check.sh [OUTDIR]   # writes under OUTDIR, else $OUT if set, else results/
#
# Phases, one Python process each (torch starts once a phase: ~5 s, not ~15 times):
#   env      the interpreter, torch, CUDA, triton, ncu, nvidia-smi (each under a time limit)
#   measure  ceilings (measured once: every later step reads them), the quick suite (the records
#            the report needs, so first), each implementation × dtype (bf16, fp16, fp32 with the
#            tf32 switch), the timers (do_bench, CUDA events); a step is not started with less
#            time left than it needs or than a step of its kind took (NOT RUN, said why)
#   ncu      ONE ncu launch over every ncu case (a small linear, then decode and prefill in turn),
#            its limit the phase's time left (none started when it could not finish: said why)
#   report   one fit on two shapes in three: the third forecast, the fit's accuracy table, and
#            the verdict: bytes ncu/model, efficiency and forecast error per implementation
# The budget: each phase may run until the deadline less what the phases after it are kept
# (ncu NCU_KEEP_S, report REPORT_KEEP_S), so the time a phase leaves unused goes to the next.
# The steps of a phase are in benchmarks/gpu_check.py.
#
# Without CUDA (torch importable, CUDA not usable) the flow runs on the CPU with CPU-sized
# shapes: the CUDA-only steps (timers, ncu) are skipped, each with the reason in the summary.
#
# Leaves exactly two files in the output folder (only a few files of a folder come back from a
# remote GPU machine): summary.txt, written as it goes, and gpu_check.tar.gz, packed on every exit
# (a trap: done, failed, or interrupted) with everything else it wrote: summary.txt, env.txt,
# ceilings.json, results.jsonl, ncu.jsonl, cal.json, forecast.txt, accuracy.txt, verdict.txt,
# steps.tsv, one <step>.log per step and one phase-<phase>.log (its stderr) per phase.
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

DEADLINE_S=${GPU_CHECK_DEADLINE_S:-420}  # the whole check, packing included: the one budget
PACK_S=10                                # kept for packing the archive at the end
TOOL_S=${GPU_CHECK_TOOL_TIMEOUT_S:-20}   # each outside tool's limit (ncu --version, nvidia-smi, tar)
NCU_KEEP_S=100    # kept for the ncu phase: torch's start, the cases timed, one ncu launch that can
                  # finish (gpu_check.py's NCU_NEED_S, 90 s) and its margin
REPORT_KEEP_S=40  # kept for the report phase: torch's start, one fit, the verdict
start=$(date +%s)
deadline=$(( start + DEADLINE_S - PACK_S ))

say() { echo "$*" | tee -a "$summary"; }

# pack: the summary and every file written into one archive, the work folder removed
pack() {
    local rc=$?
    trap - EXIT
    local jobs_left; jobs_left=$(jobs -p)  # a phase still running, even one started as the signal came
    if [ -n "$jobs_left" ]; then  # stop it (timeout passes TERM on to the phase's group) and wait
        kill -TERM $jobs_left 2>/dev/null
        wait $jobs_left 2>/dev/null
    fi
    cp "$summary" "$work/summary.txt" 2>/dev/null
    local n; n=$(find "$work" -type f | wc -l)
    if timeout --kill-after=2 "$TOOL_S" tar -czf "$archive.part" -C "$work" . && mv -f "$archive.part" "$archive"; then
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

failed=()  # the phases that failed, timed out or were not run (the steps not ok: $work/failed.txt)
phases=()  # each phase's status, for the last lines

# phase NAME KEEP_S: one Python process for the phase's steps (benchmarks/gpu_check.py), until the
# deadline less KEEP_S (what the phases after it are kept), so that the time the phases before it
# left unused is its own; its stderr in phase-NAME.log, each step's line in the summary and on
# stdout as the step ends, and one line for the phase as it ends
phase() {
    local name=$1 keep=$2
    local now; now=$(date +%s)
    local end=$(( deadline - keep ))
    local limit=$(( end - now ))
    if [ "$limit" -lt 5 ]; then
        failed+=("$name")
        phases+=("$name NOT RUN")
        say "NOT RUN phase $name: $(( deadline - now )) s left of the ${DEADLINE_S} s budget, ${keep} s of it kept for the phases after it"
        return 0
    fi
    local t0=$SECONDS rc before; before=$(steps_so_far)
    # in the background and waited for, so that a signal to this script is handled at once (bash
    # defers a trap until a foreground child ends): the trap stops the phase, then packs.
    # The phase's own deadline is its end: its steps (and ncu's limit) fit inside it.
    timeout --kill-after=5 "$limit" "$py" benchmarks/gpu_check.py "$name" "$work" --deadline "$end" \
        --summary "$summary" "${no_cuda[@]}" 2> "$work/phase-$name.log" &
    wait $!
    rc=$?
    local took=$(( SECONDS - t0 )) steps; steps=$(phase_steps "$before" | sed 's/^[a-z ]*(\(.*\))$/\1/')
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        failed+=("$name")
        phases+=("$name TIMEOUT after ${limit} s ($steps before it)")
        say "TIMEOUT phase $name after ${limit} s (the steps after the last line above did not end)"
    elif [ $rc -ne 0 ]; then
        failed+=("$name")
        phases+=("$name FAILED, exit $rc ($steps; ${took} s)")
        say "FAILED  phase $name (exit $rc, ${took} s): $(grep -m1 -E 'Error|error' "$work/phase-$name.log" || tail -n 1 "$work/phase-$name.log")"
    else
        local status; status=$(phase_steps "$before")
        phases+=("$name ${status%)}; ${took} s of ${limit})")
        say "phase $name: $status in ${took} s of the ${limit} s it had; $(( deadline - $(date +%s) )) s of the budget left"
    fi
    return 0
}

# phase_steps FROM: the statuses of the steps written to steps.tsv after its first FROM lines,
# counted ("11 ok, 1 skip"; "no step"), then the phase's word for them: ok, skipped (every step
# skipped), not ok (a step ERRORS, FAILED or NOT RUN)
phase_steps() {
    local counts
    counts=$(tail -n +"$(( $1 + 1 ))" "$work/steps.tsv" 2>/dev/null | cut -f2 | sort | uniq -c |
        awk '{n = $1; $1 = ""; sub(/^ /, ""); printf "%s%d %s", (i++ ? ", " : ""), n, $0} END {if (!i) printf "no step"}')
    if echo "$counts" | grep -qE 'errors|failed|not run'; then
        echo "not ok ($counts)"
    elif echo "$counts" | grep -qE '^[0-9]+ skip$'; then
        echo "skipped ($counts)"
    else
        echo "ok ($counts)"
    fi
}

steps_so_far() { if [ -f "$work/steps.tsv" ]; then wc -l < "$work/steps.tsv"; else echo 0; fi; }

# tool LINE_PREFIX CMD...: an outside tool's answer, under TOOL_S; a tool that hangs is said so
tool() {
    local what=$1; shift
    local text rc
    text=$(timeout --kill-after=2 "$TOOL_S" "$@" 2>&1)
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "$what: no answer within ${TOOL_S} s (stopped)"
    elif [ $rc -ne 0 ]; then
        echo "$what: exit $rc: $(echo "$text" | tail -n 1)"
    else
        echo "$text"
    fi
}

say "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ): a budget of ${DEADLINE_S} s"
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
    NCU_KEEP_S=5  # its step is skipped: nothing to keep for it
    say "gpu_check: $why: the CUDA-only steps are skipped, the rest runs on the CPU"
fi

tools=$({
    if command -v cc >/dev/null; then echo "C compiler: $(command -v cc)"; else echo "C compiler: none (do_bench cannot build; CUDA events)"; fi
    if command -v ncu >/dev/null; then tool "ncu --version" ncu --version | tail -n 1; else echo "ncu: not on PATH"; fi
    if command -v nvidia-smi >/dev/null; then
        tool "nvidia-smi" nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    else
        echo "nvidia-smi: not on PATH"
    fi
})
echo "$tools" >> "$work/env.txt"
echo "$tools" | sed 's/^/  env: /' | tee -a "$summary"

phase measure $(( NCU_KEEP_S + REPORT_KEEP_S ))
phase ncu "$REPORT_KEEP_S"
phase report 0

steps=()
[ -s "$work/failed.txt" ] && mapfile -t steps < "$work/failed.txt"
bad=("${steps[@]}" "${failed[@]}")
holds=$(grep -m1 '^the model holds:' "$work/verdict.txt" 2>/dev/null | sed 's/ — .*//')
holds=${holds:-the model holds: NOT KNOWN (no verdict)}
joined=$(printf '%s; ' "${phases[@]}")
say "phases: ${joined%; }; $(( $(date +%s) - start )) s of the ${DEADLINE_S} s budget used"
if [ ${#bad[@]} -gt 0 ]; then
    say "gpu_check: done $(date -u +%H:%M:%SZ) in ${SECONDS} s; ${#bad[@]} step(s) not ok: ${bad[*]}; $holds; every step's log is in $archive"
    exit 1
fi
say "gpu_check: done $(date -u +%H:%M:%SZ) in ${SECONDS} s; every step ok; $holds; every step's log is in $archive"
