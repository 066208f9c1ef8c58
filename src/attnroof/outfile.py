"""Writing the files attnroof makes: one set of rules for every command that takes ``-o``.

What a path given for output is, decides how it is written:

- **a regular file, or nothing yet**: the whole content goes to a hidden sibling in the same
  folder, is flushed and fsync'd, then renamed over the path in one step. A reader never sees
  half a file; an interrupted write leaves the old file as it was. A file that is replaced keeps
  its permission bits (and, where allowed, its owner).
- **a symbolic link**: followed. The link stays a link; the file it points to (created if the
  link dangles) is written by the rule above, the rename landing on the resolved path.
- **a character device or a FIFO** (``/dev/null``, ``/dev/stdout``, a named pipe): written in
  place, as a stream: opened for writing, written, closed. Never renamed over, never truncated
  or fsync'd, never read.
- **anything else** (a folder, a block device, a socket): refused with one line.

A **missing folder** is never created: the path is refused with one line naming the folder that
does not exist (a typo in a folder name should not scatter results into a new tree).

**Measurements are protected, and so are other people's files.** A file that holds measurements
(an attnroof results file with records, or a ceilings file) is never overwritten unless the
command is told to (``--force``); nor is any other non-empty file that is not the writer's own
earlier output, which each writer tells by a mark it puts in its files (attnroof as creator in a
chart's metadata, a ``generator`` meta tag in a report, the format line of a calibration). Through
a symbolic link, the file it points to is judged. :func:`check_overwrite` says why a path is
protected. The JSON-lines results file is appended to, a record at a time, by one run at a time
(:class:`Lock`); see :class:`attnroof.measure.records.ResultsFile`.

**Hidden siblings fit any name.** The temporary and lock files beside the output (one filesystem
for the rename) are ``.NAME.XXXXXXXX.tmp`` and ``.NAME.lock``, cut and hashed where that would pass
the folder's limit on a name (:func:`hidden_sibling`): every legal name can be written.

Error messages here name the path only; the commands add which flag it came from.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from attnroof.errors import InputError

SNIFF_BYTES = 64 * 1024
"""How much of an existing file is read (its start; its end too, for a mark) to tell what it holds."""

CEILINGS_FORMAT_PREFIX = "attnroof-ceilings/"

FORCE_HELP = "overwrite the output file even if it holds measurements or is not attnroof's (default: refuse)"
"""Help of every writer's overwrite flag: one name (``--force``) and one meaning everywhere."""

_HTML = (b'<meta name="generator" content="attnroof ', b"<title>attnroof report: ")
OWN_MARKS: dict[str, tuple[bytes, ...]] = {
    ".png": (b"tEXtSoftware\x00attnroof ",),
    ".svg": (b"<dc:title>attnroof ",),
    ".pdf": (b"/Creator (attnroof ",),
    ".html": _HTML,
    ".htm": _HTML,
}
"""How attnroof's own output of each kind names it as its creator (``plot.files.CREATOR``), in its
first or last :data:`SNIFF_BYTES` (a PDF's is at its end); an older report, by its title."""

NAME_MAX = 255
"""Bytes in a file name, where the folder does not say (``pathconf``): Linux's and macOS's limit."""


class OutputError(InputError):
    """A path that cannot be written, or that holds something it must not lose."""


@dataclass(frozen=True)
class Target:
    """Where output for a path goes. ``path`` is as given; ``real`` is where a regular file's
    bytes land (the symlink resolved); ``stream`` is true for a device or FIFO, written in place;
    ``exists`` is whether there is something there now (for a stream: always)."""

    path: Path
    real: Path
    stream: bool
    exists: bool


