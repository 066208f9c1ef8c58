"""The errors attnroof raises. The CLI prints any of them as one line and exits with status 2."""

from __future__ import annotations

import json
import math
import os
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


class MissingExtra(AttnroofError, ImportError):
    """An optional dependency (torch, matplotlib) is not installed."""


def read_text(path: str | os.PathLike[str], what: str, error: type[AttnroofError]) -> str:
    """The text of a user's file; ``error("cannot read <what> '<path>': <reason>")`` if it can't
    be read (missing, a folder, not UTF-8)."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise error(f"cannot read {what} {str(p)!r}: {reason}") from None


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


def loads_strict(text: str) -> Any:
    """``json.loads`` for files a user hands attnroof: strict JSON, every number finite.

    Raises :class:`json.JSONDecodeError` for a syntax error and :class:`NotStrictJSON` for
    everything else that is not data (see there): never ``RecursionError`` or a bare
    ``ValueError``.

    >>> loads_strict('{"time_s": NaN}')
    Traceback (most recent call last):
    ...
    attnroof.errors.NotStrictJSON: NaN is not a JSON number (JSON has no NaN or infinity)
    """
    try:
        return json.loads(
            text, parse_constant=_no_constants, parse_float=_finite_float, object_pairs_hook=_unique_keys
        )
    except (json.JSONDecodeError, NotStrictJSON):
        raise
    except RecursionError:
        raise NotStrictJSON("nested too deeply to read") from None
    except ValueError as e:  # int('9' * 5000): Python's limit on integer string conversion
        if "digits" in str(e):
            raise NotStrictJSON("an integer has more digits than any figure could (over 4300)") from None
        raise NotStrictJSON(_clip(str(e), 120)) from None


def parse_json(text: str, where: str, error: type[AttnroofError]) -> Any:
    """:func:`loads_strict`, with any problem raised as ``error("<where>: ...")`` on one line."""
    try:
        return loads_strict(text)
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON: {e}") from None
    except NotStrictJSON as e:
        raise error(f"{where}: not valid JSON data: {e}") from None


def read_json(path: str | os.PathLike[str], what: str, error: type[AttnroofError]) -> Any:
    """A user's JSON file (a model config, a ceilings file), parsed strictly (see
    :func:`loads_strict`); ``error`` names the file and the reason if it can't be read as data."""
    return parse_json(read_text(path, what, error), str(path), error)
