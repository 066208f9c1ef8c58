"""The explorer's server: the page's static files from the package, and ``/api/COMMAND``, which
runs one attnroof command with ``--json`` through the command line's own path and answers its
output verbatim.

A request names a command and its parameters (flag names without the dashes); they become the
command's words, ``--flag=value`` each (so a value never becomes a flag of its own), and the
command's own parser checks them. No request names a file: a model is a built-in name or a
config.json's text, a device a catalog name or a device file's text; the texts are written to
the server's private folder and passed as that file, exactly as ``--model config.json`` and
``--device FILE.toml`` pass them on the command line. A bad request gets one line of JSON,
``{"error": "..."}``, and a 4xx status.

What a page elsewhere cannot do: every API request carries this run's token (the URL the
command prints has it; the page sends it back as ``X-Attnroof-Token``), names this server in its
``Host`` (DNS rebinding), comes from this server's own origin when the browser says where it
comes from (``Origin``, ``Sec-Fetch-Site``), and a POST's body is ``application/json`` (which no
form or ``<img>`` can send). Each command runs as a job in a worker process (:mod:`.jobs`) with
size caps set here, a time limit and a memory budget; the HTTP side is bounded in
:mod:`.listen`.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from attnroof.explore import listen
from attnroof.explore.jobs import Outcome, Pool

Run = Callable[[Sequence[str]], int]
"""Runs ``attnroof WORDS`` in this process (``attnroof.commands._run.run``): its exit status, its
output on ``sys.stdout``, a one-line error on ``sys.stderr``. A worker process imports it by its
module and name."""

FLAGS: Mapping[str, frozenset[str]] = {
    "model": frozenset(
        {"model", "phase", "batch", "context", "device", "dtype", "weight-dtype", "kv-dtype"}
        | {"tp", "pp", "ep", "dp", "unfused", "list"}
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
TOKEN_HEADER = "X-Attnroof-Token"
FOLDER_PREFIX = "attnroof-explore-"
STATIC = "static"
TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".txt": "text/plain"}


class RequestError(Exception):
    """A request the explorer refuses: one line, a 4xx status (400 unless said)."""

    def __init__(self, message: str, status: int = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


class ListenError(ValueError):
    """An address the explorer will not listen on: one line."""


def _static_files() -> dict[str, bytes]:
    """The page's files, read once from the package (``attnroof/explore/static``)."""
    folder = resources.files("attnroof.explore").joinpath(STATIC)
    return {f.name: f.read_bytes() for f in folder.iterdir() if Path(f.name).suffix in TYPES}


def _allowed_names() -> tuple[frozenset[str], frozenset[str]]:
    """Built-in model names, and the catalog's device names and aliases (a user's own
    ``$ATTNROOF_DEVICES`` included): the only model and device values a request may give."""
    from attnroof.devices import catalog
    from attnroof.model.config import builtin_names

    devices = frozenset(x for d in catalog() for x in (d.name, *d.aliases))
    return frozenset(builtin_names()), devices


def _size(text: str) -> int | None:
    """A size as the command line reads it (``8192``, ``8k``), or None where it would refuse it."""
    import argparse

    from attnroof.commands._common import positive_int

    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        return None


def _caps(command: str, params: Mapping[str, str]) -> None:
    """Refuse a job larger than the page can show (the constants above say why each cap)."""
    if command == "serve-sim":
        requests = _size(params.get("num-requests", str(DEFAULT_REQUESTS)))
        answer = _size(params.get("output-len", str(DEFAULT_ANSWER)))
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
        devices = _size(params.get("devices", ""))
        if devices is not None and devices > MAX_PLAN_DEVICES:
            raise RequestError(
                f"devices {params['devices']!r}: the explorer searches plans on at most "
                f"{MAX_PLAN_DEVICES:,} devices (attnroof plan on the command line takes more)"
            )


