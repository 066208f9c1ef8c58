"""serve-sim: rates, durations, shares and counts out of range; request files that are not
requests; deployments that cannot hold the model. Each is one line naming what is wrong."""

from __future__ import annotations

from hostile import Case

S = ("serve-sim", "--model", "llama-3.1-8b", "--device", "h100", "--num-requests", "20")
REQ = (*S, "--requests-file", "{dir}/r.jsonl")

CASES = [
    Case("--rate 0", (*S, "--rate", "0"), error=("--rate", "'0'", "positive")),
    Case("--rate -1", (*S, "--rate", "-1"), error=("--rate", "'-1'")),
    Case("--rate nan", (*S, "--rate", "nan"), error=("--rate", "'nan'")),
    Case("--rate huge", (*S, "--rate", "1e12"), error=("--rate", "implausibly")),
    Case("--rate inf is all at once", (*S, "--rate", "inf"), error=None),
    Case("--burstiness 0", (*S, "--burstiness", "0"), error=("--burstiness", "'0'")),
    Case(
        "--slo-ttft words",
        (*S, "--slo-ttft", "two seconds"),
        error=("--slo-ttft", "'two seconds'", "duration"),
    ),
    Case("--slo-tpot 0", (*S, "--slo-tpot", "0ms"), error=("--slo-tpot", "'0ms'", "positive")),
    Case("--slo-tpot minutes", (*S, "--slo-tpot", "5min"), error=("--slo-tpot", "'5min'")),
    Case("--step-overhead negative", (*S, "--step-overhead=-1ms"), error=("--step-overhead", "'-1ms'")),
    Case(
        "--gpu-memory-utilization 0",
        (*S, "--gpu-memory-utilization", "0"),
        error=("--gpu-memory-utilization", "'0'"),
    ),
    Case(
        "--gpu-memory-utilization 90",
        (*S, "--gpu-memory-utilization", "90"),
        error=("--gpu-memory-utilization", "'90'"),
    ),
    Case("--range-ratio 1", (*S, "--range-ratio", "1"), error=("--range-ratio", "'1'")),
    Case("--warmup negative", (*S, "--warmup", "-3"), error=("--warmup", "-3")),
    Case("--warmup all", (*S, "--warmup", "20"), error=("--warmup", "20", "--num-requests")),
    Case(
        "--acceptance 1.5",
        (*S, "--draft-model", "llama-3.1-8b", "--spec-tokens", "4", "--acceptance", "1.5"),
        error=("--acceptance", "'1.5'"),
    ),
    Case("speculation half given", (*S, "--spec-tokens", "4"), error=("--draft-model", "--acceptance")),
    Case(
        "--price-per-device-hour absurd",
        (*S, "--price-per-device-hour", "1e9"),
        error=("--price-per-device-hour",),
    ),
    Case("--tp beyond the heads", (*S, "--tp", "64"), error=("--tp",)),
    Case(
        "a model too large",
        ("serve-sim", "--model", "llama-3.1-70b", "--device", "h100"),
        error=("llama-3.1-70b", "no room for a KV cache"),
    ),
    Case(
        "a request longer than the model", (*S, "--input-len", "200000"), error=("exceed the model length",)
    ),
    Case("requests file missing", (*S, "--requests-file", "{dir}/none.jsonl"), error=("none.jsonl",)),
    Case("requests file empty", REQ, files={"r.jsonl": "\n\n"}, error=("r.jsonl", "no requests")),
    Case(
        "requests file not JSON",
        REQ,
        files={"r.jsonl": "{input_tokens: 5}\n"},
        error=("r.jsonl:1", "not valid JSON"),
    ),
    Case(
        "requests file 5,000-digit number",
        REQ,
        files={"r.jsonl": '{"input_tokens": ' + "9" * 5000 + ', "output_tokens": 5}\n'},
        error=("r.jsonl:1", "more digits than any figure"),
    ),
    Case(
        "requests file twin keys",
        REQ,
        files={"r.jsonl": '{"input_tokens": 5, "input_tokens": 6, "output_tokens": 5}\n'},
        error=("r.jsonl:1", "input_tokens"),
    ),
    Case("requests file a list", REQ, files={"r.jsonl": "[1, 2]\n"}, error=("r.jsonl:1", "JSON object")),
    Case(
        "requests file NaN arrival",
        REQ,
        files={"r.jsonl": '{"input_tokens": 5, "output_tokens": 5, "arrival_s": NaN}\n'},
        error=("r.jsonl:1", "NaN"),
    ),
    Case(
        "requests file unknown field",
        REQ,
        files={"r.jsonl": '{"input_tokens": 5, "output_tokens": 5, "prompt": "hi"}\n'},
        error=("r.jsonl:1", "'prompt'"),
    ),
    Case(
        "requests file zero tokens",
        REQ,
        files={"r.jsonl": '{"input_tokens": 0, "output_tokens": 5}\n'},
        error=("r.jsonl:1", "input_tokens = 0"),
    ),
    Case(
        "requests file fractional tokens",
        REQ,
        files={"r.jsonl": '{"input_tokens": 5.5, "output_tokens": 5}\n'},
        error=("r.jsonl:1", "input_tokens = 5.5"),
    ),
    Case(
        "requests file arrivals out of order",
        (*REQ[:-2], "--requests-file", "{dir}/r.jsonl"),
        files={
            "r.jsonl": '{"input_tokens": 5, "output_tokens": 5, "arrival_s": 2}\n'
            '{"input_tokens": 5, "output_tokens": 5, "arrival_s": 1}\n'
        },
        error=("r.jsonl", "arrival_s", "decrease"),
    ),
    Case(
        "requests file some arrivals",
        REQ,
        files={
            "r.jsonl": '{"input_tokens": 5, "output_tokens": 5, "arrival_s": 2}\n{"input_tokens": 5, "output_tokens": 5}\n'
        },
        error=("r.jsonl", "arrival_s"),
    ),
    Case(
        "requests file with --input-len",
        (*REQ, "--input-len", "100"),
        files={"r.jsonl": '{"input_tokens": 5, "output_tokens": 5}\n'},
        error=("--requests-file", "--input-len"),
    ),
    Case(
        "requests file with arrivals and --rate",
        (*REQ, "--rate", "3"),
        files={"r.jsonl": '{"input_tokens": 5, "output_tokens": 5, "arrival_s": 0}\n'},
        error=("--rate",),
    ),
    Case("--chart unknown format", (*S, "--chart", "{dir}/c.bmp"), error=("c.bmp", "format")),
]

