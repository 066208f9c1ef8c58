"""explore: a local web page over the library (pick a model, a device, a plan and a load; see
the roofline move)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator

from attnroof.commands._common import Command, positive_int, require


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return value


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; another needs --allow-remote)",
    )
    p.add_argument("--port", type=_port, default=0, help="port (default 0: a free one, printed)")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --host be an address beyond this machine ('' or 0.0.0.0: every interface); anyone who "
        "can reach it and has the printed URL (its token) can use the explorer",
    )
    p.add_argument("--open", action="store_true", help="open the page in the web browser")
    p.add_argument(
        "--stop-after",
        type=positive_int,
        metavar="REQUESTS",
        help=argparse.SUPPRESS,  # tests: serve this many requests, then stop
    )


class _Stopped(Exception):
    """SIGTERM or SIGHUP: the server stops as on Ctrl-C (its folder removed, its jobs ended)."""


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    names = [s for s in ("SIGTERM", "SIGHUP") if hasattr(signal, s)]

    def stop(signum: int, frame: object) -> None:
        for name in names:  # once: a second signal does not cut the clean-up short
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        raise _Stopped(signal.Signals(signum).name)

    try:
        old = {name: signal.signal(getattr(signal, name), stop) for name in names}
    except ValueError:  # not the main thread (a test runs the command in one): nothing to catch here
        old = {}
    try:
        yield
    finally:
        for name, handler in old.items():
            signal.signal(getattr(signal, name), handler)


def _explore(args: argparse.Namespace) -> int:
    from attnroof.commands._run import run
    from attnroof.errors import InputError
    from attnroof.explore.server import ListenError, make_server, page_url

    with _stop_on_signals():
        try:
            server, explorer = make_server(run, args.host, args.port, allow_remote=args.allow_remote)
        except ListenError as e:
            raise InputError(str(e)) from None
        except OSError as e:
            raise InputError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
        try:
            require(bool(explorer.static), "the explorer's page is missing from the package")
            url = page_url(server, explorer)
            if getattr(server, "remote", False):
                where = server.server_address[0] or "every interface"
                print(
                    f"attnroof explore: warning: listening on {where} port {server.server_address[1]}, beyond "
                    "this machine: whoever can reach it with the token below can run the explorer's commands "
                    "(over plain HTTP)",
                    file=sys.stderr,
                    flush=True,
                )
            print(f"attnroof explore: {url} (Ctrl-C stops it)", flush=True)
            if args.open:
                import webbrowser

                webbrowser.open(url)
            if args.stop_after:
                server.daemon_threads = False  # server_close waits for the last answer
                for _ in range(args.stop_after):
                    server.handle_request()
            else:
                server.serve_forever()
        except (KeyboardInterrupt, _Stopped):
            print("attnroof explore: stopped", file=sys.stderr)
        finally:
            server.server_close()
            explorer.close()
    return 0


COMMANDS = (
    Command(
        "explore",
        _setup,
        _explore,
        description="Serve a page on this machine where a model, a device, a plan and a load are picked "
        "and the roofline, the time by operator, the memory and the attention chart follow. Every "
        "number on the page is the JSON of an attnroof command for the same inputs.",
    ),
)
