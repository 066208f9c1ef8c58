"""The explorer's HTTP server: bounded in threads, connections and time, so that ordinary load
(a browser's parallel requests, 200 clients at once) is answered and idle or slow sockets hold
nothing that others need.

- A connection is accepted at once (a listen backlog of :data:`BACKLOG`) and *parked* until it
  has sent its request's head whole: an idle or slow connection takes a file descriptor, never a
  thread. One silent for :data:`IDLE_S` is closed, one whose head takes longer than
  :data:`READ_S` from its first byte too; past :data:`MAX_PARKED` the longest-parked goes first.
- A request whose head has arrived is served by one of :data:`THREADS` threads; its body is due
  within :data:`READ_S` (a slow body is cut off there, however it paces its bytes), and each send
  of the answer waits at most :data:`SEND_S`.
- One request a connection (HTTP/1.0, as the standard library's handler speaks by default).
"""

from __future__ import annotations

import contextlib
import io
import queue
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from socketserver import StreamRequestHandler
from typing import Any

BACKLOG = 1024
"""Connections the kernel holds before they are accepted (the standard library's 5 reset 17 to 37
of 200 clients at once)."""
THREADS = 64
"""Requests read or answered at once; the rest wait parked (a browser opens 6 connections a host)."""
IDLE_S = 30.0
"""Seconds a connection may stay silent before its first byte (a browser's spare connections)."""
READ_S = 10.0
"""Seconds a request's head and body may take to arrive, from its first byte."""
SEND_S = 30.0
"""Seconds one send of an answer may wait on the client (the socket's timeout)."""
MAX_HEAD = 65_536 + 2
"""Bytes of a request's head read while parked: past them the handler answers 414 or 431."""
TICK_S = 0.25