def _remove_stale_folders() -> None:
    """Folders of explorers that ended without a word (``kill -9``): this user's, named for a
    process that is gone."""
    base = Path(tempfile.gettempdir())
    for path in base.glob(f"{FOLDER_PREFIX}*-*"):
        pid = path.name[len(FOLDER_PREFIX) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or path.stat().st_uid != os.getuid() or int(pid) == os.getpid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, AttributeError):
            continue


class Pasted:
    """The pasted texts' files, by their text's digest: at most :data:`MAX_PASTED_FILES`, the
    least recently used evicted first; a file a job is reading is held (``pins``) until it ends."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files: OrderedDict[str, tuple[Path, int]] = OrderedDict()  # digest -> (folder, pins)
        self._guard = threading.Lock()

    def hold(self, text: Any, what: str, name: str, held: list[str]) -> str:
        """The private file holding ``text``, written once per distinct text; its digest is
        added to ``held`` (:meth:`release` it after the job)."""
        if not isinstance(text, str):
            raise RequestError(f"the {what} is given as its text (a JSON string), not {type(text).__name__}")
        if not text.strip():
            raise RequestError(f"the {what} is empty: paste or drop its text")
        if len(text) > MAX_PASTED:
            raise RequestError(
                f"the {what} holds {len(text):,} characters: the explorer takes at most {MAX_PASTED:,}",
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            )
        digest = hashlib.sha256(f"{name}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()[:24]
        path = self.folder / digest / name
        with self._guard:
            folder, pins = self._files.pop(digest, (self.folder / digest, 0))
            self._files[digest] = (folder, pins + 1)
            held.append(digest)
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8", errors="surrogateescape")
            self._evict()
        return str(path)

    def release(self, held: Sequence[str]) -> None:
        with self._guard:
            for digest in held:
                if digest in self._files:
                    folder, pins = self._files[digest]
                    self._files[digest] = (folder, pins - 1)
            self._evict()

    def _evict(self) -> None:
        while len(self._files) > MAX_PASTED_FILES:
            old = next((d for d, (_, pins) in self._files.items() if pins <= 0), None)
            if old is None:
                return  # every file is being read: evicted when its jobs end
            folder, _ = self._files.pop(old)
            shutil.rmtree(folder, ignore_errors=True)

    def count(self) -> int:
        with self._guard:
            return len(self._files)


class Explorer:
    """What the server knows: the job pools, the private folder for pasted texts, the static
    files, this run's token. :meth:`answer` turns one request into (status, JSON text); the HTTP
    handler only moves bytes and checks who asks.

    ``workers=False`` runs each command in this process, one at a time, without limits: for
    tests that watch the library's own functions, never for a server."""

    def __init__(
        self,
        run: Run,
        *,
        workers: bool = True,
        time_limits: tuple[float, float] = (QUICK_TIME_S, HEAVY_TIME_S),
        memory_budgets: tuple[int, int] = (QUICK_MEMORY, HEAVY_MEMORY),
    ) -> None:
        _remove_stale_folders()
        self.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        atexit.register(self.close)
        self.token = secrets.token_urlsafe(18)
        self.static = _static_files()
        self.models, self.devices = _allowed_names()
        self.pasted = Pasted(self.folder)
        self._run = run
        self._inline = threading.Lock()
        self.pools: dict[str, Pool] = {}
        if workers:
            target = f"{run.__module__}:{run.__qualname__}"
            for kind, size, time_s, memory, warm in (
                ("quick", QUICK_WORKERS, time_limits[0], memory_budgets[0], WARM_QUICK),
                ("heavy", HEAVY_WORKERS, time_limits[1], memory_budgets[1], WARM_HEAVY),
            ):
                self.pools[kind] = Pool(
                    target,
                    size=size,
                    time_limit_s=time_s,
                    memory_bytes=memory,
                    queue_wait_s=QUEUE_WAIT_S,
                    warm=warm,
                    eager=kind == "quick",  # the page's first answers; a search's workers when first asked
                )

    def close(self) -> None:
        """End the jobs and remove the folder (again harmless: it runs at exit too)."""
        for pool in self.pools.values():
            pool.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def words(
        self, command: str, params: Mapping[str, Any], texts: Mapping[str, Any], held: list[str] | None = None
    ) -> list[str]:
        """The command line for a request: ``[command, --flag=value ..., --json]``; the pasted
        files it names are held in ``held`` until the job ends."""
        held = [] if held is None else held
        if command not in FLAGS:
            raise RequestError(f"unknown command {command!r} (the explorer runs {', '.join(FLAGS)})")
        words = [command]
        if command == "devices" and texts.get("device_file") is not None:
            words.append(self.pasted.hold(texts["device_file"], "device file", "device.toml", held))
        elif command == "devices" and params.get("name"):
            words.append(self._device(str(params["name"])))
        given: dict[str, str] = {}
        for key, value in params.items():
            if key not in FLAGS[command]:
                raise RequestError(f"{command} takes no parameter {key!r} in the explorer")
            if key == "name" or value is None or value is False or value == "":
                continue
            if value is True or value == "true":  # a switch (``?unfused=true`` in a GET)
                words.append(f"--{key}")
                continue
            if not isinstance(value, str | int | float) or len(str(value)) > MAX_VALUE:
                raise RequestError(f"parameter {key!r}: expected a short value, got {str(value)[:40]!r}")
            text = str(value)
            if key == "model":
                text = self._model(text)
            elif key == "device":
                text = self._device(text)
            given[key] = text
            words.append(f"--{key}={text}")
        _caps(command, given)
        if texts.get("config") is not None and "model" in FLAGS[command]:
            path = self.pasted.hold(texts["config"], "config.json", "pasted/config.json", held)
            words.append(f"--model={path}")
        if texts.get("device_file") is not None and "device" in FLAGS[command]:
            words.append(
                f"--device={self.pasted.hold(texts['device_file'], 'device file', 'device.toml', held)}"
            )
        return [*words, "--json"]

    def _model(self, name: str) -> str:
        if name not in self.models:
            raise RequestError(
                f"model {name!r} is not a built-in model (the explorer takes a built-in name, "
                "or a config.json's text)"
            )
        if os.path.exists(name):  # the command line would read it as a path: never for a request
            raise RequestError(
                f"model {name!r} is also a file or folder where the explorer runs; start it elsewhere"
            )
        return name

    def _device(self, name: str) -> str:
        if name not in self.devices:
            raise RequestError(
                f"device {name!r} is not in the catalog (the explorer takes a catalog name, "
                "or a device file's text)"
            )
        if os.path.exists(name):  # the command line would read it as a device file: never for a request
            raise RequestError(f"device {name!r} is also a file where the explorer runs; start it elsewhere")
        return name

    def run(self, words: Sequence[str], gone: Callable[[], bool] = lambda: False) -> Outcome:
        """``attnroof WORDS`` as a job: in a worker of the command's pool, or here (``workers=False``)."""
        if not self.pools:
            from attnroof.explore.worker import one_job

            with self._inline:  # a command writes to the process's own sys.stdout
                return Outcome(*one_job(self._run, words))
        return self.pools["heavy" if words[0] in HEAVY else "quick"].run(words, gone)

    def answer(
        self,
        command: str,
        params: Mapping[str, Any],
        texts: Mapping[str, Any],
        gone: Callable[[], bool] = lambda: False,
    ) -> tuple[int, str] | None:
        """(HTTP status, body): the command's JSON as it printed it, or ``{"error": line}``;
        None when the client left before its answer."""
        held: list[str] = []
        try:
            try:
                words = self.words(command, params, texts, held)
            except RequestError as e:
                return e.status, _error(str(e))
            outcome = self.run(words, gone)
        finally:
            self.pasted.release(held)
        if outcome.ended is not None:
            return self._unfinished(command, outcome.ended)
        if outcome.status == 0:
            return HTTPStatus.OK, outcome.out
        line = next((x for x in outcome.err.splitlines() if x.strip()), "attnroof: error")
        line = re.sub(
            re.escape(str(self.folder)) + r"/[0-9a-f]{24}/(?:pasted/)?", "", line
        )  # as the user gave it
        line = line.replace(str(self.folder), "the explorer's folder")
        code = HTTPStatus.BAD_REQUEST if outcome.status == 2 else HTTPStatus.INTERNAL_SERVER_ERROR
        return code, _error(line)

    def _unfinished(self, command: str, ended: str) -> tuple[int, str] | None:
        pool = self.pools["heavy" if command in HEAVY else "quick"]
        more = f"ask for less, or run attnroof {command} on the command line"
        if ended == "gone":
            return None
        if ended == "time":
            line = f"{command} ran past the explorer's limit of {pool.time_limit_s:g} s a job: {more}"
            return HTTPStatus.BAD_REQUEST, _error(line)
        if ended == "memory":
            line = f"{command} needed more than the explorer's {_bytes(pool.memory_bytes)} a job: {more}"
            return HTTPStatus.BAD_REQUEST, _error(line)
        if ended == "busy":
            line = f"the explorer is busy: {pool.size} jobs like {command} are running; try again"
            return HTTPStatus.SERVICE_UNAVAILABLE, _error(line)
        if ended == "closed":
            return HTTPStatus.SERVICE_UNAVAILABLE, _error("the explorer is stopping")
        return HTTPStatus.INTERNAL_SERVER_ERROR, _error(f"{command}'s job ended before it answered")


