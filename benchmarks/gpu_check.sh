#!/usr/bin/env bash
# GPU check for `attnroof measure`: ceilings, then the quick campaign with Nsight Compute DRAM
# bytes, on the local CUDA device. Meant to finish in under 5 minutes on one H200.
#
#   benchmarks/gpu_check.sh            # writes under $OUT if set, else results/
#
# Writes: ceilings.json (usable as --device FILE), ceilings.txt, results.jsonl (one measurement a
# line), summary.txt (the table and the roof check), progress.log, env.txt.
set -euo pipefail

cd "$(dirname "$0")/.."
out="${OUT:-results}"
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
py="${PYTHON:-python}"

if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: torch with CUDA is needed (pip install 'attnroof[measure]' on a GPU machine)" >&2
    exit 2
fi

{
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
    "$py" -c 'import triton; print("triton", triton.__version__)' 2>/dev/null || echo "triton: absent (CUDA events timing)"
    command -v ncu >/dev/null && ncu --version | tail -1 || echo "ncu: not on PATH"
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null || true
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

# Compare with the catalog's H200 when this checkout's catalog has one.
catalog=()
if "$py" -m attnroof attention -s 1k -d 64 --device h200 >/dev/null 2>&1; then
    catalog=(--device h200)
fi

timeout 60 "$py" -m attnroof measure ceilings --quick "${catalog[@]}" -o "$out/ceilings.json" \
    | tee "$out/ceilings.txt"

ATTNROOF_NCU_TIMEOUT_S=130 timeout 220 "$py" -m attnroof measure suite --quick --ncu --ceilings "$out/ceilings.json" "${catalog[@]}" \
    -o "$out/results.jsonl" 2> "$out/progress.log" | tee "$out/summary.txt"

echo "gpu_check: wrote $out/results.jsonl ($(wc -l < "$out/results.jsonl") records) and $out/summary.txt"
