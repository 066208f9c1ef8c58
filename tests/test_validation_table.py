"""The held-out validation table (data/validation, issue 34): every row parses, names a source that
sources.toml describes and no reserved one, resolves in attnroof (or says why not), and carries only
positive, finite numbers; and the sources' own arithmetic holds where they print enough to check it.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path
from typing import Any

import pytest

from attnroof.devices import get_device
from attnroof.model.config import builtin, load_config_file
from attnroof.model.layers import params

ROOT = Path(__file__).resolve().parent.parent


def _script() -> Any:
    spec = importlib.util.spec_from_file_location(
        "validation_table", ROOT / "scripts" / "validation_table.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VT = _script()
ROWS = {level: VT.rows(level) for level in VT.LEVELS}
ALL = [(level, row) for level in VT.LEVELS for row in ROWS[level]]
SOURCES = VT.sources()
IDS = [row["id"] for _, row in ALL]


def _by_source(name: str) -> list[dict[str, Any]]:
    return [row for _, row in ALL if row["source"] == name]


def _numbers(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every number inside a row (booleans are not numbers), with where it sits."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, int | float):
        return [(path, value)]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [n for i, v in enumerate(value) for n in _numbers(v, f"{path}[{i}]")]
    raise AssertionError(f"{path}: unexpected {type(value).__name__}")


# ---------------------------------------------------------------- the table's shape


def test_aims_rows_per_level() -> None:
    assert len(ROWS["training"]) >= 30
    assert len(ROWS["serving"]) >= 40


def test_ids_are_unique_and_name_their_source() -> None:
    assert len(IDS) == len(set(IDS))
    for _, row in ALL:
        assert re.fullmatch(re.escape(row["source"]) + r"-\d{3}", row["id"]), row["id"]


@pytest.mark.parametrize(("level", "row"), ALL, ids=IDS)
def test_row_fields(level: str, row: dict[str, Any]) -> None:
    allowed = set(VT.MEASURED[level]) | set(VT.DESCRIBED[level])
    assert set(row) <= allowed, sorted(set(row) - allowed)
    assert row["source"] in SOURCES
    assert isinstance(row["where"], str) and row["where"]
    assert isinstance(row["notes"], list) and all(isinstance(n, str) and n for n in row["notes"])
    assert isinstance(row["devices"], int) and row["devices"] >= 1
    assert any(row.get(k) is not None for k in VT.MEASURED[level]), "no measured value"
    if level == "training":
        assert tuple(row["plan"]) == VT.PLAN
        assert row["plan"]["recompute"] in (None, "none", "selective", "full")
        if row.get("measured_tokens_per_s") is not None:
            assert row["measured_tokens_per_s_scope"] in ("per_gpu", "total")
        layout = [row["plan"][k] for k in ("tp", "pp", "cp", "dp")]
        if None not in layout:
            assert math.prod(layout) == row["devices"], layout
    else:
        assert set(VT.WORKLOAD) <= set(row["workload"]) <= {*VT.WORKLOAD, "input_len_range"}
        assert row["phase"] in ("mixed", "prefill", "decode")
        assert row["throughput_per"] in ("deployment", "gpu", "node")
        assert (row["throughput_per"] == "node") == ("gpus_per_node" in row)
        assert row["tp"] * row["pp"] * row["dp"] * row["instances"] == row["devices"]
        rate = row["workload"]["request_rate"]
        assert rate is None or rate == "inf" or rate > 0


@pytest.mark.parametrize(("level", "row"), ALL, ids=IDS)
def test_numbers_are_positive_and_finite(level: str, row: dict[str, Any]) -> None:
    for where, number in _numbers(row):
        assert math.isfinite(number) and number > 0, (where, number)


@pytest.mark.parametrize(("level", "row"), ALL, ids=IDS)
def test_model_and_device_resolve(level: str, row: dict[str, Any]) -> None:
    if row["resolvable"] is False:
        assert isinstance(row["unresolvable_why"], str) and row["unresolvable_why"]
        return
    assert row["resolvable"] is True and "unresolvable_why" not in row
    if "model_config" in row:
        path = ROOT / row["model_config"]
        assert path.is_file(), row["model_config"]
        load_config_file(path)
    else:
        builtin(row["model"])  # a built-in name: never the hub
    assert get_device(row["device"], env={}).name == row["device"]


# ---------------------------------------------------------------- sources


def test_sources_are_described_and_used() -> None:
    used = {row["source"] for _, row in ALL}
    assert used == set(SOURCES), sorted(used ^ set(SOURCES))
    for name, table in SOURCES.items():
        assert set(table) == {"title", "url", "date", "where", "notes"}, name
        assert table["url"].startswith("https://"), name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", table["date"]), name
        assert all(isinstance(v, str) and v.strip() for v in table.values()), name


def test_reserved_list_is_read_from_the_readme() -> None:
    names = [name for name, _ in VT.reserved()]
    assert len(names) == 16
    assert {"MLPerf results", "vLLM performance dashboard", "torchtitan's benchmark results"} <= set(names)
    patterns = dict(VT.reserved())
    # the patterns catch what they hold back, and not what only resembles it
    assert any(
        p.search("https://docs.nvidia.com/nemo-framework/user-guide/performance_summary.html")
        for p in patterns["NeMo / Megatron-Core performance summaries"]
    )
    assert any(
        p.search("BLOOM: A 176B-Parameter Open-Access Multilingual Language Model") for p in patterns["BLOOM"]
    )
    assert not any(p.search("BloombergGPT: A Large Language Model for Finance") for p in patterns["BLOOM"])
    assert not any(p.search("Optimizing GPT-OSS-20B Throughput") for p in patterns["OPT"])


def test_no_source_is_reserved() -> None:
    for name, table in SOURCES.items():
        for reserved, patterns in VT.reserved():
            for text in (name, table["title"], table["url"]):
                assert not any(p.search(text) for p in patterns), (name, reserved, text)


def test_summary_counts_every_row() -> None:
    text = VT.summary()
    assert f"training: {len(ROWS['training'])} rows" in text
    assert f"serving: {len(ROWS['serving'])} rows" in text


# ---------------------------------------------------------------- the sources' arithmetic


def test_megatron_configs_have_the_papers_parameter_counts() -> None:
    """Narayanan et al. eq. (2): P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) = 12 l h^2 + 13 l h + (V + s) h,
    the published sizes of Table 1 to their printed 0.1 B; attnroof also counts the final LayerNorm's 2h."""
    V, s = 51200, 2048
    for row in _by_source("narayanan2021"):
        cfg = load_config_file(ROOT / row["model_config"])
        layers, h = cfg.layers, cfg.hidden
        P = 12 * layers * h * h + 13 * layers * h + (V + s) * h
        assert params(cfg) == P + 2 * h
        printed = float(row["where"].split("row ")[1].split(" B")[0]) if "Table 1" in row["where"] else None
        if printed is not None:
            assert round(P / 1e9, 1) == printed, (P, printed)
    # 1,008.0 B by hand: 12 * 128 * 25600^2 + 13 * 128 * 25600 + (51200 + 2048) * 25600
    assert 12 * 128 * 25600**2 + 13 * 128 * 25600 + (51200 + 2048) * 25600 == 1_008_038_707_200


