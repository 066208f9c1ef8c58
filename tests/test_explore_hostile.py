"""attnroof explore against a hostile page and ordinary load (issue 32): a page elsewhere cannot
use it (no token, a foreign Origin or Sec-Fetch-Site, a body no form can send, a rebinding Host
on any loopback address); oversized and deeply nested bodies are one line each; 200 clients at
once are all answered; idle and slow sockets hold nobody up and are cut off; a job past the
explorer's caps, its time or its memory is refused in one line and the server goes on; the
temporary folder goes on every exit. Then a bounded fuzz of the API: random commands, parameters
and bodies get 200 or a 4xx line of JSON, never a 5xx or a hang.

Every server binds 127.0.0.1 (one test 127.0.0.2, skipped where it cannot); every wait has a
limit against a hang only, never a timing to meet.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnroof.commands._run import run
from attnroof.explore import listen
from attnroof.explore.caps import FLAGS, MAX_BODY, MAX_PASTED, MAX_PASTED_FILES, WARM_HEAVY
from attnroof.explore.explorer import Explorer
from attnroof.explore.server import make_server
from conftest import _PYTHONPATH, run_cli_process

HANG_S = 120  # a limit against a hang, never a timing to meet
DEVICE = "H100 SXM"
GATE = "ATTNROOF_TEST_GATE"


def gated_run(words: Any) -> int:
    """The command line's ``run``, but a search or a simulation (not a worker's warm-up) waits
    until the file named by ``$ATTNROOF_TEST_GATE`` exists (the workers import this module by
    name): a job that lasts exactly as long as a test wants, whatever the machine's pace."""
    gate = os.environ.get(GATE)
    if gate and words and words[0] in ("serve-sim", "plan") and list(words) not in map(list, WARM_HEAVY):
        while not os.path.exists(gate):
            time.sleep(0.01)
    return run(words)


class Site:
    """A running explorer and a raw HTTP/1.0 client for it (urllib would fix what a hostile
    client sends)."""

    def __init__(self, host: str, port: int, explorer: Explorer) -> None:
        self.host, self.port, self.explorer = host, port, explorer
        self.token = explorer.token
        self.netloc = f"{host}:{port}"

    def raw(self, data: bytes, *, half_close: bool = False) -> tuple[int, dict[str, str], bytes]:
        """Send ``data`` as it is (then, with ``half_close``, say it has sent all it will); (status,
        headers, body) of the answer (status 0: none)."""
        with socket.create_connection((self.host, self.port), timeout=HANG_S) as s:
            with contextlib.suppress(OSError):  # the server may answer and close before it all went
                s.sendall(data)
                if half_close:
                    s.shutdown(socket.SHUT_WR)
            chunks = []
            with contextlib.suppress(OSError):
                while chunk := s.recv(1 << 16):
                    chunks.append(chunk)
        return _parse(b"".join(chunks))

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        token: bool = True,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        h = {"Host": self.netloc}
        if body is not None:
            h["Content-Type"] = "application/json"
            h["Content-Length"] = str(len(body))
        if token:
            h["X-Attnroof-Token"] = self.token
        h.update(headers or {})
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in h.items() if v is not None
        )
        return self.raw(head.encode("utf-8", "surrogateescape") + b"\r\n" + (body or b""))

    def post(self, command: str, params: dict[str, Any], **kw: Any) -> tuple[int, dict[str, str], bytes]:
        return self.request("POST", f"/api/{command}", json.dumps({"params": params}).encode(), **kw)


