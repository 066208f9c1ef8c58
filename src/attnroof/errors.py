"""The errors attnroof raises. The CLI prints any of them as one line and exits with status 2."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class AttnroofError(Exception):
    """Base class: a bad value from the user, a file or the catalog."""


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


def read_json(path: str | os.PathLike[str], what: str, error: type[AttnroofError]) -> Any:
    """A user's JSON file, parsed; ``error`` names the file and the reason if it can't be."""
    text = read_text(path, what, error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON: {e}") from None