def test_megatron_aggregate_is_per_gpu_times_gpus() -> None:
    """Table 1's aggregate petaFLOP/s is its per-GPU teraFLOP/s times the GPUs, to the per-GPU figure's
    rounding (1,008 B: 163 TFLOP/s x 3,072 = 500.7 PFLOP/s against the printed 502.0)."""
    for row in _by_source("narayanan2021"):
        if row.get("measured_aggregate_pflops") is None:
            continue
        product = row["measured_tflops_per_gpu"] * row["devices"] / 1000
        assert abs(product - row["measured_aggregate_pflops"]) <= 0.5 * row["devices"] / 1000 + 0.05, row[
            "id"
        ]


def test_llama3_tokens_per_batch_is_16m() -> None:
    """Table 4: batch size per DP group x DP x sequence = 2^24 tokens, the printed '16M', at every stage."""
    rows = _by_source("llama3_2024")
    assert [r["global_batch_tokens"] for r in rows] == [2**24] * 3
    assert [r["plan"]["tp"] * r["plan"]["cp"] * r["plan"]["pp"] * r["plan"]["dp"] for r in rows] == [
        8192,
        16384,
        16384,
    ]


def test_fsdp_blog_batch_is_one_million_tokens_on_128_gpus() -> None:
    """'batch size is 1 million tokens per batch for 128 GPUs': 2 sequences x 4,096 tokens x 128."""
    (row,) = [r for r in _by_source("ibm_fsdp_2024") if r["model"].endswith("7b-hf") and r["devices"] == 128]
    assert row["global_batch_tokens"] == 2 * 4096 * 128 == 1_048_576


def test_fa2_mfu_is_its_tflops_over_the_a100_peak() -> None:
    """'225 TFLOPs/s (72% model FLOPs utilization)': 225 / 312 = 0.721."""
    (row,) = [r for r in _by_source("dao2023_fa2") if r.get("measured_mfu") is not None]
    peak = get_device(row["device"], env={}).peak_flops_per_s["bf16"]
    assert round(row["measured_tflops_per_gpu"] * 1e12 / peak, 2) == row["measured_mfu"] == 0.72


def test_bench_serve_rates_times_duration_give_the_counts() -> None:
    """A parsed ``vllm bench serve`` block agrees with itself: request rate x duration is the requests
    completed, and total token rate x duration the input plus output tokens, within the rounding of the
    two printed factors (half a unit of their last printed place each). gpt-oss-20b on one H100:
    16,493.75 tok/s x 24.81 s = 409,209.9 against 215,312 + 193,979 = 409,291 tokens, 81.1 apart,
    inside 0.005 x 24.81 + 0.005 x 16,493.75 = 82.6."""
    checked = 0
    for _, row in ALL:
        if row.get("duration_s") is None or row.get("completed_requests") is None:
            continue
        d = row["duration_s"]
        for rate, count in (
            (row["request_per_s"], row["completed_requests"]),
            (row["total_tokens_per_s"], row["total_input_tokens"] + row["total_output_tokens"]),
        ):
            assert abs(rate * d - count) <= 0.005 * d + 0.005 * rate + 1e-9, (row["id"], rate, d, count)
        checked += 1
    assert checked >= 60