def _parse(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/"):
        return 0, {}, answer
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


@contextlib.contextmanager
def serving(
    host: str = "127.0.0.1",
    runner: Any = run,
    read_s: float = listen.READ_S,
    idle_s: float = listen.IDLE_S,
    **options: Any,
) -> Iterator[Site]:
    srv, explorer = make_server(runner, host, **options)
    srv.read_s, srv.idle_s = read_s, idle_s
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield Site(host, srv.server_address[1], explorer)
    finally:
        srv.shutdown()
        srv.server_close()
        explorer.close()


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with serving() as s:
        yield s


def one_line(status: int, body: bytes, *needles: str, code: int | None = None) -> str:
    """The answer is a 4xx (``code`` when given) with one line of JSON naming each needle."""
    assert 400 <= status < 500 and (code is None or status == code), (status, body[:300])
    text = body.decode()
    assert text.endswith("\n") and text.count("\n") == 1, text[:300]
    line = json.loads(text)["error"]
    assert line and "\n" not in line
    for needle in needles:
        assert needle in line, line
    return line


def devices_ok(status: int, body: bytes) -> None:
    assert status == 200, body[:300]
    assert json.loads(body)["devices"][0]["bandwidth_bytes_per_s"] == 3.35e12  # the H100's 3.35 TB/s


# ---------------------------------------------------------------- a page elsewhere


def test_a_page_elsewhere_gets_nothing_and_the_page_everything(site):
    body = json.dumps({"params": {"name": DEVICE}}).encode()
    evil = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    cases = [
        # a form's POST: no token, text/plain, another origin (the reproduction: it was 200)
        (dict(token=False, headers={**evil, "Content-Type": "text/plain"}), 403, "'http://evil.example'"),
        # the same with a token it could not know, and the JSON type it cannot send without asking
        (dict(headers=evil), 403, "'http://evil.example'"),
        (dict(headers={"Sec-Fetch-Site": "cross-site"}), 403, "cross-site"),
        (dict(headers={"Sec-Fetch-Site": "same-site"}), 403, "same-site"),
        (dict(headers={"Origin": "null"}), 403, "'null'"),
        (dict(token=False), 403, "token"),
        (dict(headers={"X-Attnroof-Token": "guess"}), 403, "token"),
        (dict(headers={"Content-Type": "text/plain"}), 415, "'text/plain'"),
        (dict(headers={"Content-Type": "application/x-www-form-urlencoded"}), 415, "urlencoded"),
        (dict(headers={"Content-Type": None}), 415, "untyped"),
    ]
    for kw, code, needle in cases:
        status, _, answer = site.request("POST", "/api/devices", body, **kw)
        one_line(status, answer, needle, code=code)
    # an <img src="http://127.0.0.1:PORT/api/serve-sim?..."> sends a GET with no token
    status, _, answer = site.request("GET", "/api/devices?name=H100+SXM", token=False)
    one_line(status, answer, "token", code=403)
    # the page itself: same origin, the token, JSON; a GET with ?token= (curl) the same
    same = {"Origin": f"http://{site.netloc}", "Sec-Fetch-Site": "same-origin"}
    devices_ok(*site.request("POST", "/api/devices", body, headers=same)[::2])
    devices_ok(*site.request("GET", f"/api/devices?name=H100+SXM&token={site.token}", token=False)[::2])
    # the page is the token's too; its scripts are not secret
    status, headers, page = site.request("GET", "/", token=False)
    assert status == 403 and b"?token=" in page and headers["content-type"].startswith("text/html")
    status, headers, page = site.request("GET", f"/?token={site.token}", token=False)
    assert status == 200 and b"<title>attnroof explore</title>" in page
    assert (
        headers["referrer-policy"] == "no-referrer"
        and "frame-ancestors 'none'" in headers["content-security-policy"]
    )
    assert site.request("GET", "/static/app.js", token=False)[0] == 200


def test_a_rebinding_host_is_refused_on_every_address(site):
    """DNS rebinding: evil.example resolves to this machine; the browser sends Host: evil.example."""
    for host in ("evil.example", f"evil.example:{site.port}", "", f"127.0.0.1:{site.port + 1}"):
        status, _, answer = site.request("GET", "/api/devices?name=H100+SXM", headers={"Host": host})
        one_line(status, answer, repr(host), code=400)
    for host in (f"localhost:{site.port}", f"LOCALHOST:{site.port}", f"127.0.0.1:{site.port}"):
        devices_ok(*site.request("GET", "/api/devices?name=H100+SXM", headers={"Host": host})[::2])
    # on another loopback address the check is on too (it was skipped on 127.0.0.2)
    try:
        other = serving("127.0.0.2")
        s = other.__enter__()
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    try:
        one_line(*s.request("GET", "/api/devices", headers={"Host": "evil.example"})[::2], "evil", code=400)
        devices_ok(*s.request("GET", "/api/devices?name=H100+SXM")[::2])
    finally:
        other.__exit__(None, None, None)


@pytest.mark.parametrize(
    ("words", "needles"),
    [
        (["--host", ""], ["--host ''", "every interface", "--allow-remote"]),
        (["--host", "0.0.0.0"], ["'0.0.0.0'", "--allow-remote"]),
        (["--host", "::"], ["'::'", "--allow-remote"]),
        (["--host", "nosuch.invalid"], ["'nosuch.invalid'"]),
        (["--host", "256.1.1.1"], ["'256.1.1.1'"]),
    ],
)
def test_a_host_beyond_this_machine_needs_a_flag_and_a_bad_one_leaves_nothing(words, needles):
    """None of these binds anything (``nosuch.invalid`` left a folder behind)."""
    before = _folders()
    r = run_cli_process("explore", *words, "--port", "0")
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    for needle in needles:
        assert needle in r.stderr
    assert {p for p in _folders() - before if not _alive(_folder_pid(p))} == set()


def _folders() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "attnroof-explore-*")))