def target(path: str | os.PathLike[str]) -> Target:
    """Classify ``path`` for writing, or raise :class:`OutputError` (a folder, a block device, a
    socket, a missing folder)."""
    p = Path(path)
    shown = repr(str(p))
    try:
        st = os.stat(p)  # follows symbolic links
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"cannot write {shown}: {e.strerror or e}") from None
    if st is not None:
        if stat.S_ISREG(st.st_mode):
            return Target(p, Path(os.path.realpath(p)), stream=False, exists=True)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            return Target(p, p, stream=True, exists=True)
        what = (
            "it is a folder" if stat.S_ISDIR(st.st_mode) else "only a file, a character device or a FIFO is"
        )
        raise OutputError(f"cannot write {shown}: {what}")
    real = Path(os.path.realpath(p))  # a dangling link: the file it names is created
    parent = real.parent
    if not parent.is_dir():
        folder = parent if p.is_symlink() else p.parent
        raise OutputError(f"cannot write {shown}: no such folder {str(folder)!r}")
    return Target(p, real, stream=False, exists=False)


def measurements_in(path: str | os.PathLike[str]) -> str | None:
    """What measurements ``path`` holds, in words (``"54 measurements"``, ``"measured
    ceilings"``), or ``None`` when it holds none: missing, empty, not a regular file, or any
    other content. Only the start of the file is read, except to count a results file's lines."""
    p = Path(path)
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            return None
        with p.open("rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return None
    text = head.decode("utf-8", errors="replace")
    if CEILINGS_FORMAT_PREFIX in text and text.lstrip().startswith("{"):
        return "measured ceilings"
    first = next((line for line in text.split("\n") if line.strip()), "")
    try:
        rec = json.loads(first)
    except ValueError:
        return None
    if not (isinstance(rec, dict) and "key" in rec):
        return None
    count = 0
    with contextlib.suppress(OSError), p.open("rb") as f:
        count = sum(1 for line in f if line.strip())
    return f"{count} measurement{'s' if count != 1 else ''}"


def check_overwrite(
    path: str | os.PathLike[str],
    *,
    force: bool = False,
    foreign: bool = False,
    hint: str = "",
    own_marker: str | bytes | tuple[str | bytes, ...] | None = None,
) -> None:
    """Raise :class:`OutputError`, unless ``force``, when ``path`` (through a symlink: the file it
    points to) holds measurements, or is a non-empty regular file of any other content — except
    one that shows ``own_marker`` (a mark or several, found in its first or last
    :data:`SNIFF_BYTES`; by default the marks of the kind its suffix names, :func:`own_marks`),
    the writer's own earlier output. ``foreign=True`` lets any file but measurements be replaced.
    ``hint`` ends the message: the command's way out, e.g. its flag."""
    if force:
        return
    shown = _shown(path)
    held = measurements_in(path)
    if held is not None:
        raise OutputError(f"{shown} holds {held}: it is not overwritten{hint}")
    if foreign:
        return
    try:
        st = os.stat(path)
    except OSError:
        return
    if own_marker is None:
        marks: tuple[str | bytes, ...] = own_marks(path)
    else:
        marks = (own_marker,) if isinstance(own_marker, str | bytes) else own_marker
    if stat.S_ISREG(st.st_mode) and st.st_size > 0 and not _shows(path, marks):
        raise OutputError(f"{shown} is not an attnroof file: it is not overwritten{hint}")


def own_marks(path: str | os.PathLike[str]) -> tuple[bytes, ...]:
    """The marks of attnroof's own output of the kind ``path``'s suffix names (:data:`OWN_MARKS`)."""
    return OWN_MARKS.get(Path(path).suffix.lower(), ())


def _shown(path: str | os.PathLike[str]) -> str:
    """``path`` for a message; a symbolic link with the file it points to."""
    p = Path(path)
    if p.is_symlink():
        return f"{str(p)!r} (a link to {os.path.realpath(p)!r})"
    return repr(str(p))


def _shows(path: str | os.PathLike[str], marks: tuple[str | bytes, ...]) -> bool:
    """One of ``marks`` in the first or last :data:`SNIFF_BYTES` of the file (unreadable: False)."""
    wanted = [m.encode("utf-8") if isinstance(m, str) else m for m in marks if m]
    if not wanted:
        return False
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= 2 * SNIFF_BYTES:
                parts = [f.read()]
            else:
                parts = [f.read(SNIFF_BYTES)]
                f.seek(size - SNIFF_BYTES)
                parts.append(f.read(SNIFF_BYTES))
    except OSError:
        return False
    return any(m in part for m in wanted for part in parts)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` by the module's rules; the path as given is returned."""
    t = target(path)
    try:
        if t.stream:
            _stream(t.path, data)
        else:
            _replace(t.real, data)
    except OSError as e:
        raise OutputError(f"cannot write {str(t.path)!r}: {e.strerror or e}") from None
    return t.path


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`write_bytes` of ``text`` in UTF-8."""
    return write_bytes(path, text.encode("utf-8"))


def _stream(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)  # no O_CREAT, no O_TRUNC: a device or FIFO stays what it is
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _replace(real: Path, data: bytes) -> None:
    """Write a hidden sibling of ``real``, fsync it, rename it over ``real``."""
    try:
        old = os.stat(real)
    except FileNotFoundError:
        old = None
    prefix = hidden_sibling(real, ".", room=_RANDOM + len(".tmp"))
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=prefix, suffix=".tmp")
    done = False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
            with contextlib.suppress(OSError):
                os.chown(tmp, old.st_uid, old.st_gid)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, real)
        done = True
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


_RANDOM = 8
"""Characters ``tempfile.mkstemp`` puts between its prefix and suffix."""


def hidden_sibling(real: Path, suffix: str, *, room: int = 0) -> str:
    """The name of a hidden file beside ``real``: ``.NAME`` + ``suffix``, with ``room`` bytes to
    spare under the folder's limit on a name's length; where that would not fit, ``NAME`` cut and
    16 hex digits of its SHA-256 added (the same for every run: the next writer finds the lock).

    >>> hidden_sibling(Path("r.jsonl"), ".lock")
    '.r.jsonl.lock'
    >>> len(hidden_sibling(Path("a" * 255), ".lock").encode())
    255
    """
    limit = _name_max(real.parent) - room
    whole = f".{real.name}{suffix}"
    if len(os.fsencode(whole)) <= limit:
        return whole
    digest = hashlib.sha256(os.fsencode(real.name)).hexdigest()[:16]
    end = f"~{digest}{suffix}"
    keep = max(0, limit - 1 - len(os.fsencode(end)))
    return f".{os.fsencode(real.name)[:keep].decode('utf-8', 'ignore')}{end}"  # a cut character: gone


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return NAME_MAX


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Lock:
    """An advisory lock that one writer holds on a file it appends to for a long time (a
    measurement campaign), so that a second writer is refused instead of interleaving its lines.

    The lock is ``flock`` on a sibling ``.NAME.lock`` (:func:`hidden_sibling`), not on the file
    itself: the file is replaced by renaming a new copy over it (:func:`write_text`), and a lock
    on the old copy would not stop a writer that opens the new one. The lock file says who holds it (process id
    and start time, for the refusal's message); it is removed on :meth:`release`, and a lock left
    by a process that died is no lock (the kernel lets go of ``flock`` with the process)."""

    def __init__(self, real: Path, *, shown: str) -> None:
        self.path = real.parent / hidden_sibling(real, ".lock")
        while True:
            try:  # never through a symlink: the lock file is truncated, then removed
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
            except OSError as e:
                why = e.strerror or str(e)
                if e.errno == errno.ELOOP:
                    why = f"its lock file {str(self.path)!r} is a symbolic link (not attnroof's: remove it)"
                raise OutputError(f"cannot write {shown!r}: {why}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
                os.close(fd)
                raise OutputError(
                    f"{shown!r} is being written by another attnroof run ({holder}; lock {str(self.path)!r}): "
                    "wait for it to finish, or choose another -o"
                ) from None
            try:  # the holder may have let go and removed the file between our open and flock
                current = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                break
            os.close(fd)
        self._fd: int | None = fd
        started = datetime.now(UTC).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()}, since {started}\n".encode())

    def release(self) -> None:
        """Let go (removing the lock file first, while it is still held)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None