def _no_constant(name: str) -> Any:
    """JSON has no NaN or Infinity (Python's reader takes them): a body that says one is refused."""
    raise ValueError(f"{name} is not a JSON number")


def _bytes(n: int) -> str:
    """``n`` bytes in binary units: ``1 GiB``, ``150 MiB``."""
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _error(line: str) -> str:
    return json.dumps({"error": line}, ensure_ascii=False) + "\n"


NO_TOKEN_PAGE = """<!doctype html><meta charset="utf-8"><title>attnroof explore</title>
<p>This page needs the address that <code>attnroof explore</code> printed when it started:
it ends in <code>?token=…</code>, which keeps other pages and users out.</p>
"""


class Handler(listen.ParkedRequestHandler, BaseHTTPRequestHandler):
    """GET ``/?token=T`` and ``/static/NAME``: the page; GET ``/api/COMMAND?flag=value...`` or
    POST it with a JSON body ``{"params": {...}, "config": TEXT, "device_file": TEXT}``, with the
    token in ``X-Attnroof-Token`` (or ``token=`` in the query): the command's JSON."""

    explorer: Explorer
    hosts: frozenset[str]  # the Host values that name this server
    origins: frozenset[str]
    server_version = "attnroof-explore"
    default_request_version = "HTTP/1.0"  # a malformed request line is answered with a status line too
    timeout = listen.SEND_S

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the terminal shows the URL
        pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (a malformed request line, a header too long, an
        unknown method) as one line of JSON with a 4xx status."""
        allow = code == HTTPStatus.NOT_IMPLEMENTED
        if allow:
            code, message = (
                HTTPStatus.METHOD_NOT_ALLOWED,
                f"method {self.command!r} is not served (GET, POST)",
            )
        elif code >= 500:  # 505: an HTTP version it does not speak is the client's to fix
            code = HTTPStatus.BAD_REQUEST
        self.close_connection = True
        body = _error(message or HTTPStatus(code).phrase).encode()
        self.send_response(code, message)
        if allow:
            self.send_header("Allow", "GET, POST")
        self._headers(len(body), "application/json")
        if self.command != "HEAD":
            self.wfile.write(body)

    def _headers(self, length: int, kind: str) -> None:
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", "frame-ancestors 'none'")
        self.end_headers()

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self._headers(len(body), kind)
        self.wfile.write(body)

    def _json(self, status: int, text: str) -> None:
        self._send(status, text.encode("utf-8", "surrogateescape"), "application/json")

    def _refuse(self, status: int, line: str) -> None:
        self._json(status, _error(line))

    def _foreign_host(self) -> bool:
        """A request must name this server in its Host (``127.0.0.1:PORT``, ``localhost:PORT``,
        the address it listens on): a page elsewhere whose name resolves here (DNS rebinding) is
        refused, whatever the address."""
        host = self.headers.get("Host", "")
        if host.lower() in self.hosts:
            return False
        self._refuse(HTTPStatus.BAD_REQUEST, f"host {host!r} is not this server's")
        return True

    def _token(self, query: Mapping[str, str]) -> bool:
        given = self.headers.get(TOKEN_HEADER) or query.get("token", "")
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.explorer.token.encode())

    def _foreign_caller(self, query: Mapping[str, str]) -> bool:
        """An API request from a page elsewhere, or without this run's token, is refused (403)."""
        origin = self.headers.get("Origin")
        site = self.headers.get("Sec-Fetch-Site")
        if origin is not None and origin.lower() not in self.origins:
            self._refuse(HTTPStatus.FORBIDDEN, f"origin {origin!r} is not this server's page")
        elif site is not None and site not in ("same-origin", "none"):
            self._refuse(
                HTTPStatus.FORBIDDEN, f"a {site} request (Sec-Fetch-Site) is not this server's page's"
            )
        elif not self._token(query):
            self._refuse(
                HTTPStatus.FORBIDDEN,
                f"no valid token: send the one in the URL attnroof explore printed ({TOKEN_HEADER} or ?token=)",
            )
        else:
            return False
        return True

    def do_GET(self) -> None:
        self.server.done_reading(self.connection)  # type: ignore[attr-defined]
        if self._foreign_host():
            return
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        if url.path in ("/", "/index.html"):
            if self._token(query):
                self._send(HTTPStatus.OK, self.explorer.static["index.html"], "text/html")
            else:
                self._send(HTTPStatus.FORBIDDEN, NO_TOKEN_PAGE.encode(), "text/html")
        elif url.path.startswith("/static/") and url.path[len("/static/") :] in self.explorer.static:
            name = url.path[len("/static/") :]
            self._send(HTTPStatus.OK, self.explorer.static[name], TYPES[Path(name).suffix])
        elif url.path.startswith("/api/"):
            if self._foreign_caller(query):
                return
            query.pop("token", None)
            self._answer(url.path[len("/api/") :], query, {})
        else:
            self._refuse(HTTPStatus.NOT_FOUND, f"no such page {url.path!r}")

    def do_POST(self) -> None:
        body = self._body()
        self.server.done_reading(self.connection)  # type: ignore[attr-defined]
        if self._foreign_host():
            return
        url = urlsplit(self.path)
        if not url.path.startswith("/api/"):
            self._refuse(HTTPStatus.NOT_FOUND, f"no such page {url.path!r}")
            return
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        if self._foreign_caller(query):
            return
        kind = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            self._refuse(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                f"a POST's body is application/json, not {kind or 'untyped'!r}",
            )
            return
        if isinstance(body, RequestError):
            self._refuse(body.status, str(body))
            return
        try:
            data = json.loads(body or b"{}", parse_constant=_no_constant)
        except RecursionError:
            self._refuse(HTTPStatus.BAD_REQUEST, "the request's body nests deeper than JSON's reader goes")
            return
        except (ValueError, UnicodeDecodeError) as e:
            self._refuse(HTTPStatus.BAD_REQUEST, f"the request's body is not JSON: {e}")
            return
        if not isinstance(data, dict) or not isinstance(data.get("params", {}), dict):
            self._refuse(HTTPStatus.BAD_REQUEST, 'expected {"params": {...}} as the body')
            return
        self._answer(url.path[len("/api/") :], data.get("params", {}), data)

    def _body(self) -> bytes | RequestError:
        """The body as sent (read whole before any answer, so that the client hears it), or why not."""
        if self.headers.get("Transfer-Encoding"):
            return RequestError("send the body with a Content-Length", HTTPStatus.LENGTH_REQUIRED)
        raw = self.headers.get("Content-Length")
        try:
            size = int(raw) if raw is not None else 0
        except ValueError:
            return RequestError(f"Content-Length {raw!r} is not a number of bytes")
        if not 0 <= size <= MAX_BODY:
            self.close_connection = True
            return RequestError(
                f"a request's body holds at most {MAX_BODY:,} bytes, not {size:,}",
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            )
        body = self.rfile.read(size)
        if len(body) < size:
            return RequestError(f"the body ended after {len(body):,} of its {size:,} bytes")
        return body

    def _answer(self, command: str, params: Mapping[str, Any], texts: Mapping[str, Any]) -> None:
        try:
            result = self.explorer.answer(command, params, texts, listen.peer_gone(self.connection))
        except Exception as e:  # a bug: one line to the client, never a traceback on the terminal
            result = HTTPStatus.INTERNAL_SERVER_ERROR, _error(f"internal error: {type(e).__name__}: {e}")
        if result is None:  # the client left: nobody to answer
            self.close_connection = True
            return
        self._json(*result)


