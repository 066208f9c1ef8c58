"""The errors attnroof raises. The CLI prints any of them as one line and exits with status 2."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any


class AttnroofError(Exception):
    """Base class: a bad value from the user, a file or the catalog.

    ``param`` names the library parameter the message is about (``peak_flops_per_s``,
    ``heads``), written as is in the message; the CLI swaps it for the flag the user typed
    (``--peak-flops``), so the library never has to know its command line."""

    def __init__(self, *args: object, param: str | None = None) -> None:
        super().__init__(*args)
        self.param = param


_QUOTED = re.compile(r"""(?<!\w)'(?:[^'\\]|\\.)*'(?!\w)|(?<!\w)"(?:[^"\\]|\\.)*"(?!\w)""")
"""A quoted value in a message, as ``repr`` writes one (``'two_devices.toml'``); an apostrophe
inside a word (``device's``) opens none."""


def with_flag(message: str, param: str, flag: str) -> str:
    """``message`` with its first mention of ``param`` replaced by ``flag``: a mention is
    ``param`` as a word of its own, outside any quoted value and not part of a longer name, a
    path or a file name (``two_devices.toml``, ``/tmp/device/x``, ``device_x``), so that only
    the library's word for the parameter becomes the user's flag.

    >>> with_flag("two_devices.toml: holds 2 devices; device takes a file of one", "device", "--device")
    'two_devices.toml: holds 2 devices; --device takes a file of one'
    >>> with_flag("'device.toml': device takes one", "device", "--device")
    "'device.toml': --device takes one"
    """
    word = re.compile(rf"(?<![\w./-]){re.escape(param)}(?![\w/-]|\.\w)")
    start = 0
    for quoted in [*_QUOTED.finditer(message), None]:
        end = len(message) if quoted is None else quoted.start()
        m = word.search(message, start, end)
        if m is not None:
            return message[: m.start()] + flag + message[m.end() :]
        if quoted is not None:
            start = quoted.end()
    return message


class InputError(AttnroofError, ValueError):
    """A size, dtype, flag or option that cannot be used."""


class DeviceError(AttnroofError):
    """A device that cannot be found, read or used."""


class UnknownDevice(DeviceError, LookupError):
    """No device of that name in the catalog."""


class DeviceFileError(DeviceError, ValueError):
    """A device file that is unreadable, malformed, or has implausible figures."""


class MissingPeak(DeviceError, LookupError):
    """The device has no peak FLOP/s figure for the dtype asked for."""


class MissingBoardPower(DeviceError, LookupError):
    """The device has no board power figure, and something (energy) needs one."""


class MissingExtra(AttnroofError, ImportError):
    """An optional dependency (torch, matplotlib) is not installed."""


MiB = 1 << 20
FILE_LIMITS: dict[str, int] = {
    "device file": 16 * MiB,
    "ceilings file": 16 * MiB,
    "model config": 16 * MiB,
    "calibration file": 64 * MiB,
    "requests file": 256 * MiB,
}
"""The most bytes :func:`read_text` reads of each kind of file (keyed by its ``what``), so that
``/dev/zero`` or a wrong multi-gigabyte file is one line, not a machine out of memory. Each is
some 100× the largest real file of its kind: the packaged catalog of ~60 devices is ~40 kB (a
device file or a ceilings file holds one device, or a list of them, plus a few dozen probe
records); a Hugging Face ``config.json`` is a few kB, the largest (vocabulary tables inline)
under 1 MB; a calibration keeps ~200 bytes per held-out shape, ~100 kB for a full sweep. Results
files are streamed, a line at a time, with their own limits (:mod:`attnroof.measure.reading`)."""
DEFAULT_FILE_LIMIT = 16 * MiB
"""The limit of a kind of file :data:`FILE_LIMITS` does not list."""


