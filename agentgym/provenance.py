"""What made an artefact: the keys that let a cache tell a result it may reuse from a stale one.

A cached artefact (a saved model, a warm start, an evaluation, a run record) is reusable only if the same
configuration *and the same code* would make it again. :func:`artefact_key` is that identity: the configuration as
JSON, the distribution's version, and a hash of the source of its packages (``agentgym``, ``adapters``,
``estimators``, ``retrieval``: every ``.py`` file, plus any extra files a caller names, e.g. a benchmark script), so
any change of the code that could change the artefact makes the key differ. :func:`write_key` stores a key beside
the artefact; :func:`stale_reason` says why a stored key does not match (None when it does), so a caller rebuilds or
refuses, never silently reuses. :func:`directory_digest` names a model directory by its content.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["SOURCE_PACKAGES", "code_identity", "artefact_key", "write_key", "read_key", "stale_reason",
           "directory_digest"]

#: The packages whose source makes an artefact (every ``.py`` file under them is hashed).
SOURCE_PACKAGES = ("agentgym", "adapters", "estimators", "retrieval")
_ROOT = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def _source_digest(extra: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    files: list[Path] = []
    for pkg in SOURCE_PACKAGES:
        d = _ROOT / pkg
        if d.is_dir():
            files += sorted(p for p in d.rglob("*.py") if "__pycache__" not in p.parts)
    files += [Path(f).resolve() for f in extra]
    for f in files:
        try:
            name = str(f.relative_to(_ROOT))
        except ValueError:
            name = f.name
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def code_identity(extra_files: Iterable[str | os.PathLike] = ()) -> dict:
    """``{"package", "version", "source_sha256"}``: the distribution, its version and the hash of its packages'
    source (and of ``extra_files``)."""
    from . import __version__
    from .errors import DIST_NAME

    return {"package": DIST_NAME, "version": __version__,
            "source_sha256": _source_digest(tuple(str(f) for f in extra_files))}


def artefact_key(config: Mapping[str, Any], *, extra_files: Iterable[str | os.PathLike] = ()) -> dict:
    """The identity of an artefact made from ``config`` (JSON-able; normalised through JSON) by this code."""
    return {"config": json.loads(json.dumps(dict(config), sort_keys=True, default=str)),
            "code": code_identity(extra_files)}


def write_key(path: str | os.PathLike, key: Mapping[str, Any]) -> None:
    """Store ``key`` at ``path`` (JSON)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(dict(key), indent=2, sort_keys=True), encoding="utf-8")


def read_key(path: str | os.PathLike) -> dict | None:
    """The key stored at ``path``, or None (missing or unreadable)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stale_reason(stored: Mapping[str, Any] | None, key: Mapping[str, Any]) -> str | None:
    """None when ``stored`` equals ``key``; else what differs (for a log line or an error message)."""
    if stored is None:
        return "no key recorded (made by older code or by hand)"
    want = json.loads(json.dumps(dict(key), sort_keys=True, default=str))
    if stored == want:
        return None
    diffs: list[str] = []
    _diff(dict(stored), want, "", diffs)
    return "; ".join(diffs[:6]) + (f"; {len(diffs) - 6} more" if len(diffs) > 6 else "") if diffs else \
        "the keys differ"


def _diff(a: Any, b: Any, where: str, out: list[str]) -> None:
    """The paths at which two JSON values differ (into dictionaries; other values compared whole)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _diff(a.get(k), b.get(k), f"{where}.{k}" if where else str(k), out)
    elif a != b:
        out.append(f"{where}: {_short(a)} there, {_short(b)} now")


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def directory_digest(path: str | os.PathLike, *, max_bytes: int = 1 << 30) -> str:
    """A content hash of a directory's files (names and bytes; files over ``max_bytes`` in all: names and sizes),
    e.g. a saved model: two directories with the same digest hold the same model."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0")
        if total <= max_bytes:
            h.update(p.read_bytes())
        else:
            h.update(str(p.stat().st_size).encode())
        h.update(b"\0")
    return h.hexdigest()