def _max_parked() -> int:
    """Parked connections at most: a quarter of the file descriptors this process may open, at
    most 1,000 (the other descriptors are the threads', the jobs' and the library's)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, ValueError, OSError):
        soft = 1024
    if soft == getattr(sys.modules.get("resource"), "RLIM_INFINITY", -1) or soft <= 0:
        soft = 4096
    return max(16, min(1000, soft // 4))


MAX_PARKED = _max_parked()


class BoundedServer(ThreadingHTTPServer):
    """A :class:`ThreadingHTTPServer` whose threads, connections and waits are bounded (see the
    module). ``daemon_threads`` False: :meth:`server_close` waits for every accepted
    connection to be answered or timed out. ``idle_s`` and ``read_s`` may be set per server."""

    request_queue_size = BACKLOG
    daemon_threads = True
    idle_s = IDLE_S
    read_s = READ_S

    def __init__(self, address: tuple[Any, ...], handler: Any, family: int = socket.AF_INET) -> None:
        self.address_family = family
        super().__init__(address, handler)
        self._pending: list[tuple[socket.socket, Any]] = []
        self._parked: dict[socket.socket, _Parked] = {}  # insertion order: oldest first
        self._heads: dict[socket.socket, bytes] = {}  # what the parker read, for the handler
        self._reading: dict[socket.socket, float] = {}
        self._ready: queue.Queue[tuple[socket.socket, Any] | None] = queue.Queue()
        self._guard = threading.Lock()
        self._done = threading.Condition(self._guard)
        self._open = 0
        self._stopping = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._workers = [threading.Thread(target=self._parker, daemon=True, name="explore-parker")]
        self._workers += [
            threading.Thread(target=self._serve, daemon=True, name=f"explore-{i}") for i in range(THREADS)
        ]
        for t in self._workers:
            t.start()

    # ---------------------------------------------------------------- the accepting loop's side

    def process_request(self, request: Any, client_address: Any) -> None:
        """Park the new connection (never blocks the loop that accepts)."""
        with self._guard:
            self._open += 1
            self._pending.append((request, client_address))
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # ---------------------------------------------------------------- parked connections

    def _parker(self) -> None:
        """Park connections until their request's head has arrived whole, without a thread each:
        close those silent past ``idle_s``, those whose head takes longer than ``read_s``, and
        the longest-parked past :data:`MAX_PARKED`; cut off requests whose body is late."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._wake_r, selectors.EVENT_READ)
            while True:
                with self._guard:
                    pending, self._pending = self._pending, []
                    stopping = self._stopping
                now = time.monotonic()
                for sock, addr in pending:
                    self._parked[sock] = _Parked(addr, now + self.idle_s)
                    try:
                        sock.setblocking(False)
                        sel.register(sock, selectors.EVENT_READ)
                    except (ValueError, OSError):  # closed already
                        self._parked.pop(sock)
                        self._closed(sock)
                if stopping:
                    for sock in list(self._parked):
                        self._unpark(sel, sock)
                        self._closed(sock)
                    return
                while len(self._parked) > MAX_PARKED:
                    oldest = next(iter(self._parked))
                    self._unpark(sel, oldest)
                    self._closed(oldest)
                for key, _ in sel.select(self._next_wait(now)):
                    if key.fileobj is self._wake_r:
                        with contextlib.suppress(OSError):
                            while self._wake_r.recv(4096):
                                pass
                    else:
                        self._receive(sel, key.fileobj)  # type: ignore[arg-type]
                now = time.monotonic()
                for sock, parked in list(self._parked.items()):
                    if parked.deadline <= now:
                        self._unpark(sel, sock)
                        self._closed(sock)
                with self._guard:
                    late = [s for s, deadline in self._reading.items() if deadline <= now]
                    for s in late:
                        del self._reading[s]
                for sock in late:  # a slow body: its blocked read ends now
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

    def _receive(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        parked = self._parked[sock]
        try:
            data = sock.recv(MAX_HEAD)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client left
            self._unpark(sel, sock)
            self._closed(sock)
            return
        if not parked.head:  # its first bytes: the whole head is due within read_s
            parked.deadline = time.monotonic() + self.read_s
        parked.head += data
        if b"\r\n\r\n" in parked.head or b"\n\n" in parked.head or len(parked.head) >= MAX_HEAD:
            self._unpark(sel, sock)
            with self._guard:
                self._heads[sock] = bytes(parked.head)
            self._ready.put((sock, parked.addr))

    def take_head(self, sock: socket.socket) -> bytes:
        """What was read of the request on ``sock`` while it was parked (once)."""
        with self._guard:
            return self._heads.pop(sock, b"")

    def _next_wait(self, now: float) -> float:
        deadlines = [p.deadline for p in self._parked.values()]
        with self._guard:
            deadlines += list(self._reading.values())
        return max(0.0, min([TICK_S, *(d - now for d in deadlines)]))

    def _unpark(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        self._parked.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            sel.unregister(sock)

    def _closed(self, sock: socket.socket) -> None:
        with self._guard:
            self._heads.pop(sock, None)
        self.shutdown_request(sock)
        with self._done:
            self._open -= 1
            self._done.notify_all()

    # ---------------------------------------------------------------- serving threads

    def _serve(self) -> None:
        while True:
            item = self._ready.get()
            if item is None:
                return
            sock, addr = item
            with self._guard:
                self._reading[sock] = time.monotonic() + self.read_s
            try:
                sock.setblocking(True)
                self.finish_request(sock, addr)
            except Exception:
                self.handle_error(sock, addr)
            finally:
                self.done_reading(sock)
                self._closed(sock)

    def done_reading(self, sock: socket.socket) -> None:
        """The request on ``sock`` has been read whole: its read deadline no longer applies."""
        with self._guard:
            self._reading.pop(sock, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or was cut off is not news; anything else is one line."""
        kind, error = sys.exc_info()[:2]
        if kind is None or issubclass(kind, OSError):
            return
        print(f"attnroof explore: error answering a request: {kind.__name__}: {error}", file=sys.stderr)

    # ---------------------------------------------------------------- stopping

    def server_close(self, wait_s: float | None = None) -> None:
        """Stop accepting; unless ``daemon_threads``, first wait (at most ``wait_s``, default
        ``idle_s`` + ``read_s`` + ten minutes for a job) for every accepted connection to be done."""
        if not self.daemon_threads:
            limit = time.monotonic() + (wait_s if wait_s is not None else self.idle_s + self.read_s + 600.0)
            with self._done:
                while self._open > 0 and time.monotonic() < limit:
                    self._done.wait(TICK_S)
        with self._guard:
            self._stopping = True
        self._wake()
        for _ in range(THREADS):
            self._ready.put(None)
        self._workers[0].join(5)
        with contextlib.suppress(OSError):
            self._wake_r.close()
            self._wake_w.close()
        super().server_close()


class _Parked:
    """A parked connection: its address, when it is closed unless it has sent its head, and what
    it has sent."""

    __slots__ = ("addr", "deadline", "head")

    def __init__(self, addr: Any, deadline: float) -> None:
        self.addr, self.deadline, self.head = addr, deadline, bytearray()


class _Prefixed(io.RawIOBase):
    """A socket's input that starts with what the parker already read from it."""

    def __init__(self, prefix: bytes, sock: socket.socket) -> None:
        self._prefix, self._sock = memoryview(prefix), sock

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._prefix:
            n = min(len(b), len(self._prefix))
            b[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        return self._sock.recv_into(b)


class ParkedRequestHandler(StreamRequestHandler):
    """A request handler whose input starts with what :class:`BoundedServer` read while the
    connection was parked (put first among a handler's bases)."""

    def setup(self) -> None:
        super().setup()
        head = self.server.take_head(self.connection)  # type: ignore[attr-defined]
        if head:
            self.rfile = io.BufferedReader(_Prefixed(head, self.connection))


def peer_gone(sock: socket.socket) -> Callable[[], bool]:
    """Whether the client on ``sock`` has closed its end (what a job asks while it runs)."""

    def gone() -> bool:
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(sock, selectors.EVENT_READ)
                if not sel.select(0):
                    return False
            return sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    return gone
