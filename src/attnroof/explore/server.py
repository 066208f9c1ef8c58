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
form or ``<img>`` can send). What a request asks for becomes a command line in
:mod:`.explorer`, within the caps of :mod:`.caps`, and runs as a job in a worker process
(:mod:`.jobs`) with a time limit and a memory budget; the HTTP side is bounded in :mod:`.listen`.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import socket
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from attnroof.explore import listen
from attnroof.explore.caps import MAX_BODY, RequestError, Run
from attnroof.explore.explorer import TYPES, Explorer, error_json

TOKEN_HEADER = "X-Attnroof-Token"


class ListenError(ValueError):
    """An address the explorer will not listen on: one line."""


def _no_constant(name: str) -> Any:
    """JSON has no NaN or Infinity (Python's reader takes them): a body that says one is refused."""
    raise ValueError(f"{name} is not a JSON number")


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
        body = error_json(message or HTTPStatus(code).phrase).encode()
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
        self._json(status, error_json(line))

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
            result = HTTPStatus.INTERNAL_SERVER_ERROR, error_json(f"internal error: {type(e).__name__}: {e}")
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