CASES += [
    Case(
        "--num-requests millions, more than the memory holds",
        (*S[:5], "--num-requests", "5000000"),
        # 5e6 × 1 KiB + 6.4e8 tokens × (32 + 160/256) B + 5e6 chunks × 560 B = 29 GB
        error=(
            "5,000,000 requests",
            "would need about 29 GB of memory",
            "8 GB is free",
            "fewer --num-requests",
        ),
        env={"ATTNROOF_MEMORY_BUDGET": "8G"},
    ),
    Case(
        "--max-num-batched-tokens huge",
        (*S, "--max-num-batched-tokens", "9999999999"),
        error=("--max-num-batched-tokens", "at most 1,048,576"),
    ),
    Case("--max-num-seqs huge", (*S, "--max-num-seqs", "100000"), error=("--max-num-seqs", "at most 65,536")),
    Case("--block-size huge", (*S, "--block-size", "100000"), error=("--block-size",)),
    Case("--concurrency huge", (*S, "--concurrency", "9999999"), error=("--concurrency",)),
]

MEASURED = '{"kind": "linear", "n": 64, "k": 64, "m": 64, "median_s": 1e-5}\n'

CASES += [
    Case(
        "requests file arrival of 401 digits",
        REQ,
        files={"r.jsonl": '{"input_tokens": 5, "output_tokens": 5, "arrival_s": 1' + "0" * 400 + "}\n"},
        error=("r.jsonl:1", "401-digit"),
    ),
    Case(
        "requests file tokens of 5,000 digits",
        REQ,
        files={"r.jsonl": '{"input_tokens": ' + "9" * 5000 + ', "output_tokens": 5}\n'},
        error=("r.jsonl:1",),
    ),
    Case(
        "--chart into a missing folder", (*S, "--chart", "{dir}/none/c.png"), error=("none", "no such folder")
    ),
]
