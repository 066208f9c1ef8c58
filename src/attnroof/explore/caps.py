"""What the explorer runs, and how large a job it takes: the commands the page calls and the flags
each may be given, the caps on a job's size (derived from what the page can show), and each
job's time, memory and workers (:mod:`.jobs`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus

Run = Callable[[Sequence[str]], int]
"""Runs ``attnroof WORDS`` in this process (``attnroof.commands._run.run``): its exit status, its
output on ``sys.stdout``, a one-line error on ``sys.stderr``. A worker process imports it by its
module and name."""

FLAGS: Mapping[str, frozenset[str]] = {
    "model": frozenset(
        {"model", "phase", "batch", "context", "device", "dtype", "weight-dtype", "kv-dtype"}
        | {"tp", "pp", "ep", "dp", "unfused", "list"}
        | {"cp", "etp", "microbatches", "schedule", "virtual-stages", "sp", "overlap"}
        | {"zero", "recompute", "weight-gather", "grad-reduce"}
    ),
    "sweep": frozenset({"head-dim", "seq", "causal", "device", "dtype"}),
    "crossover": frozenset({"head-dim", "causal", "device", "dtype"}),
    "devices": frozenset({"name"}),
    "plan": frozenset({"model", "devices", "phase", "context", "batch", "device", "dtype", "unfused", "top"}),
    "serve-sim": frozenset(
        {"model", "device", "dtype", "weight-dtype", "kv-dtype", "tp", "pp", "ep"}
        | {"rate", "input-len", "output-len", "num-requests", "seed"}
    ),
}
"""The commands the page runs and the flags it may give each: none of them names a file."""
HEAVY = frozenset({"plan", "serve-sim"})
"""Commands that search or simulate (seconds to a minute): their own pool of workers, so that a
search never stands in front of the page's redraw (``model``, ``devices``, ``sweep`` and
``crossover`` answer in milliseconds)."""

MAX_REQUESTS = 10_000
"""serve-sim's requests in the explorer. The page shows their latencies' p50, p90 and p99:
10,000 requests put 100 above the 99th percentile, enough for it to stand still (the command line
takes up to 1,000,000)."""
MAX_ANSWER_TOKENS = 2_000_000
"""serve-sim's requests × answer tokens (``output-len``, 128 unless given): a simulation's time
follows the tokens it decodes, and 2,000,000 take 5 to 8 s on one core (10,000 × 200 in 4.3 s,
200 × 10,000 in 7.9 s)."""
MAX_PLAN_DEVICES = 1024
"""plan's devices in the explorer. The page draws every plan tried as one point; on 1,024
devices a search already tries up to 93,000 (Llama-3.1-70B training: 38 MB of JSON, 21 s), more
than a chart tells apart."""
DEFAULT_REQUESTS, DEFAULT_ANSWER = 1000, 128
"""serve-sim's own defaults for ``--num-requests`` and ``--output-len``."""

QUICK_TIME_S, HEAVY_TIME_S = 30.0, 120.0
"""A job's time limit: the page's answers take milliseconds (30 s is for a pasted config of a
very large model); a search on 1,024 devices takes up to 70 s on a loaded two-core machine."""
QUICK_MEMORY, HEAVY_MEMORY = 1 << 30, 2 << 30
"""A job's memory budget: what its processes together may add to the idle worker's (which holds
about 80 MB; a search on 1,024 devices adds about 600 MB)."""
QUICK_WORKERS, HEAVY_WORKERS = 2, 2
"""Jobs at once in each pool: at most 2 × 1 GiB + 2 × 2 GiB for the explorer's jobs in all."""
QUEUE_WAIT_S = 60.0
"""How long a job may wait for a worker before it is answered "busy"."""
WARM_QUICK = (
    ["model", "--model", "gpt2", "--context", "64", "--json"],
    ["devices", "--json"],
    ["sweep", "--head-dim", "64", "--seq", "256", "--json"],
    ["crossover", "--head-dim", "64", "--json"],
)
"""What a quick worker runs before its first job (the first ``crossover`` imports sympy: 1 s)."""
WARM_HEAVY = (
    [
        "serve-sim",
        "--model",
        "gpt2",
        "--num-requests",
        "1",
        "--input-len",
        "16",
        "--output-len",
        "1",
        "--json",
    ],
    ["plan", "--model", "gpt2", "--devices", "2", "--context", "64", "--batch", "1", "--json"],
)
"""What a search-and-simulation worker runs before its first job (numpy's and the engine's imports
made before the memory budget applies)."""

MAX_BODY = 1_000_000
"""Bytes a request's body may hold: a model's config.json is a few kB, a device file less."""
MAX_VALUE = 200
"""Characters a parameter's value may hold (a name, a number, a list of sizes)."""
MAX_PASTED = 256 * 1024
"""Characters a pasted config.json or device file may hold (the largest built-in config is
3 kB; a Hugging Face config with a long label table tens of kB)."""
MAX_PASTED_FILES = 16
"""Pasted texts kept on disk, the least recently used evicted first: at most 16 × 256 kB."""


class RequestError(Exception):
    """A request the explorer refuses: one line, a 4xx status (400 unless said)."""

    def __init__(self, message: str, status: int = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


def _whole(params: Mapping[str, str], key: str, default: int | None = None) -> int | None:
    """A capped parameter's value: a whole number in plain digits (the page's number fields send
    nothing else; the command line's ``8k`` is not taken here, so that no form of a number slips
    past its cap), or ``default`` when not given."""
    text = params.get(key)
    if text is None:
        return default
    if not re.fullmatch(r"[0-9]{1,15}", text):
        raise RequestError(f"{key} {text!r}: the explorer takes a whole number in digits, such as 200")
    return int(text)


def check_caps(command: str, params: Mapping[str, str]) -> None:
    """Refuse a job larger than the page can show (the constants above say why each cap)."""
    if command == "serve-sim":
        requests = _whole(params, "num-requests", DEFAULT_REQUESTS)
        answer = _whole(params, "output-len", DEFAULT_ANSWER)
        if requests is not None and requests > MAX_REQUESTS:
            raise RequestError(
                f"num-requests {params['num-requests']!r}: the explorer simulates at most "
                f"{MAX_REQUESTS:,} requests (attnroof serve-sim on the command line takes more)"
            )
        if requests is not None and answer is not None and requests * answer > MAX_ANSWER_TOKENS:
            raise RequestError(
                f"num-requests × output-len = {requests:,} × {answer:,} = {requests * answer:,} answer "
                f"tokens: the explorer simulates at most {MAX_ANSWER_TOKENS:,} (attnroof serve-sim on "
                "the command line takes more)"
            )
    if command == "plan":
        devices = _whole(params, "devices")
        if devices is not None and devices > MAX_PLAN_DEVICES:
            raise RequestError(
                f"devices {params['devices']!r}: the explorer searches plans on at most "
                f"{MAX_PLAN_DEVICES:,} devices (attnroof plan on the command line takes more)"
            )