def _addresses(host: str, port: int) -> list[tuple[int, str]]:
    """(family, address) for each address ``host`` names; ``ListenError`` when none."""
    if host == "":
        return [(socket.AF_INET, "")]
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise ListenError(f"cannot listen on {host!r}: {getattr(e, 'strerror', None) or e}") from None
    return [(family, str(sockaddr[0])) for family, _, _, _, sockaddr in found]


def _loopback(address: str) -> bool:
    try:
        return address != "" and ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _names(host: str, address: str, port: int, remote: bool) -> frozenset[str]:
    """The Host values that name this server: the loopback names, the host and address it was
    given, and, listening beyond this machine, the machine's own names and addresses."""
    names = {"127.0.0.1", "localhost", "::1", host, address}
    if remote:
        with contextlib.suppress(OSError):
            names |= {socket.gethostname(), socket.getfqdn()}
            names |= set(socket.gethostbyname_ex(socket.gethostname())[2])
    out = set()
    for name in names - {"", "0.0.0.0", "::"}:
        shown = f"[{name}]" if ":" in name else name
        out |= {f"{shown}:{port}".lower()} | ({shown.lower()} if port == 80 else set())
    return frozenset(out)


def make_server(
    run: Run,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    allow_remote: bool = False,
    **options: Any,
) -> tuple[listen.BoundedServer, Explorer]:
    """A server on ``host:port`` (port 0: a free one) over ``run``; not yet serving. ``host``
    must be this machine's loopback unless ``allow_remote`` (``""``: every interface). The
    caller serves it (``serve_forever``) and closes both (``server_close``, ``Explorer.close``).
    ``ListenError`` for an address refused or not found, ``OSError`` for one that cannot be bound;
    either way no folder is left. ``options`` go to :class:`Explorer` (its workers and limits)."""
    family, address = _addresses(host, port)[0]
    remote = not _loopback(address)
    if remote and not allow_remote:
        where = "every interface" if address in ("", "0.0.0.0", "::") else f"{address}, beyond this machine"
        raise ListenError(f"--host {host!r} listens on {where}: give --allow-remote to do that")
    server = listen.BoundedServer((address, port), None, family)  # bound first: a failure leaves nothing
    try:
        explorer = Explorer(run, **options)
    except BaseException:
        server.server_close()
        raise
    bound_port = server.server_address[1]
    hosts = _names(host, address, bound_port, remote)
    server.RequestHandlerClass = type(
        "ExplorerHandler",
        (Handler,),
        {"explorer": explorer, "hosts": hosts, "origins": frozenset(f"http://{h}" for h in hosts)},
    )
    server.remote = remote  # type: ignore[attr-defined]
    return server, explorer


def url_of(server: listen.BoundedServer) -> str:
    """The server's base address, ``http://127.0.0.1:PORT/`` (the loopback one for a server on
    every interface)."""
    host, port = server.server_address[:2]
    name = host.decode() if isinstance(host, bytes) else str(host)
    if name in ("", "0.0.0.0"):
        name = "127.0.0.1"
    elif name == "::":
        name = "::1"
    return f"http://{f'[{name}]' if ':' in name else name}:{port}/"


def page_url(server: listen.BoundedServer, explorer: Explorer) -> str:
    """The page's address with this run's token: what the command prints."""
    return f"{url_of(server)}?token={explorer.token}"
