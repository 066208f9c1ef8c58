"""explore: a local web page over the library (pick a model, a device, a plan and a load; see
the roofline move)."""

from __future__ import annotations

import argparse
import sys

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
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    p.add_argument("--port", type=_port, default=0, help="port (default 0: a free one, printed)")
    p.add_argument("--open", action="store_true", help="open the page in the web browser")
    p.add_argument(
        "--stop-after",
        type=positive_int,
        metavar="REQUESTS",
        help=argparse.SUPPRESS,  # tests: serve this many requests, then stop
    )


def _explore(args: argparse.Namespace) -> int:
    from attnroof.commands._run import run
    from attnroof.errors import InputError
    from attnroof.explore.server import make_server, url_of

    try:
        server, explorer = make_server(run, args.host, args.port)
    except OSError as e:
        raise InputError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    require(bool(explorer.static), "the explorer's page is missing from the package")
    url = url_of(server)
    print(f"attnroof explore: {url} (Ctrl-C stops it)", flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(url)
    try:
        if args.stop_after:
            server.daemon_threads = False  # server_close waits for the last answer
            for _ in range(args.stop_after):
                server.handle_request()
        else:
            server.serve_forever()
    except KeyboardInterrupt:
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