def read_text(
    path: str | os.PathLike[str], what: str, error: type[AttnroofError], *, limit: int | None = None
) -> str:
    """The text of a user's file; ``error("cannot read <what> '<path>': <reason>")`` if it can't
    be read (missing, a folder, a name too long, not UTF-8) or holds more than ``limit`` bytes
    (default: the limit of its kind, :data:`FILE_LIMITS`). At most ``limit + 1`` bytes are read,
    so an endless file (``/dev/zero``) is refused as quickly as a large one."""
    p = Path(path)
    most = limit if limit is not None else FILE_LIMITS.get(what, DEFAULT_FILE_LIMIT)
    try:
        with p.open("rb") as f:
            data = f.read(most + 1)
        if len(data) > most:
            raise error(
                f"cannot read {what} {str(p)!r}: larger than {most:,} bytes, the most attnroof reads "
                f"of a {what} (is it the right file?)"
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"cannot read {what} {str(p)!r}: {_reason(e)}") from None


def _reason(e: OSError | UnicodeDecodeError) -> str:
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text (byte {e.start})"
    return e.strerror or type(e).__name__


class NotStrictJSON(ValueError):
    """Text that Python's ``json`` would accept but JSON (RFC 8259) does not, or that cannot be
    held as data: ``NaN``/``Infinity``, a number out of float range, an integer too long to
    convert, nesting deeper than the parser can follow, or a key given twice in one object."""


def _no_constants(name: str) -> Any:
    raise NotStrictJSON(f"{name} is not a JSON number (JSON has no NaN or infinity)")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise NotStrictJSON(f"the number {_clip(text)} is out of range (larger than any float)")
    return x


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise NotStrictJSON(f"key {_clip(key)!r} appears twice in one object")
        out[key] = value
    return out


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _infinity(name: str) -> Any:
    """``Infinity`` and ``-Infinity`` as floats (model configs: Python's JSON writes them); NaN
    stays refused."""
    if name == "Infinity":
        return math.inf
    if name == "-Infinity":
        return -math.inf
    return _no_constants(name)


def loads_strict(text: str, *, infinity: bool = False) -> Any:
    """``json.loads`` for files a user hands attnroof: strict JSON, every number finite.

    Raises :class:`json.JSONDecodeError` for a syntax error and :class:`NotStrictJSON` for
    everything else that is not data (see there): never ``RecursionError`` or a bare
    ``ValueError``. ``infinity``: read ``Infinity`` as a float (a model config's reader then
    refuses it wherever it is not allowed, naming the field).

    >>> loads_strict('{"time_s": NaN}')
    Traceback (most recent call last):
    ...
    attnroof.errors.NotStrictJSON: NaN is not a JSON number (JSON has no NaN or infinity)
    """
    try:
        constant = _infinity if infinity else _no_constants
        return json.loads(
            text, parse_constant=constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
        )
    except (json.JSONDecodeError, NotStrictJSON):
        raise
    except RecursionError:
        raise NotStrictJSON("nested too deeply to read") from None
    except ValueError as e:  # int('9' * 5000): Python's limit on integer string conversion
        if "digits" in str(e):
            raise NotStrictJSON("an integer has more digits than any figure could (over 4300)") from None
        raise NotStrictJSON(_clip(str(e), 120)) from None


def parse_json(text: str, where: str, error: type[AttnroofError], *, infinity: bool = False) -> Any:
    """:func:`loads_strict`, with any problem raised as ``error("<where>: ...")`` on one line."""
    try:
        return loads_strict(text, infinity=infinity)
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON: {e}") from None
    except NotStrictJSON as e:
        raise error(f"{where}: not valid JSON data: {e}") from None


def read_json(
    path: str | os.PathLike[str], what: str, error: type[AttnroofError], *, infinity: bool = False
) -> Any:
    """A user's JSON file (a model config, a ceilings file), parsed strictly (see
    :func:`loads_strict`); ``error`` names the file and the reason if it can't be read as data
    (an empty one, ``/dev/null``, is said to be empty rather than to lack a value at column 1)."""
    text = read_text(path, what, error)
    if not text.strip():
        raise error(f"cannot read {what} {str(path)!r}: it is empty")
    return parse_json(text, f"{what} {str(path)!r}", error, infinity=infinity)
