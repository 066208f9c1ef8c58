"""The errors attnroof raises. The CLI prints any of them as one line and exits with status 2."""

from __future__ import annotations


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
