"""Expert parallelism's flags: --etp (the expert-tensor-parallel degree) and --expert-imbalance."""

from __future__ import annotations

from hostile import Case

MIX = ("model", "--model", "mixtral-8x7b", "--device", "h100", "--batch", "8", "--context", "1024")
L8 = ("model", "--model", "llama-3.1-8b", "--device", "h100", "--context", "1024")

CASES = [
    Case("--etp 0", argv=(*MIX, "--etp", "0"), error=("--etp", "'0'")),
    Case("--etp not dividing the expert width", argv=(*MIX, "--etp", "3"), error=("--etp 3", "14336")),
    Case(
        "--etp × --ep beyond a stage's devices",
        argv=(*MIX, "--tp", "2", "--dp", "1", "--etp", "1", "--ep", "4"),
        error=("--etp", "must divide --tp × --dp = 2"),
    ),
    Case("--etp on a dense model", argv=(*L8, "--etp", "1"), error=("--etp 1", "no experts")),
    Case(
        "--expert-imbalance below 1",
        argv=(*MIX, "--ep", "2", "--expert-imbalance", "0.5"),
        error=("--expert-imbalance", "≥ 1"),
    ),
    Case(
        "--expert-imbalance nan",
        argv=(*MIX, "--ep", "2", "--expert-imbalance", "nan"),
        error=("--expert-imbalance", "≥ 1"),
    ),
    Case(
        "--expert-imbalance inf",
        argv=(*MIX, "--ep", "2", "--expert-imbalance", "inf"),
        error=("--expert-imbalance", "exceeds --ep 2"),
    ),
    Case(
        "--expert-imbalance a word",
        argv=(*MIX, "--ep", "2", "--expert-imbalance", "busy"),
        error=("--expert-imbalance", "busy"),
    ),
    Case(
        "--expert-imbalance without --ep",
        argv=(*MIX, "--expert-imbalance", "2"),
        error=("--expert-imbalance", "--ep 2 or more"),
    ),
    Case(
        "--expert-imbalance 1 is uniform routing",
        argv=(*MIX, "--ep", "2", "--expert-imbalance", "1", "--phase", "prefill"),
        error=None,
        check=lambda r, _: "busiest" not in r.stdout and "EP 2" in r.stdout,
    ),
]
