"""Every writer of output files, and every text output: a file that is not attnroof's own output
(or a symbolic link to one) is never replaced without --force — charts and reports included — and
an attnroof file is; the hidden temp and lock siblings fit every name a user may legally give
(up to 255 bytes); control characters from a device file, a model config, a results file or a
flag are shown escaped in every line, and JSON stays JSON. Each case was a user's file replaced,
a legal name refused or a terminal escape printed raw once (issue 32). Detailed tests:
tests/test_files_safety.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from conftest import run_cli
from hostile import Case

NOTES = "my notes: not a chart\n"
PNG = b"\x89PNG\r\n\x1a\n"
FORCE = ("not an attnroof file", "--force")

EVIL = "a\nb\x1b[31mRED"
"""A device name with a newline and a terminal escape (red): as issue 32 found it."""
EVIL_SHOWN = "a\\nb\\x1b[31mRED"
"""How a line of text shows it: escaped, on one line."""
EVIL_DEVICE = (
    'name = "a\\nb\\u001b[31mRED"\nbandwidth_bytes_per_s = 1e12\ncapacity_bytes = 8e10\n'
    "[peak_flops_per_s]\nbf16 = 1e14\n"
)
C1_DEVICE = 'name = "x\\u009b31mY"\nbandwidth_bytes_per_s = 1e12\n[peak_flops_per_s]\nbf16 = 1e14\n'
"""A C1 control (CSI, U+009B): JSON leaves it raw with ensure_ascii=False, so the filter writes it
``\\u009b``, which a JSON reader reads back as the character."""


def _linked(name: str, target: str) -> Callable[[Path], None]:
    """``name`` → ``target`` (both in the case's folder)."""

    def setup(folder: Path) -> None:
        (folder / name).symlink_to(folder / target)

    return setup


def _made_by(*argv: str, link: tuple[str, str] | None = None) -> Callable[[Path], None]:
    """An earlier attnroof run's output in the folder (``{dir}`` in ``argv``), and a link to it."""

    def setup(folder: Path) -> None:
        res = run_cli(*(a.replace("{dir}", str(folder)) for a in argv))
        assert res.returncode == 0, res
        if link is not None:
            _linked(*link)(folder)

    return setup


def _unchanged(name: str, content: str | bytes, link: str | None = None) -> Callable[[Any, Path], None]:
    def check(result: Any, folder: Path) -> None:
        data = (folder / name).read_bytes()
        assert data == (content.encode() if isinstance(content, str) else content), data[:80]
        if link is not None:
            assert (folder / link).is_symlink()
        assert [p for p in os.listdir(folder) if p.startswith(".")] == []  # no temp or lock left

    return check


def _written(name: str, start: bytes, link: str | None = None) -> Callable[[Any, Path], None]:
    def check(result: Any, folder: Path) -> None:
        assert (folder / name).read_bytes().lstrip().startswith(start), (folder / name).read_bytes()[:80]
        if link is not None:
            assert (folder / link).is_symlink()
        assert [p for p in os.listdir(folder) if p.startswith(".")] == []

    return check


def _escaped(*shown: str) -> Callable[[Any, Path], None]:
    """No raw control character but the newline in the output; each of ``shown`` in it."""

    def check(result: Any, folder: Path) -> None:
        text = result.stdout + result.stderr
        raw = sorted({ch for ch in text if (ord(ch) < 32 and ch != "\n") or 0x7F <= ord(ch) <= 0x9F})
        assert raw == [], (raw, text[:400])
        for s in shown:
            assert s in result.stdout, (s, result.stdout[:400])
        assert not any(line.startswith("b\\x1b") for line in text.splitlines()), text[:400]

    return check


def _json_device(name: str) -> Callable[[Any, Path], None]:
    def check(result: Any, folder: Path) -> None:
        assert json.loads(result.stdout)["device"] == name, result.stdout[:400]
        assert not any(0x7F <= ord(ch) <= 0x9F or ch == "\x1b" for ch in result.stdout)

    return check


def _page_escaped(name: str) -> Callable[[Any, Path], None]:
    def check(result: Any, folder: Path) -> None:
        data = (folder / name).read_text(encoding="utf-8")
        assert "\x1b" not in data, data[:200]
        if name.endswith(".svg"):  # its texts are drawn as paths; the title stays in a comment
            assert "\\x1b[31mRED" in data
            ElementTree.fromstring(data.encode())  # XML has no ESC: a raw one made it unreadable
        else:
            assert EVIL_SHOWN in data

    return check


def _long(size: int, suffix: str, char: str = "a") -> str:
    """A file name of exactly ``size`` bytes ending in ``suffix``."""
    stem = size - len(suffix.encode())
    body = char * (stem // len(char.encode()))
    body += "a" * (stem - len(body.encode()))
    assert len((body + suffix).encode()) == size
    return body + suffix


def _one_record(name: str) -> Callable[[Any, Path], None]:
    def check(result: Any, folder: Path) -> None:
        lines = (folder / name).read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["kind"] == "linear", lines
        assert [p for p in os.listdir(folder) if p.startswith(".")] == []  # the lock let go, removed

    return check


def _lock_link_kept(result: Any, folder: Path) -> None:
    """A lock file that is a link is neither truncated through nor removed; nothing is written."""
    assert (folder / "notes.txt").read_text() == NOTES
    assert (folder / ".r.jsonl.lock").is_symlink() and not (folder / "r.jsonl").exists()


def _one_line_wrote(name: str) -> Callable[[Any, Path], None]:
    """The "wrote" line names the file on one line, its control characters escaped; the file is
    written under its real name."""

    def check(result: Any, folder: Path) -> None:
        assert result.stdout.splitlines() == [f"wrote {folder}/{name}"], result.stdout
        assert any(p.endswith(".svg") and "\n" in p for p in os.listdir(folder))

    return check


CHART = ("plot", "-o")
REPORT = ("report", "-o")
SERVE = ("serve-sim", "--model", "llama-3.1-8b", "--num-requests", "20", "--chart")
LINEAR = ("measure", "linear", "-n", "1", "-k", "8", "-m", "8", "--cpu", "-o")
CPU = {"ATTNROOF_CPU_THREADS": "1"}
OLD_REPORT = (
    '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
    "<title>attnroof report: H100 SXM bf16</title>\n</head>\n<body>an older report</body>\n</html>\n"
)
"""A report from before the generator tag: known by its title."""

CASES: list[Case] = [
    # ---------------------------------------------------------------- a symlink to a user's file
    Case("plot -o a symlink to a user's notes", (*CHART, "{dir}/fig.png"), files={"notes.txt": NOTES},
         setup=_linked("fig.png", "notes.txt"), error=("fig.png", "a link to", "notes.txt", *FORCE),
         check=_unchanged("notes.txt", NOTES, link="fig.png")),
    Case("plot -o a symlink to a user's notes --force", (*CHART, "{dir}/fig.png", "--force"),
         files={"notes.txt": NOTES}, setup=_linked("fig.png", "notes.txt"), error=None,
         check=_written("notes.txt", PNG, link="fig.png")),
    Case("plot -o a symlink to its own chart", (*CHART, "{dir}/fig.png"),
         setup=_made_by(*CHART, "{dir}/own.png", link=("fig.png", "own.png")), error=None,
         check=_written("own.png", PNG, link="fig.png")),
    Case("report -o a symlink to a user's notes", (*REPORT, "{dir}/r.html"), files={"notes.txt": NOTES},
         setup=_linked("r.html", "notes.txt"), error=("r.html", "notes.txt", *FORCE),
         check=_unchanged("notes.txt", NOTES, link="r.html")),
    Case("calibrate -o a symlink to a user's json",
         ("calibrate", "{dir}/m.jsonl", "--device", "h100", "-o", "{dir}/cal.json"),
         files={"m.jsonl": Path(__file__).parent.parent.joinpath("data", "cpu-quick-suite.jsonl").read_text(),
                "mine.json": '{"mine": true}\n'},
         setup=_linked("cal.json", "mine.json"), error=("cal.json", "mine.json", *FORCE),
         check=_unchanged("mine.json", '{"mine": true}\n', link="cal.json")),
    # ---------------------------------------------------------------- a user's file, not a link
    Case("plot -o a user's svg", (*CHART, "{dir}/c.svg"), files={"c.svg": "<svg>my drawing</svg>"},
         error=("c.svg", *FORCE), check=_unchanged("c.svg", "<svg>my drawing</svg>")),
    Case("plot -o a user's pdf", (*CHART, "{dir}/c.pdf"), files={"c.pdf": b"%PDF-1.4 mine"},
         error=("c.pdf", *FORCE), check=_unchanged("c.pdf", b"%PDF-1.4 mine")),
    Case("plot -o an empty file", (*CHART, "{dir}/c.png"), files={"c.png": b""}, error=None,
         check=_written("c.png", PNG)),
    *(
        Case(f"plot -o its own {fmt}", (*CHART, f"{{dir}}/c.{fmt}"), setup=_made_by(*CHART, f"{{dir}}/c.{fmt}"),
             error=None, check=_written(f"c.{fmt}", start))
        for fmt, start in (("png", PNG), ("svg", b"<?xml"), ("pdf", b"%PDF"))
    ),
    Case("report -o a user's page", (*REPORT, "{dir}/report.html"), files={"report.html": "<html>mine</html>"},
         error=("report.html", *FORCE), check=_unchanged("report.html", "<html>mine</html>")),
    Case("report -o a user's page --force", (*REPORT, "{dir}/report.html", "--force"),
         files={"report.html": "<html>mine</html>"}, error=None,
         check=_written("report.html", b'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                                       b'<meta name="generator" content="attnroof ')),
    Case("report -o its own report", (*REPORT, "{dir}/r.html"), setup=_made_by(*REPORT, "{dir}/r.html"),
         error=None, check=_written("r.html", b"<!DOCTYPE html>")),
    Case("report -o an older attnroof report", (*REPORT, "{dir}/r.html"), files={"r.html": OLD_REPORT},
         error=None, check=_written("r.html", b"<!DOCTYPE html>")),
    Case("serve-sim --chart onto a user's png", (*SERVE, "{dir}/x.png"), files={"x.png": b"mine"},
         error=("x.png", *FORCE, "--chart"), check=_unchanged("x.png", b"mine")),
    Case("serve-sim --chart onto a user's png --force", (*SERVE, "{dir}/x.png", "--force"),
         files={"x.png": b"mine"}, error=None, check=_written("x.png", PNG)),
    Case("measure ceilings -o a symlink to a user's json",
         ("measure", "ceilings", "--quick", "--cpu", "-o", "{dir}/c.json"), files={"mine.json": '{"mine": 1}'},
         setup=_linked("c.json", "mine.json"), error=("c.json", "mine.json", *FORCE), env=CPU,
         check=_unchanged("mine.json", '{"mine": 1}', link="c.json"), needs_torch=True),
    Case("output path with escapes: wrote", (*CHART, "{dir}/a\nb\x1b.svg"), error=None,
         check=_one_line_wrote("a\\nb\\x1b.svg")),
    # ---------------------------------------------------------------- names up to 255 bytes
    *(
        Case(f"plot -o a {size}-byte name", (*CHART, f"{{dir}}/{_long(size, '.svg')}"), error=None,
             check=_written(_long(size, ".svg"), b"<?xml"))
        for size in (242, 249, 254, 255)
    ),
    Case("plot -o a 255-byte name of 2-byte characters", (*CHART, "{dir}/" + _long(255, ".svg", "é")),
         error=None, check=_written(_long(255, ".svg", "é"), b"<?xml")),
    Case("report -o a 255-byte name", (*REPORT, "{dir}/" + _long(255, ".html")), error=None,
         check=_written(_long(255, ".html"), b"<!DOCTYPE html>")),
    Case("report -o a 255-byte name twice", (*REPORT, "{dir}/" + _long(255, ".html")),
         setup=_made_by(*REPORT, "{dir}/" + _long(255, ".html")), error=None,
         check=_written(_long(255, ".html"), b"<!DOCTYPE html>")),
    Case("measure linear -o a 255-byte name (its lock beside it)", (*LINEAR, "{dir}/" + _long(255, ".jsonl")),
         env=CPU, error=None, check=_one_record(_long(255, ".jsonl")), needs_torch=True),
    Case("measure linear: the lock file a symlink to a user's notes", (*LINEAR, "{dir}/r.jsonl"),
         files={"notes.txt": NOTES}, setup=_linked(".r.jsonl.lock", "notes.txt"), env=CPU,
         error=("r.jsonl", ".r.jsonl.lock", "symbolic link"), check=_lock_link_kept, needs_torch=True),
    # ---------------------------------------------------------------- control characters
    *(
        Case(f"device name with escapes: {argv[0]}", (*argv, "--device", "{dir}/dev.toml"),
             files={"dev.toml": EVIL_DEVICE}, error=None, check=_escaped(EVIL_SHOWN))
        for argv in (
            ("sheet",),
            ("attention", "-s", "4096", "-d", "128"),
            ("linear", "-n", "8", "-k", "64", "-m", "64"),
            ("footprint", "-s", "4096"),
            ("model", "--model", "llama-3.1-8b", "--context", "4096"),
            ("serve-sim", "--model", "llama-3.1-8b", "--num-requests", "20"),
        )
    ),
    Case("device name with escapes: devices FILE", ("devices", "{dir}/dev.toml"),
         files={"dev.toml": EVIL_DEVICE}, error=None, check=_escaped(EVIL_SHOWN)),
    Case("device name with escapes: --json", ("attention", "-s", "4096", "-d", "128", "--json", "--device",
         "{dir}/dev.toml"), files={"dev.toml": EVIL_DEVICE}, error=None, check=_json_device(EVIL)),
    Case("device name with a C1 control: --json", ("attention", "-s", "4096", "-d", "128", "--json",
         "--device", "{dir}/dev.toml"), files={"dev.toml": C1_DEVICE}, error=None,
         check=_json_device("x\x9b31mY")),
    Case("device name with a C1 control: text", ("attention", "-s", "4096", "-d", "128", "--device",
         "{dir}/dev.toml"), files={"dev.toml": C1_DEVICE}, error=None, check=_escaped("x\\u009b31mY (bf16)")),
    Case("device name with escapes: report html", (*REPORT, "{dir}/r.html", "--device", "{dir}/dev.toml"),
         files={"dev.toml": EVIL_DEVICE}, error=None, check=_page_escaped("r.html")),
    Case("device name with escapes: svg chart", (*CHART, "{dir}/c.svg", "--device", "{dir}/dev.toml"),
         files={"dev.toml": EVIL_DEVICE}, error=None, check=_page_escaped("c.svg")),
    Case("model name with escapes", ("model", "--model", "{dir}/evil.json", "--context", "4096", "--device",
         "h100"), files={"evil.json": json.dumps(
             {**json.loads(Path(__file__).parent.parent.joinpath("data", "configs", "llama-3.1-8b.json")
                           .read_text()), "_name_or_path": "evil\n\x1b[2J\x9b31mX"})},
         error=None, check=_escaped("evil\\n\\x1b[2J\\u009b31mX: 32 layers")),
    Case("results device with escapes: calibrate", ("calibrate", "{dir}/m.jsonl", "--device", "h100"),
         files={"m.jsonl": "".join(
             json.dumps({**json.loads(line), "device": "cpu\n\x1b[31mX"}) + "\n"
             for line in Path(__file__).parent.parent.joinpath("data", "cpu-quick-suite.jsonl")
             .read_text().splitlines())},
         error=None, check=_escaped("(cpu\\n\\x1b[31mX)")),
    Case("flag with escapes in an error", ("attention", "-s", "4096", "-d", "128", "--device", "\x1b[31mRED"),
         error=("\\x1b[31mRED",), check=_escaped()),
]  # fmt: skip
