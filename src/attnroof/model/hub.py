"""``--model org/name``: a model's ``config.json`` from the Hugging Face hub cache, downloaded
into that cache when online.

Where the cache is, as ``huggingface_hub`` finds it: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``,
else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``. A repository's
files sit in the hub's own layout::

    models--meta-llama--Llama-3.1-8B/
        refs/main                       the commit hash of the revision "main" names
        snapshots/<hash>/config.json    the file (a link into blobs/)

In order, ``org/name`` is read from: the cached snapshot ``refs/main`` names (or, without refs,
the newest snapshot holding a ``config.json``); the built-in copy of that repository's config,
when attnroof ships one (no network needed); a download through ``huggingface_hub`` (the
``hub`` extra, imported only here), unless ``HF_HUB_OFFLINE`` is set. Otherwise one line names
the repository and how to pass a local ``config.json`` instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from attnroof.model.fields import ModelConfigError

REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
"""A hub repository id, ``org/name``: letters, digits, ``_ . -``, one slash."""
TRUE_WORDS = frozenset({"1", "on", "yes", "true"})
"""Values of ``HF_HUB_OFFLINE`` that ``huggingface_hub`` reads as set."""
CONFIG_FILE = "config.json"
REVISION = "main"


def is_repo_id(text: str) -> bool:
    """Whether ``text`` reads as a hub repository id.

    >>> is_repo_id("meta-llama/Llama-3.1-8B"), is_repo_id("llama-3.1-8b"), is_repo_id("a/../b")
    (True, False, False)
    """
    return REPO_ID.fullmatch(text) is not None and ".." not in text


def hub_cache() -> Path:
    """The hub cache folder, found the way ``huggingface_hub`` finds it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME")
    if not home:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
        home = os.path.join(xdg, "huggingface")
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids the network."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in TRUE_WORDS


def repo_folder(repo_id: str, cache: Path | None = None) -> Path:
    """The cache folder of a model repository: ``models--org--name``.

    >>> repo_folder("meta-llama/Llama-3.1-8B", Path("/c")).as_posix()
    '/c/models--meta-llama--Llama-3.1-8B'
    """
    return (cache or hub_cache()) / ("models--" + repo_id.replace("/", "--"))


def cached_config(repo_id: str, cache: Path | None = None) -> Path | None:
    """The cached ``config.json`` of ``repo_id`` at the revision ``refs/main`` names, else in
    the newest snapshot that has one; ``None`` when the cache has none."""
    folder = repo_folder(repo_id, cache)
    if not os.path.isdir(folder):  # the hub keeps the id's case; a user may not type it
        # (os.path: an id too long for a folder name is no folder, where Path.is_dir raises)
        parent = folder.parent
        want = folder.name.lower()
        found = [p for p in parent.iterdir() if p.name.lower() == want] if parent.is_dir() else []
        if not found:
            return None
        folder = found[0]
    ref = folder / "refs" / REVISION
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8", errors="replace").strip()
        candidate = folder / "snapshots" / commit / CONFIG_FILE
        if commit and candidate.is_file():
            return candidate
    snapshots = folder / "snapshots"
    configs = (
        [p / CONFIG_FILE for p in snapshots.iterdir() if (p / CONFIG_FILE).is_file()]
        if snapshots.is_dir()
        else []
    )
    return max(configs, key=lambda p: p.stat().st_mtime) if configs else None


def download_config(repo_id: str) -> Path:
    """``config.json`` of ``repo_id`` fetched into the hub cache by ``huggingface_hub``;
    :class:`ModelConfigError` (one line naming the repository) when that cannot be done."""
    how = f"download its {CONFIG_FILE} and pass that file's path (or its folder) instead of the name"
    where = f"model {repo_id!r} is not in the Hugging Face cache ({hub_cache()})"
    if offline():
        raise ModelConfigError(f"{where} and HF_HUB_OFFLINE is set; {how}")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise ModelConfigError(
            f"{where} and huggingface_hub is not installed (pip install 'attnroof[hub]'); {how}"
        ) from None
    try:
        return Path(hf_hub_download(repo_id, CONFIG_FILE, revision=REVISION, cache_dir=hub_cache()))
    except Exception as e:  # network, authentication, a gated or missing repository: all one line
        reason = (str(e).strip().splitlines() or [""])[0][:160]
        raise ModelConfigError(
            f"cannot download {CONFIG_FILE} of model {repo_id!r}: {type(e).__name__}"
            + (f" ({reason})" if reason else "")
            + f"; {how}"
        ) from None