def _folder_pid(path: str) -> int:
    """The process an explorer's folder is named for (``attnroof-explore-PID-XXXX``)."""
    part = Path(path).name.split("-")[2]
    return int(part) if part.isdigit() else 0


def test_allow_remote_warns_and_still_checks_the_host(monkeypatch):
    """``--allow-remote`` (here 127.0.0.1 stands in for an address beyond this machine: no test
    listens elsewhere): a warning on stderr, the page served with the token, a foreign Host still
    refused; without the flag the same address is refused in one line."""
    import webbrowser

    from attnroof.explore import server as server_module
    from conftest import run_cli

    monkeypatch.setattr(server_module, "_loopback", lambda address: False)
    r = run_cli("explore", "--stop-after", "1")
    assert r.returncode == 2 and "'127.0.0.1'" in r.stderr and "--allow-remote" in r.stderr
    seen: list[Any] = []

    def browser(url: str) -> bool:
        def visit() -> None:
            u = urllib.parse.urlsplit(url)
            host, port = u.netloc.split(":")
            s = Site(host, int(port), type("E", (), {"token": parse_token(url)})())  # type: ignore[arg-type]
            seen.append(s.request("GET", "/api/devices", headers={"Host": "evil.example"}))
            seen.append(s.request("GET", f"/?{u.query}", token=False))

        threading.Thread(target=visit).start()
        return True

    monkeypatch.setattr(webbrowser, "open", browser)
    r = run_cli("explore", "--allow-remote", "--open", "--stop-after", "2")
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("attnroof explore: warning: listening on 127.0.0.1 port ")
    assert "beyond this machine" in r.stderr
    (evil, page) = seen
    one_line(evil[0], evil[2], "'evil.example'", code=400)
    assert page[0] == 200 and b"<title>attnroof explore</title>" in page[2]


def parse_token(url: str) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["token"][0]


# ---------------------------------------------------------------- bodies and requests


def test_oversized_and_deeply_nested_bodies_are_one_line(site):
    # a body larger than the cap is refused on its length, before it is read
    status, _, answer = site.raw(
        f"POST /api/model HTTP/1.1\r\nHost: {site.netloc}\r\nX-Attnroof-Token: {site.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode()
    )
    one_line(status, answer, f"{MAX_BODY:,}", code=413)
    # 100,000 '[' (the connection was dropped, a RecursionError on the terminal)
    one_line(*site.request("POST", "/api/model", b"[" * 100_000)[::2], "nests deeper", code=400)
    one_line(*site.request("POST", "/api/model", b'{"params": {"model": ' + b"[" * 50_000 + b"}")[::2])
    nested = {"params": {"model": json.loads("[" * 500 + "]" * 500)}}
    one_line(*site.request("POST", "/api/model", json.dumps(nested).encode())[::2], "'model'")
    # a pasted config or device file nested past any reader's depth: the reader's own line
    deep = '{"model_type": "llama", "x": ' + "[" * 100_000 + "}"
    body = json.dumps({"params": {"context": "8"}, "config": deep}).encode()
    one_line(*site.request("POST", "/api/model", body)[::2], "config.json", "nested too deeply")
    body = json.dumps({"params": {}, "device_file": "a = " + "[" * 100_000}).encode()
    one_line(*site.request("POST", "/api/devices", body)[::2], "device.toml", "nested too deeply")
    # a body shorter than it said, or none said, or chunked
    short = _head(site, "Content-Length: 100") + b'{"params"'
    one_line(*site.raw(short, half_close=True)[::2], "ended after 9 of its 100")
    one_line(*site.raw(_head(site, "Content-Length: x"))[::2], "'x'")
    one_line(*site.raw(_head(site, "Transfer-Encoding: chunked") + b"0\r\n\r\n")[::2], code=411)
    one_line(*site.request("POST", "/api/model", b"\xff\xfe")[::2], "not JSON")
    one_line(*site.request("POST", "/api/model", b'{"params": {"model": NaN}}')[::2], "NaN")


