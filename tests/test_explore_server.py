"""attnroof explore's server, over HTTP without a browser: each answer is the command line's JSON
for the same inputs, byte for byte; a bad request is one line of JSON and status 400; no
request reads a file of its choosing (a pasted text is the only file, in the server's folder).
Every request here carries the server's token, as the page's do (tests/test_explore_hostile.py
sends those that do not)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnroof.commands._run import run
from attnroof.explore.explorer import Explorer
from attnroof.explore.server import make_server, url_of
from conftest import _PYTHONPATH, run_cli_process

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "attnroof" / "model" / "configs"
DEVICE_TOML = """
[[device]]
name = "Toy GPU"
peak_flops_per_s = { bf16 = 400e12 }
bandwidth_bytes_per_s = 2e12
capacity_bytes = 48e9
source = "a test's own figures"
"""


TOKENS: dict[str, str] = {}
"""Each running test server's base URL -> its token: a request to it carries the token."""


@contextlib.contextmanager
def serving(**options: Any) -> Iterator[tuple[str, Explorer]]:
    srv, explorer = make_server(run, **options)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    base = url_of(srv)
    TOKENS[base] = explorer.token
    try:
        yield base, explorer
    finally:
        TOKENS.pop(base)
        srv.shutdown()
        srv.server_close()
        explorer.close()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Explorer]]:
    with serving() as site:
        yield site


