"""What the explorer knows and does for a request: the pasted texts' files, the job pools, the
page's files and this run's token; :meth:`Explorer.answer` turns one request into (status, JSON
text). The HTTP side (:mod:`.server`) only moves bytes and checks who asks.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import Any

from attnroof.explore.caps import (
    FLAGS,
    HEAVY,
    HEAVY_MEMORY,
    HEAVY_TIME_S,
    HEAVY_WORKERS,
    MAX_PASTED,
    MAX_PASTED_FILES,
    MAX_VALUE,
    QUEUE_WAIT_S,
    QUICK_MEMORY,
    QUICK_TIME_S,
    QUICK_WORKERS,
    WARM_HEAVY,
    WARM_QUICK,
    RequestError,
    Run,
    check_caps,
)
from attnroof.explore.jobs import Outcome, Pool

FOLDER_PREFIX = "attnroof-explore-"
STATIC = "static"
TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".txt": "text/plain"}


def _static_files() -> dict[str, bytes]:
    """The page's files, read once from the package (``attnroof/explore/static``)."""
    folder = resources.files("attnroof.explore").joinpath(STATIC)
    return {f.name: f.read_bytes() for f in folder.iterdir() if Path(f.name).suffix in TYPES}


def _allowed_names() -> tuple[frozenset[str], frozenset[str]]:
    """Built-in model names, and the catalog's device names and aliases (a user's own
    ``$ATTNROOF_DEVICES`` included): the only model and device values a request may give."""
    from attnroof.devices import catalog
    from attnroof.model.config import builtin_names

    devices = frozenset(x for d in catalog() for x in (d.name, *d.aliases))
    return frozenset(builtin_names()), devices


def _remove_stale_folders() -> None:
    """Folders of explorers that ended without a word (``kill -9``): this user's, named for a
    process that is gone."""
    base = Path(tempfile.gettempdir())
    for path in base.glob(f"{FOLDER_PREFIX}*-*"):
        pid = path.name[len(FOLDER_PREFIX) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or path.stat().st_uid != os.getuid() or int(pid) == os.getpid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, AttributeError):
            continue