def _head(site: Site, *lines: str) -> bytes:
    head = [
        "POST /api/devices HTTP/1.1",
        f"Host: {site.netloc}",
        f"X-Attnroof-Token: {site.token}",
        "Content-Type: application/json",
    ]
    return ("\r\n".join([*head, *lines]) + "\r\n\r\n").encode()


def test_other_methods_and_malformed_requests_are_one_line_of_json(site):
    for method in ("PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "BREW"):
        status, headers, answer = site.request(method, "/api/devices")
        one_line(status, answer, repr(method), code=405)
        assert headers["allow"] == "GET, POST"
    status, _, answer = site.request("HEAD", "/")
    assert status == 405 and answer == b""
    for line in (
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n",
    ):
        status, _, answer = site.raw(line)
        one_line(status, answer)
    many = "".join(f"X-{i}: {i}\r\n" for i in range(200))
    one_line(*site.raw(f"GET / HTTP/1.1\r\nHost: {site.netloc}\r\n{many}\r\n".encode())[::2], code=431)
    one_line(*site.request("GET", "/api/devices?name=H100+SXM&evil=1")[::2], "'evil'")
    one_line(*site.request("GET", "/nowhere")[::2], "'/nowhere'", code=404)


# ---------------------------------------------------------------- load


def test_200_clients_at_once_are_all_answered(site):
    """The standard library's backlog of 5 reset 17 to 37 of them."""
    answers: list[tuple[int, bytes]] = []
    guard = threading.Lock()

    def client(i: int) -> None:
        if i % 2:
            got = site.request("GET", "/api/devices?name=H100+SXM")
        else:
            got = site.post("model", {"model": "gpt2", "context": str(64 * (1 + i % 7)), "device": DEVICE})
        with guard:
            answers.append((got[0], got[2]))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert len(answers) == 200 and {status for status, _ in answers} == {200}
    models = [json.loads(body) for _, body in answers if b'"memory"' in body]
    assert len(models) == 100 and all(m["config"]["head_dim"] == 64 for m in models)  # GPT-2: 768 / 12


def test_idle_and_slow_sockets_hold_nobody_up():
    """Connections that send nothing, more that send half a request head a byte a second (more
    than the server has threads) and 20 that send a head and half a body: the page's requests
    are answered while they all wait (nobody is cut off here: the limits are ten minutes). 300,
    100 and 20 where the file descriptors allow (the server parks a quarter of them at most)."""
    n_slow = listen.THREADS + 36
    n_idle = min(300, listen.MAX_PARKED - n_slow - 20 - 16)
    with serving(read_s=600.0, idle_s=600.0) as site:
        idle = [_connect(site) for _ in range(n_idle)]
        slow = [_connect(site, b"GET /api/devices HTTP/1.1\r\nHo") for _ in range(n_slow)]
        bodies = [_connect(site, _head(site, "Content-Length: 100") + b'{"par') for _ in range(20)]
        try:
            with _trickling(slow, 1.0):
                for _ in range(20):
                    devices_ok(*site.request("GET", "/api/devices?name=H100+SXM")[::2])
                assert all(_open(s) for s in idle + slow + bodies)  # all still waiting
        finally:
            for s in idle + slow + bodies:
                s.close()


def test_idle_and_slow_sockets_are_cut_off():
    """With limits of 1 s: a silent connection, a head sent a byte at a time and a body that
    stops halfway are each closed by the server (it was: never)."""
    with serving(read_s=1.0, idle_s=1.0) as site:
        idle = [_connect(site) for _ in range(10)]
        slow = [_connect(site, b"GET / HTTP/1.1\r\n") for _ in range(10)]
        bodies = [_connect(site, _head(site, "Content-Length: 100") + b'{"par') for _ in range(10)]
        try:
            with _trickling(slow, 0.2):
                for s in idle + slow + bodies:
                    _until(lambda s=s: not _open(s))
        finally:
            for s in idle + slow + bodies:
                s.close()
        devices_ok(*site.request("GET", "/api/devices?name=H100+SXM")[::2])


@contextlib.contextmanager
def _trickling(socks: list[socket.socket], every_s: float) -> Iterator[None]:
    """A byte to each of ``socks`` every ``every_s`` seconds while the block runs (a slow client
    that never finishes its request)."""
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(every_s):
            for s in socks:
                with contextlib.suppress(OSError):
                    s.send(b"x")

    pacer = threading.Thread(target=trickle, daemon=True)
    pacer.start()
    try:
        yield
    finally:
        stop.set()
        pacer.join(5)


def _connect(site: Site, first: bytes = b"") -> socket.socket:
    s = socket.create_connection((site.host, site.port), timeout=HANG_S)
    if first:
        s.sendall(first)
    return s


def _open(s: socket.socket) -> bool:
    """Whether the server still holds ``s`` open (nothing to read yet: no end, no answer)."""
    s.setblocking(False)
    try:
        s.recv(1, socket.MSG_PEEK)  # b"": closed; data: an answer came
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


def test_a_search_or_a_simulation_never_holds_the_page(tmp_path, monkeypatch):
    """Two simulations that cannot end (their gate is shut) fill their pool, and the page's own
    requests are answered meanwhile (the one global lock made them wait, then time out after 60 s);
    the gate opened, both simulations answer."""
    gate = tmp_path / "gate"
    monkeypatch.setenv(GATE, str(gate))
    answers: list[tuple[int, bytes]] = []
    small = {"model": "gpt2", "device": DEVICE, "rate": "5", "num-requests": "2", "input-len": "256"}
    with serving(runner=gated_run) as s:

        def simulate() -> None:
            got = s.post("serve-sim", small)
            answers.append((got[0], got[2]))

        threads = [threading.Thread(target=simulate) for _ in range(2)]
        for t in threads:
            t.start()
        _until(lambda: len(s.explorer.pools["heavy"].pids()) == 2)
        for _ in range(10):
            devices_ok(*s.request("GET", "/api/devices?name=H100+SXM")[::2])
            status, _, body = s.post("model", {"model": "gpt2", "context": "64", "device": DEVICE})
            assert status == 200 and json.loads(body)["config"]["head_dim"] == 64
        assert answers == []  # the simulations are still waiting at their gate
        gate.touch()
        for t in threads:
            t.join(HANG_S)
    assert [status for status, _ in answers] == [200, 200]
    assert all(json.loads(body)["summary"]["requests"] == 2 for _, body in answers)


def _until(condition: Any) -> None:
    deadline = time.monotonic() + HANG_S
    while not condition():
        assert time.monotonic() < deadline, "a limit against a hang"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("command", "params", "needles"),
    [
        # the reproduction: 1,000,000 requests held the server and grew it past 3 GB
        (
            "serve-sim",
            {"model": "llama-3.1-8b", "num-requests": "1000000", "rate": "10"},
            ["'1000000'", "10,000"],
        ),
        ("serve-sim", {"model": "llama-3.1-8b", "num-requests": "1M"}, ["'1M'"]),
        (
            "serve-sim",
            {"model": "llama-3.1-8b", "num-requests": "1000", "output-len": "100000"},
            ["1,000 × 100,000", "2,000,000"],
        ),
        ("serve-sim", {"model": "llama-3.1-8b", "output-len": "2001"}, ["1,000 × 2,001"]),  # 1,000 by default
        (
            "serve-sim",
            {"model": "llama-3.1-8b", "num-requests": "２００"},
            ["'２００'", "digits"],
        ),  # int() reads it
        (
            "plan",
            {"model": "llama-3.1-8b", "devices": "4096", "context": "8192", "batch": "8"},
            ["'4096'", "1,024"],
        ),
    ],
)
def test_a_job_past_the_explorers_caps_is_one_line(site, command, params, needles):
    one_line(*site.post(command, params)[::2], *needles, code=400)