def _get(url: str | urllib.request.Request) -> tuple[int, str]:
    req = url if isinstance(url, urllib.request.Request) else urllib.request.Request(url)
    token = next((t for base, t in TOKENS.items() if req.full_url.startswith(base)), None)
    if token is not None and not req.has_header("X-attnroof-token"):
        req.add_header("X-Attnroof-Token", token)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _post(url: str, body: Any) -> tuple[int, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    return _get(req)


def _one_line_error(status: int, text: str, *needles: str) -> str:
    assert status == 400, text
    assert text.endswith("\n") and text.count("\n") == 1, text
    line = json.loads(text)["error"]
    assert "\n" not in line and line
    for needle in needles:
        assert needle in line, line
    return line


MODEL = ["--model", "llama-3.1-8b", "--context", "8192", "--batch", "8", "--device", "H100 SXM"]


def test_model_json_is_the_command_lines(server):
    base, _ = server
    q = urllib.parse.urlencode(
        {"model": "llama-3.1-8b", "context": "8192", "batch": "8", "device": "H100 SXM"}
    )
    status, text = _get(f"{base}api/model?{q}")
    cli = run_cli_process("model", *MODEL, "--json")
    assert status == 200 and cli.returncode == 0
    assert text == cli.stdout  # byte for byte
    # a real number: 8 sequences of 8192 tokens' KV at 131,072 B a token (32 layers × 8 KV heads ×
    # 128 × 2 (K and V) × 2 B) = 8,589,934,592 B
    assert json.loads(text)["memory"]["kv_cache_bytes"] == 8 * 8192 * 32 * 8 * 128 * 2 * 2


def test_a_plan_and_dtypes_by_post_equal_the_command_line(server):
    base, _ = server
    params = {
        "model": "mixtral-8x7b",
        "phase": "prefill",
        "context": "2048",
        "batch": "2",
        "device": "H100 SXM",
        "tp": "2",
        "ep": "2",
        "kv-dtype": "fp8",
        "weight-dtype": "fp8",
    }
    status, text = _post(f"{base}api/model", {"params": params})
    words = [w for k, v in params.items() for w in (f"--{k}", v)]
    assert status == 200
    assert text == run_cli_process("model", *words, "--json").stdout
    assert json.loads(text)["parallel"]["tp"] == 2


def test_sweep_crossover_devices_and_serve_sim_equal_the_command_line(server):
    base, _ = server
    cases = [
        ("sweep", {"head-dim": "128", "seq": "256..4096", "device": "H100 SXM"}),
        ("crossover", {"head-dim": "128", "device": "H100 SXM", "causal": True}),
        ("devices", {}),
        (
            "plan",
            {
                "model": "llama-3.1-8b",
                "devices": "8",
                "phase": "decode",
                "context": "8192",
                "batch": "64",
                "device": "H100 SXM",
            },
        ),
        ("serve-sim", {"model": "llama-3.1-8b", "device": "H100 SXM", "rate": "5", "num-requests": "50"}),
    ]
    for command, params in cases:
        status, text = _post(f"{base}api/{command}", {"params": params})
        words = [w for k, v in params.items() for w in ([f"--{k}"] if v is True else [f"--{k}", v])]
        assert status == 200, text
        assert text == run_cli_process(command, *words, "--json").stdout, command
    # the seed's crossover on an H100 at d = 128, fused and causal: the smallest s with I(s) ≥ ridge
    status, text = _post(f"{base}api/crossover", {"params": {"head-dim": "128", "device": "H100 SXM"}})
    assert json.loads(text)["fused"]["s_min"] == 585  # 517 s / 1024 ≥ 989.4e12 / 3.35e12 → s ≥ 584.97


def test_a_pasted_config_and_device_file_equal_the_command_line_on_those_files(server, tmp_path):
    base, explorer = server
    config = (CONFIGS / "qwen2.5-7b.json").read_text()
    status, text = _post(
        f"{base}api/model",
        {"params": {"context": "4096", "batch": "4"}, "config": config, "device_file": DEVICE_TOML},
    )
    (tmp_path / "pasted").mkdir()
    (tmp_path / "pasted" / "config.json").write_text(config)
    (tmp_path / "device.toml").write_text(DEVICE_TOML)
    cli = run_cli_process(
        "model",
        "--context",
        "4096",
        "--batch",
        "4",
        "--model",
        str(tmp_path / "pasted" / "config.json"),
        "--device",
        str(tmp_path / "device.toml"),
        "--json",
    )
    assert status == 200, text
    assert text == cli.stdout
    data = json.loads(text)
    assert data["device"] == "Toy GPU" and data["ridge"] == 400e12 / 2e12  # 200 FLOP/B
    # the texts are the only files, in the server's own folder
    assert sorted(p.name for p in explorer.folder.rglob("*") if p.is_file()) == ["config.json", "device.toml"]


@pytest.mark.parametrize(
    ("command", "body", "needles"),
    [
        ("model", {"params": {"model": "llama-3.1-8b", "context": "8192", "batch": "0"}}, ["--batch", "'0'"]),
        ("model", {"params": {"model": "llama-3.1-8b", "context": "8192", "phase": "both"}}, ["'both'"]),
        ("model", {"params": {"model": "/etc/passwd", "context": "8"}}, ["'/etc/passwd'", "built-in"]),
        ("model", {"params": {"model": "config.json", "context": "8"}}, ["'config.json'"]),
        ("model", {"params": {"model": "llama-3.1-8b", "device": "../device.toml"}}, ["'../device.toml'"]),
        ("model", {"params": {"model": "llama-3.1-8b", "calibration": "/etc/passwd"}}, ["'calibration'"]),
        ("model", {"params": {"model": "llama-3.1-8b", "batch": "--calibration=/x"}}, ["--batch"]),
        ("model", {"params": {"context": "8"}, "config": "{not json"}, ["config.json", "not valid JSON"]),
        ("model", {"params": {"context": "8"}, "config": "   "}, ["empty"]),
        (
            "model",
            {
                "params": {"model": "llama-3.1-8b", "context": "8", "device": "R"},
                "device_file": "[[device]]\nname = 'x'\n",
            },
            ["device.toml"],
        ),
        ("model", {"params": {"model": ["a"]}}, ["'model'"]),
        ("measure", {"params": {}}, ["'measure'"]),
        ("model", {"params": []}, ["params"]),
    ],
)
def test_a_bad_request_is_one_line_and_400(server, command, body, needles):
    base, explorer = server
    line = _one_line_error(*_post(f"{base}api/{command}", body), *needles)
    assert str(explorer.folder) not in line  # a pasted text is named as the user gave it


def test_bad_bodies_and_pages(server):
    base, _ = server
    _one_line_error(*_post(f"{base}api/model", b"{oops"), "not JSON")
    status, text = _get(f"{base}static/../server.py")
    assert status == 404 and json.loads(text)["error"]
    status, text = _get(f"{base}")
    assert status == 200 and '<script src="/static/plotly.min.js">' in text
    status, text = _get(f"{base}static/plotly.min.js")
    assert status == 200 and "plotly.js v" in text[:200]


def test_a_request_for_another_host_is_refused(server):
    """DNS rebinding: a page at evil.example whose name resolves to 127.0.0.1 sends Host: evil.example."""
    base, _ = server
    req = urllib.request.Request(f"{base}api/devices", headers={"Host": "evil.example"})
    _one_line_error(*_get(req), "'evil.example'")  # type: ignore[arg-type]


@pytest.fixture()
def inline() -> Iterator[tuple[str, Explorer]]:
    """A server that runs its commands in this process (``workers=False``), where a test can
    watch the library's functions."""
    with serving(workers=False) as site:
        yield site


def test_no_request_reads_a_path_of_its_own(inline, monkeypatch, tmp_path):
    """Every file a command opens for a request lies in the server's folder: the readers of
    config.json files and device files are watched while hostile and pasted requests run (in a
    server that runs its commands in this process, where the watch sees them)."""
    base, explorer = inline
    import attnroof.devices as devices
    import attnroof.model.config as config

    opened: list[str] = []
    for module, name in (
        (config, "load_config_file"),
        (devices, "load_device_file"),
        (devices, "load_ceilings_file"),
    ):
        real = getattr(module, name)

        def watch(path: Any, _real: Any = real) -> Any:
            opened.append(str(path))
            return _real(path)

        monkeypatch.setattr(module, name, watch)
    for value in ("/etc/hostname", "~/.bashrc", "pyproject.toml", "src/attnroof/model/configs/gpt2.json"):
        for key in ("model", "device"):
            _one_line_error(*_post(f"{base}api/model", {"params": {key: value, "context": "8"}}))
        _one_line_error(*_post(f"{base}api/devices", {"params": {"name": value}}))
    # a built-in name or a catalog name that is also a file where the server runs is not read
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2").write_text("{}")
    (tmp_path / "L4").write_text("")
    _one_line_error(
        *_post(f"{base}api/model", {"params": {"model": "gpt2", "context": "8"}}), "'gpt2'", "file"
    )
    _one_line_error(*_post(f"{base}api/model", {"params": {"model": "llama-3.1-8b", "device": "L4"}}), "'L4'")
    _one_line_error(*_post(f"{base}api/devices", {"params": {"name": "L4"}}), "'L4'")
    _post(f"{base}api/model", {"params": {"context": "8"}, "config": (CONFIGS / "gpt2.json").read_text()})
    _post(f"{base}api/devices", {"params": {}, "device_file": DEVICE_TOML})
    assert opened and all(p.startswith(str(explorer.folder)) for p in opened), opened


def test_the_command_prints_its_url_and_serves(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnroof", "explore", "--stop-after", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": _PYTHONPATH},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("attnroof explore: http://127.0.0.1:")
    url = urllib.parse.urlsplit(line.split()[2])  # http://127.0.0.1:PORT/?token=T
    token = urllib.parse.parse_qs(url.query)["token"][0]
    assert len(token) >= 20
    status, text = _get(f"http://{url.netloc}/api/devices?name=H100+SXM&token={token}")
    assert status == 200 and json.loads(text)["devices"][0]["bandwidth_bytes_per_s"] == 3.35e12
    assert proc.wait(300) == 0  # a limit only against a hang: it stops after the one request


def test_a_bad_port_is_one_line():
    r = run_cli_process("explore", "--port", "70000")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "'70000'" in r.stderr


def test_the_page_is_package_data():
    """The wheel and the sdist carry the page: pyproject's package data names the static folder,
    which holds the page, its script and style, plotly.js and plotly.js's licence."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "attnroof"
    ]
    assert "explore/static/*" in data
    static = root / "src" / "attnroof" / "explore" / "static"
    assert sorted(p.name for p in static.iterdir()) == [
        "LICENSE-plotly.js.txt",
        "app.js",
        "index.html",
        "plotly.min.js",
        "style.css",
    ]


def test_open_launches_the_browser_at_the_url(monkeypatch):
    """``--open`` hands the printed URL to the web browser (here a stand-in that loads it once)."""
    import webbrowser

    from conftest import run_cli

    opened: list[tuple[str, int, str]] = []
    visits: list[threading.Thread] = []

    def browser(url: str) -> bool:
        def visit() -> None:
            status, text = _get(url)
            opened.append((url, status, text))

        visits.append(threading.Thread(target=visit))
        visits[-1].start()
        return True

    monkeypatch.setattr(webbrowser, "open", browser)
    r = run_cli("explore", "--open", "--stop-after", "1")
    for visit in visits:
        visit.join(300)  # a limit only against a hang
    assert r.returncode == 0, r.stderr
    ((url, status, text),) = opened
    assert r.stdout == f"attnroof explore: {url} (Ctrl-C stops it)\n"
    assert status == 200 and "<title>attnroof explore</title>" in text