class Pasted:
    """The pasted texts' files, by their text's digest: at most :data:`MAX_PASTED_FILES`, the
    least recently used evicted first; a file a job is reading is held (``pins``) until it ends."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._files: OrderedDict[str, tuple[Path, int]] = OrderedDict()  # digest -> (folder, pins)
        self._guard = threading.Lock()

    def hold(self, text: Any, what: str, name: str, held: list[str]) -> str:
        """The private file holding ``text``, written once per distinct text; its digest is
        added to ``held`` (:meth:`release` it after the job)."""
        if not isinstance(text, str):
            raise RequestError(f"the {what} is given as its text (a JSON string), not {type(text).__name__}")
        if not text.strip():
            raise RequestError(f"the {what} is empty: paste or drop its text")
        if len(text) > MAX_PASTED:
            raise RequestError(
                f"the {what} holds {len(text):,} characters: the explorer takes at most {MAX_PASTED:,}",
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            )
        digest = hashlib.sha256(f"{name}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()[:24]
        path = self.folder / digest / name
        with self._guard:
            folder, pins = self._files.pop(digest, (self.folder / digest, 0))
            self._files[digest] = (folder, pins + 1)
            held.append(digest)
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8", errors="surrogateescape")
            self._evict()
        return str(path)

    def release(self, held: Sequence[str]) -> None:
        with self._guard:
            for digest in held:
                if digest in self._files:
                    folder, pins = self._files[digest]
                    self._files[digest] = (folder, pins - 1)
            self._evict()

    def _evict(self) -> None:
        while len(self._files) > MAX_PASTED_FILES:
            old = next((d for d, (_, pins) in self._files.items() if pins <= 0), None)
            if old is None:
                return  # every file is being read: evicted when its jobs end
            folder, _ = self._files.pop(old)
            shutil.rmtree(folder, ignore_errors=True)

    def count(self) -> int:
        with self._guard:
            return len(self._files)


class Explorer:
    """What the server knows: the job pools, the private folder for pasted texts, the static
    files, this run's token. :meth:`answer` turns one request into (status, JSON text); the HTTP
    handler only moves bytes and checks who asks.

    ``workers=False`` runs each command in this process, one at a time, without limits: for
    tests that watch the library's own functions, never for a server."""

    def __init__(
        self,
        run: Run,
        *,
        workers: bool = True,
        time_limits: tuple[float, float] = (QUICK_TIME_S, HEAVY_TIME_S),
        memory_budgets: tuple[int, int] = (QUICK_MEMORY, HEAVY_MEMORY),
    ) -> None:
        _remove_stale_folders()
        self.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        atexit.register(self.close)
        self.token = secrets.token_urlsafe(18)
        self.static = _static_files()
        self.models, self.devices = _allowed_names()
        self.pasted = Pasted(self.folder)
        self._run = run
        self._inline = threading.Lock()
        self.pools: dict[str, Pool] = {}
        if workers:
            target = f"{run.__module__}:{run.__qualname__}"
            for kind, size, time_s, memory, warm in (
                ("quick", QUICK_WORKERS, time_limits[0], memory_budgets[0], WARM_QUICK),
                ("heavy", HEAVY_WORKERS, time_limits[1], memory_budgets[1], WARM_HEAVY),
            ):
                self.pools[kind] = Pool(
                    target,
                    size=size,
                    time_limit_s=time_s,
                    memory_bytes=memory,
                    queue_wait_s=QUEUE_WAIT_S,
                    warm=warm,
                    eager=kind == "quick",  # the page's first answers; a search's workers when first asked
                )

    def close(self) -> None:
        """End the jobs and remove the folder (again harmless: it runs at exit too)."""
        for pool in self.pools.values():
            pool.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def words(
        self, command: str, params: Mapping[str, Any], texts: Mapping[str, Any], held: list[str] | None = None
    ) -> list[str]:
        """The command line for a request: ``[command, --flag=value ..., --json]``; the pasted
        files it names are held in ``held`` until the job ends."""
        held = [] if held is None else held
        if command not in FLAGS:
            raise RequestError(f"unknown command {command!r} (the explorer runs {', '.join(FLAGS)})")
        words = [command]
        if command == "devices" and texts.get("device_file") is not None:
            words.append(self.pasted.hold(texts["device_file"], "device file", "device.toml", held))
        elif command == "devices" and params.get("name"):
            words.append(self._device(str(params["name"])))
        given: dict[str, str] = {}
        for key, value in params.items():
            if key not in FLAGS[command]:
                raise RequestError(f"{command} takes no parameter {key!r} in the explorer")
            if key == "name" or value is None or value is False or value == "":
                continue
            if value is True or value == "true":  # a switch (``?unfused=true`` in a GET)
                words.append(f"--{key}")
                continue
            if not isinstance(value, str | int | float) or len(str(value)) > MAX_VALUE:
                raise RequestError(f"parameter {key!r}: expected a short value, got {str(value)[:40]!r}")
            text = str(value)
            if key == "model":
                text = self._model(text)
            elif key == "device":
                text = self._device(text)
            given[key] = text
            words.append(f"--{key}={text}")
        check_caps(command, given)
        if texts.get("config") is not None and "model" in FLAGS[command]:
            path = self.pasted.hold(texts["config"], "config.json", "pasted/config.json", held)
            words.append(f"--model={path}")
        if texts.get("device_file") is not None and "device" in FLAGS[command]:
            words.append(
                f"--device={self.pasted.hold(texts['device_file'], 'device file', 'device.toml', held)}"
            )
        return [*words, "--json"]

    def _model(self, name: str) -> str:
        if name not in self.models:
            raise RequestError(
                f"model {name!r} is not a built-in model (the explorer takes a built-in name, "
                "or a config.json's text)"
            )
        if os.path.exists(name):  # the command line would read it as a path: never for a request
            raise RequestError(
                f"model {name!r} is also a file or folder where the explorer runs; start it elsewhere"
            )
        return name

    def _device(self, name: str) -> str:
        if name not in self.devices:
            raise RequestError(
                f"device {name!r} is not in the catalog (the explorer takes a catalog name, "
                "or a device file's text)"
            )
        if os.path.exists(name):  # the command line would read it as a device file: never for a request
            raise RequestError(f"device {name!r} is also a file where the explorer runs; start it elsewhere")
        return name

    def run(self, words: Sequence[str], gone: Callable[[], bool] = lambda: False) -> Outcome:
        """``attnroof WORDS`` as a job: in a worker of the command's pool, or here (``workers=False``)."""
        if not self.pools:
            from attnroof.explore.worker import one_job

            with self._inline:  # a command writes to the process's own sys.stdout
                return Outcome(*one_job(self._run, words))
        return self.pools["heavy" if words[0] in HEAVY else "quick"].run(words, gone)

    def answer(
        self,
        command: str,
        params: Mapping[str, Any],
        texts: Mapping[str, Any],
        gone: Callable[[], bool] = lambda: False,
    ) -> tuple[int, str] | None:
        """(HTTP status, body): the command's JSON as it printed it, or ``{"error": line}``;
        None when the client left before its answer."""
        held: list[str] = []
        try:
            try:
                words = self.words(command, params, texts, held)
            except RequestError as e:
                return e.status, error_json(str(e))
            outcome = self.run(words, gone)
        finally:
            self.pasted.release(held)
        if outcome.ended is not None:
            return self._unfinished(command, outcome.ended)
        if outcome.status == 0:
            return HTTPStatus.OK, outcome.out
        line = next((x for x in outcome.err.splitlines() if x.strip()), "attnroof: error")
        line = re.sub(
            re.escape(str(self.folder)) + r"/[0-9a-f]{24}/(?:pasted/)?", "", line
        )  # as the user gave it
        line = line.replace(str(self.folder), "the explorer's folder")
        code = HTTPStatus.BAD_REQUEST if outcome.status == 2 else HTTPStatus.INTERNAL_SERVER_ERROR
        return code, error_json(line)

    def _unfinished(self, command: str, ended: str) -> tuple[int, str] | None:
        pool = self.pools["heavy" if command in HEAVY else "quick"]
        more = f"ask for less, or run attnroof {command} on the command line"
        if ended == "gone":
            return None
        if ended == "time":
            line = f"{command} ran past the explorer's limit of {pool.time_limit_s:g} s a job: {more}"
            return HTTPStatus.BAD_REQUEST, error_json(line)
        if ended == "memory":
            line = f"{command} needed more than the explorer's {_bytes(pool.memory_bytes)} a job: {more}"
            return HTTPStatus.BAD_REQUEST, error_json(line)
        if ended == "busy":
            line = f"the explorer is busy: {pool.size} jobs like {command} are running; try again"
            return HTTPStatus.SERVICE_UNAVAILABLE, error_json(line)
        if ended == "closed":
            return HTTPStatus.SERVICE_UNAVAILABLE, error_json("the explorer is stopping")
        return HTTPStatus.INTERNAL_SERVER_ERROR, error_json(f"{command}'s job ended before it answered")


def _bytes(n: int) -> str:
    """``n`` bytes in binary units: ``1 GiB``, ``150 MiB``."""
    return f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def error_json(line: str) -> str:
    return json.dumps({"error": line}, ensure_ascii=False) + "\n"
