"""The explorer's server: the page's static files from the package, and ``/api/COMMAND``, which
runs one attnroof command with ``--json`` through the command line's own path and answers its
output verbatim.

A request names a command and its parameters (flag names without the dashes); they become the
command's words, ``--flag=value`` each (so a value never becomes a flag of its own), and the
command's own parser checks them. No request names a file: a model is a built-in name or a
config.json's text, a device a catalog name or a device file's text; the texts are written to
the server's private folder and passed as that file, exactly as ``--model config.json`` and
``--device FILE.toml`` pass them on the command line. A bad request gets one line of JSON,
``{"error": "..."}``, and status 400.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

Run = Callable[[Sequence[str]], int]
"""Runs ``attnroof WORDS`` in this process (``attnroof.commands._run.run``): its exit status, its
output on ``sys.stdout``, a one-line error on ``sys.stderr``."""

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

MAX_BODY = 1_000_000
"""Bytes a request's body may hold: a model's config.json is a few kB, a device file less."""
MAX_VALUE = 200
"""Characters a parameter's value may hold (a name, a number, a list of sizes)."""
STATIC = "static"
TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".txt": "text/plain"}


class RequestError(Exception):
    """A request the explorer refuses: one line, status 400."""


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


class Explorer:
    """What the server knows: the command runner, the private folder for pasted texts, the
    static files. :meth:`answer` turns one request into (status, JSON text); the HTTP handler
    only moves bytes."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._lock = threading.Lock()  # a command writes to the process's sys.stdout
        self.folder = Path(tempfile.mkdtemp(prefix="attnroof-explore-"))
        self.static = _static_files()
        self.models, self.devices = _allowed_names()
        self._shown: dict[str, str] = {}  # a pasted text's private file -> the name errors show

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def _pasted(self, text: Any, what: str, name: str) -> str:
        """The private file holding ``text`` (a pasted config.json or device file), written
        once per distinct text."""
        if not isinstance(text, str) or not text.strip():
            raise RequestError(f"the {what} is empty: paste or drop its text")
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        path = self.folder / digest / name
        self._shown[str(path)] = Path(name).name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return str(path)

    def words(self, command: str, params: Mapping[str, Any], texts: Mapping[str, Any]) -> list[str]:
        """The command line for a request: ``[command, --flag=value ..., --json]``."""
        if command not in FLAGS:
            raise RequestError(f"unknown command {command!r} (the explorer runs {', '.join(FLAGS)})")
        words = [command]
        if command == "devices" and texts.get("device_file") is not None:
            words.append(self._pasted(texts["device_file"], "device file", "device.toml"))
        elif command == "devices" and params.get("name"):
            words.append(self._device(str(params["name"])))
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
            words.append(f"--{key}={text}")
        if texts.get("config") is not None and "model" in FLAGS[command]:
            words.append(f"--model={self._pasted(texts['config'], 'config.json', 'pasted/config.json')}")
        if texts.get("device_file") is not None and "device" in FLAGS[command]:
            words.append(f"--device={self._pasted(texts['device_file'], 'device file', 'device.toml')}")
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

    def run(self, words: Sequence[str]) -> tuple[int, str, str]:
        """``attnroof WORDS``: exit status, standard output, standard error (one command at a
        time: the output is the process's own)."""
        out, err = io.StringIO(), io.StringIO()
        with self._lock, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = self._run(words)
            except SystemExit as e:  # argparse's usage errors: one line on stderr, status 2
                status = e.code if isinstance(e.code, int) else 2
        return status, out.getvalue(), err.getvalue()

    def answer(self, command: str, params: Mapping[str, Any], texts: Mapping[str, Any]) -> tuple[int, str]:
        """(HTTP status, body): the command's JSON as it printed it, or ``{"error": line}``."""
        try:
            words = self.words(command, params, texts)
        except RequestError as e:
            return HTTPStatus.BAD_REQUEST, _error(str(e))
        status, out, err = self.run(words)
        if status == 0:
            return HTTPStatus.OK, out
        line = next((x for x in err.splitlines() if x.strip()), "attnroof: error")
        for path, shown in self._shown.items():
            line = line.replace(path, shown)
        line = line.replace(str(self.folder), "the explorer's folder")
        code = HTTPStatus.BAD_REQUEST if status == 2 else HTTPStatus.INTERNAL_SERVER_ERROR
        return code, _error(line)


def _error(line: str) -> str:
    return json.dumps({"error": line}, ensure_ascii=False) + "\n"


class Handler(BaseHTTPRequestHandler):
    """GET ``/`` and ``/static/NAME``: the page; GET ``/api/COMMAND?flag=value...`` or POST it
    with a JSON body ``{"params": {...}, "config": TEXT, "device_file": TEXT}``: the command's
    JSON."""

    explorer: Explorer
    server_version = "attnroof-explore"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the terminal shows the URL
        pass

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, text: str) -> None:
        self._send(status, text.encode(), "application/json")

    def _foreign_host(self) -> bool:
        """A request to a server on the loopback address must name it (``127.0.0.1:PORT`` or
        ``localhost:PORT``): a page elsewhere whose name resolves here (DNS rebinding) is refused."""
        host, port = self.server.server_address[:2]
        if host not in ("127.0.0.1", "::1"):
            return False
        names = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        if self.headers.get("Host", "") in names:
            return False
        self._json(
            HTTPStatus.BAD_REQUEST, _error(f"host {self.headers.get('Host', '')!r} is not this server's")
        )
        return True

    def do_GET(self) -> None:
        if self._foreign_host():
            return
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, self.explorer.static["index.html"], "text/html")
        elif url.path.startswith("/static/") and url.path[len("/static/") :] in self.explorer.static:
            name = url.path[len("/static/") :]
            self._send(HTTPStatus.OK, self.explorer.static[name], TYPES[Path(name).suffix])
        elif url.path.startswith("/api/"):
            params = dict(parse_qsl(url.query, keep_blank_values=True))
            self._json(*self.explorer.answer(url.path[len("/api/") :], params, {}))
        else:
            self._json(HTTPStatus.NOT_FOUND, _error(f"no such page {url.path!r}"))

    def do_POST(self) -> None:
        if self._foreign_host():
            return
        url = urlsplit(self.path)
        if not url.path.startswith("/api/"):
            self._json(HTTPStatus.NOT_FOUND, _error(f"no such page {url.path!r}"))
            return
        try:
            size = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            size = -1
        if not 0 <= size <= MAX_BODY:
            self._json(HTTPStatus.BAD_REQUEST, _error(f"a request's body holds at most {MAX_BODY:,} bytes"))
            return
        try:
            body = json.loads(self.rfile.read(size) or b"{}")
        except (ValueError, UnicodeDecodeError) as e:
            self._json(HTTPStatus.BAD_REQUEST, _error(f"the request's body is not JSON: {e}"))
            return
        if not isinstance(body, dict) or not isinstance(body.get("params", {}), dict):
            self._json(HTTPStatus.BAD_REQUEST, _error('expected {"params": {...}} as the body'))
            return
        self._json(*self.explorer.answer(url.path[len("/api/") :], body.get("params", {}), body))


def make_server(run: Run, host: str = "127.0.0.1", port: int = 0) -> tuple[ThreadingHTTPServer, Explorer]:
    """A server on ``host:port`` (port 0: a free one) over ``run``; not yet serving. The caller
    serves it (``serve_forever``) and closes both (``server_close``, ``Explorer.close``)."""
    explorer = Explorer(run)
    handler = type("ExplorerHandler", (Handler,), {"explorer": explorer})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server, explorer


def url_of(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    name = host.decode() if isinstance(host, bytes) else host
    return f"http://{name}:{port}/"
