"""``--model org/name`` from the Hugging Face hub cache: a cache folder in the hub's own layout,
built in a temporary ``HF_HOME``; no network (``HF_HUB_OFFLINE=1``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnroof.model import ModelConfigError, get_model
from attnroof.model.config import CONFIGS
from attnroof.model.hub import cached_config, hub_cache, is_repo_id
from conftest import assert_one_line_error, run_cli

COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"
"""A revision hash as the hub names snapshots (40 hex digits); any will do."""


def cache_repo(home: Path, repo_id: str, config: dict[str, object], commit: str = COMMIT) -> Path:
    """Lay out ``repo_id`` as ``huggingface_hub`` does: the file in blobs/, linked from
    snapshots/<commit>/config.json, and refs/main naming the commit."""
    folder = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    blob = folder / "blobs" / "3f1c0ffee"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_text(json.dumps(config))
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").symlink_to(Path("../..") / "blobs" / blob.name)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return snap / "config.json"


def llama_8b() -> dict[str, object]:
    return json.loads((CONFIGS / "llama-3.1-8b.json").read_text())


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hf"
    home.mkdir()
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def test_repo_ids() -> None:
    assert is_repo_id("meta-llama/Llama-3.1-8B") and is_repo_id("Qwen/Qwen2.5-7B-Instruct")
    assert not is_repo_id("llama-3.1-8b") and not is_repo_id("a/b/c") and not is_repo_id("../x")


def test_cache_follows_hf_home_and_hf_hub_cache(hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub_cache() == hf_home / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_home / "elsewhere"))
    assert hub_cache() == hf_home / "elsewhere"


def test_refs_main_picks_the_snapshot(hf_home: Path) -> None:
    old = cache_repo(hf_home, "org/model", {"model_type": "llama"}, commit="a" * 40)
    new = cache_repo(hf_home, "org/model", {"model_type": "llama"}, commit="b" * 40)
    assert cached_config("org/model") == new
    (hf_home / "hub" / "models--org--model" / "refs" / "main").write_text("a" * 40)
    assert cached_config("org/model") == old
    assert cached_config("ORG/Model") == old  # the id as the user types it
    assert cached_config("org/other") is None


def test_cached_config_is_read(hf_home: Path) -> None:
    # a Qwen2-style config that exists only in the cache: 2 layers, 4 heads on 2 KV heads
    cfg = {
        "model_type": "qwen2",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "rms_norm_eps": 1e-6,
        "use_sliding_window": False,
        "sliding_window": 4096,
    }
    cache_repo(hf_home, "someone/tiny-qwen2", cfg)
    m = get_model("someone/tiny-qwen2")
    assert (m.name, m.layers, m.kv_heads, m.qkv_bias, m.sliding_window) == (
        "someone/tiny-qwen2",
        2,
        2,
        True,
        None,
    )


def test_cli_reads_the_hub_cache(hf_home: Path) -> None:
    # The cached copy wins over the built-in one: a Llama-3.1-8B config cut to 16 layers shows it
    # was read. 16 layers × 218,112,000 per layer + 2 × 128256 × 4096 (embedding, head) + 4096
    # (final norm) = 3,489,792,000 + 1,050,673,152 + 4096.
    cfg = {**llama_8b(), "num_hidden_layers": 16}
    cache_repo(hf_home, "meta-llama/Llama-3.1-8B", cfg)
    env = {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    r = run_cli("model", "--model", "meta-llama/Llama-3.1-8B", "--context", "8192", "--json", env=env)
    assert r.returncode == 0, r.stderr
    out = r.json()
    assert out["config"]["name"] == "meta-llama/Llama-3.1-8B"
    assert out["config"]["layers"] == 16
    assert out["config"]["params"] == 16 * 218_112_000 + 2 * 128256 * 4096 + 4096


def test_builtin_copy_serves_an_uncached_repo_offline(hf_home: Path) -> None:
    # nothing cached, no network: the packaged copy of the published config answers
    assert get_model("meta-llama/Llama-3.1-8B").name == "llama-3.1-8b"


def test_offline_without_a_cached_copy(hf_home: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"'nobody/no-such-model'.*HF_HUB_OFFLINE.*config\.json"):
        get_model("nobody/no-such-model")
    r = run_cli(
        "model",
        "--model",
        "nobody/no-such-model",
        "--context",
        "8192",
        env={"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"},
    )
    assert_one_line_error(r, "nobody/no-such-model", "HF_HUB_OFFLINE", "config.json")


def test_without_huggingface_hub(hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if not installed
    with pytest.raises(ModelConfigError, match=r"huggingface_hub is not installed.*attnroof\[hub\]"):
        get_model("nobody/no-such-model")


def test_unmodelled_hub_config_is_refused_by_name(hf_home: Path) -> None:
    path = cache_repo(hf_home, "mistralai/Mixtral-8x7B-v0.1", {**llama_8b(), "num_local_experts": 8})
    with pytest.raises(ModelConfigError, match="num_local_experts = 8") as e:
        get_model("mistralai/Mixtral-8x7B-v0.1")
    assert str(path) in str(e.value)


def test_paths_with_slashes_stay_paths(tmp_path: Path, hf_home: Path) -> None:
    folder = tmp_path / "org" / "name"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**llama_8b(), "num_hidden_layers": 2}))
    assert get_model(str(folder)).layers == 2