def test_a_job_past_its_time_is_ended_and_the_next_is_served(tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    monkeypatch.setenv(GATE, str(gate))
    with serving(runner=gated_run, time_limits=(30.0, 0.5)) as s:
        heavy = s.explorer.pools["heavy"]
        small = {"model": "gpt2", "device": DEVICE, "rate": "5", "num-requests": "2", "input-len": "256"}
        one_line(*s.post("serve-sim", small)[::2], "serve-sim", "limit of 0.5 s", code=400)
        assert heavy.pids() == []  # the worker was ended with its job
        gate.touch()
        status, _, body = s.post("serve-sim", small)
        assert status == 200 and json.loads(body)["summary"]["requests"] == 2


def test_a_job_past_its_memory_is_ended_and_the_next_is_served():
    """A budget of 50 MiB a simulation: 10,000 requests of 200 answer tokens add about 110 MB to
    the worker (within the explorer's caps: 2,000,000 answer tokens)."""
    with serving(memory_budgets=(1 << 30, 50 << 20)) as s:
        params = {"model": "llama-3.1-8b", "device": DEVICE, "num-requests": "10000", "output-len": "200"}
        one_line(*s.post("serve-sim", params)[::2], "serve-sim", "50 MiB", code=400)
        devices_ok(*s.request("GET", "/api/devices?name=H100+SXM")[::2])
        small = {"model": "gpt2", "device": DEVICE, "rate": "5", "num-requests": "2", "input-len": "256"}
        assert s.post("serve-sim", small)[0] == 200


def test_a_job_whose_client_left_is_ended(tmp_path, monkeypatch):
    monkeypatch.setenv(GATE, str(tmp_path / "never"))
    with serving(runner=gated_run) as s:
        heavy = s.explorer.pools["heavy"]
        body = json.dumps(
            {"params": {"model": "gpt2", "device": DEVICE, "num-requests": "2", "input-len": "256"}}
        )
        conn = socket.create_connection((s.host, s.port), timeout=HANG_S)
        head = _head(s, f"Content-Length: {len(body)}").replace(b"/api/devices", b"/api/serve-sim")
        conn.sendall(head + body.encode())
        _until(lambda: len(heavy.pids()) == 1)
        (pid,) = heavy.pids()
        conn.close()  # the user closed the tab
        _until(lambda: not _alive(pid))
        _until(lambda: heavy.pids() == [])  # the pool forgets the worker after it is reaped


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------- the folder


def test_pasted_texts_are_capped_and_evicted(site):
    big = json.dumps({"model_type": "llama", "pad": "x" * MAX_PASTED})
    body = json.dumps({"params": {"context": "8"}, "config": big}).encode()
    one_line(*site.request("POST", "/api/model", body)[::2], f"{len(big):,} characters", code=413)
    config = json.loads((Path(__file__).parents[1] / "src/attnroof/model/configs/gpt2.json").read_text())
    for i in range(3 * MAX_PASTED_FILES):
        text = json.dumps({**config, "attnroof_test": i, "pad": "x" * 50_000})
        status, _, answer = site.request(
            "POST", "/api/model", json.dumps({"params": {"context": "64"}, "config": text}).encode()
        )
        assert status == 200, answer[:300]
    files = [p for p in site.explorer.folder.rglob("*") if p.is_file()]
    assert (
        len(files) <= MAX_PASTED_FILES
        and sum(p.stat().st_size for p in files) <= MAX_PASTED_FILES * MAX_PASTED
    )


def _explore(*words: str) -> tuple[subprocess.Popen[str], str, str, Path]:
    """``attnroof explore`` in a process of its own: (process, base URL, token, its folder)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnroof", "explore", *words],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": _PYTHONPATH},
    )
    assert proc.stdout is not None
    url = urllib.parse.urlsplit(proc.stdout.readline().split()[2])
    token = urllib.parse.parse_qs(url.query)["token"][0]
    (folder,) = glob.glob(os.path.join(tempfile.gettempdir(), f"attnroof-explore-{proc.pid}-*"))
    return proc, url.netloc, token, Path(folder)


def _paste(netloc: str, token: str) -> None:
    host, port = netloc.split(":")
    s = Site(host, int(port), type("E", (), {"token": token})())  # type: ignore[arg-type]
    body = json.dumps({"params": {"context": "64"}, "config": '{"model_type": "llama"'}).encode()
    one_line(*s.request("POST", "/api/model", body)[::2], "config.json")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_the_folder_goes_on_every_exit(how):
    proc, netloc, token, folder = _explore()
    _paste(netloc, token)
    assert any(folder.rglob("config.json"))
    proc.send_signal(getattr(signal, how))
    assert proc.wait(HANG_S) == 0
    assert not folder.exists()
    assert proc.stderr is not None and proc.stderr.read() == "attnroof explore: stopped\n"


def test_a_killed_explorers_folder_goes_when_the_next_starts():
    proc, netloc, token, folder = _explore()
    _paste(netloc, token)
    proc.kill()  # no handler runs
    proc.wait(HANG_S)
    assert folder.exists()
    nxt, _, _, _ = _explore()
    try:
        assert not folder.exists()
    finally:
        nxt.send_signal(signal.SIGINT)
        nxt.wait(HANG_S)


# ---------------------------------------------------------------- fuzz

WORDS = (
    *("0", "-1", "1", "8", "64", "8192", "8k", "1M", "nan", "inf", "-inf", "1e308", "1e-320", "9" * 400),
    *("", " ", "true", "false", "--json", "--calibration=/etc/passwd", "../x", "/etc/passwd", "\x00", "é"),
    *("llama-3.1-8b", "gpt2", "mixtral-8x7b", "H100 SXM", "L4", "bf16", "fp8", "int4", "decode", "train"),
    *("256..4096", "1..100000000", "1,2,3", "10000", "10001", "1024", "1025"),
)
"""Values that have broken commands before: edges of numbers, flags and paths in disguise, names."""
VALUES = st.one_of(
    st.sampled_from(WORDS),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
EXTRA = ("token", "calibration", "requests-file", "where", "x", "")
"""Parameters no command of the explorer takes (two of them name files on the command line)."""
BASE = {
    "model": "gpt2",
    "device": "L4",
    "head-dim": "64",
    "context": "256",
    "input-len": "64",
    "devices": "4",
}
"""A valid start for each command, which the drawn parameters then change: the fuzz reaches the
commands' own parsers and code, not only the explorer's refusal of an unknown name."""


@st.composite
def requests(draw: Any) -> tuple[str, dict[str, Any]]:
    command = draw(st.sampled_from([*FLAGS, *FLAGS, "measure", "", "../x", "model/../devices"]))
    flags = sorted(FLAGS.get(command, ()))
    params = {k: v for k, v in BASE.items() if k in flags} if draw(st.booleans()) else {}
    keys = st.sampled_from(flags) if flags and draw(st.integers(0, 9)) else st.sampled_from(EXTRA)
    params.update(draw(st.dictionaries(keys, VALUES, max_size=4)))
    return command, params


STATUSES: dict[int, int] = {}  # what the fuzz was answered, for a look with -s


@pytest.fixture(scope="module")
def fuzz_site() -> Iterator[Site]:
    with serving(time_limits=(30.0, 20.0)) as s:
        yield s


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    request=requests(),
    texts=st.dictionaries(
        st.sampled_from(["config", "device_file"]),
        st.one_of(
            st.text(max_size=50), st.integers(), st.none(), st.sampled_from(['{"model_type": "llama"}'])
        ),
        max_size=2,
    ),
    how=st.sampled_from(["post", "get", "raw-body"]),
)
def test_fuzz_the_api_answers_200_or_one_4xx_line(fuzz_site, request, texts, how):
    command, params = request
    if how == "post":
        got = fuzz_site.request("POST", f"/api/{command}", json.dumps({"params": params, **texts}).encode())
    elif how == "get":
        query = urllib.parse.urlencode(
            {k: json.dumps(v) if not isinstance(v, str) else v for k, v in params.items()}
        )
        got = fuzz_site.request("GET", f"/api/{urllib.parse.quote(command)}?{query}")
    else:
        got = fuzz_site.request("POST", f"/api/{command}", json.dumps(params).encode()[:-1])
    status, _, body = got
    assert status != 0, "no answer"
    STATUSES[status] = STATUSES.get(status, 0) + 1
    if status == 200:
        json.loads(body)
    else:
        one_line(status, body)


def test_fuzz_reached_the_commands():
    """The fuzz above did not only meet refusals: some of its requests were answered (run with it)."""
    if not STATUSES:
        pytest.skip("the fuzz did not run in this process")
    assert STATUSES.get(200, 0) > 0 and sum(STATUSES.values()) >= 100, STATUSES
