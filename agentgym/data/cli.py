"""``agentgym data``: list, fetch and verify the datasets of the manifest.

    agentgym data list [--files] [--json]
    agentgym data fetch NAME... | --all [--mirror URL|DIR] [--force] [--no-progress]
    agentgym data verify [NAME...]

Datasets install into the data cache (``$AGENTGYM_DATA_CACHE``, else ``$AGENTGYM_CACHE/data``, else
``~/.cache/agentgym/data``; ``--cache DIR`` for one command). A mirror (``--mirror`` or ``$AGENTGYM_DATA_MIRROR``) is a
tree with the layout of ``shared/data`` served over HTTP(S) or as a local folder: each file at its manifest path.

Exit status: 0 done; 1 a fetch failed (a download, pip, or a file whose SHA-256 is not the pinned one: nothing of that
dataset is installed) or ``verify`` found a missing or changed file; 2 usage (an unknown dataset name, no name).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Sequence

from . import DATA_CACHE_ENV, data_cache_dir
from .fetch import MIRROR_ENV, DataIntegrityError, fetch_dataset, locate, verify_dataset
from .manifest import Dataset, UnknownDatasetError, datasets, get_dataset
from ..errors import AgentGymError

__all__ = ["main", "used_by_text"]


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def _splits_text(splits: Sequence[str]) -> str:
    """``gen-depth1, gen-depth2, ...`` -> ``gen-depth1..4``: consecutive numbered splits of one stem, folded."""
    out: list[str] = []
    i = 0
    while i < len(splits):
        m = re.fullmatch(r"(.*?)(\d+)", splits[i])
        j = i
        if m:
            while j + 1 < len(splits) and splits[j + 1] == f"{m.group(1)}{int(m.group(2)) + j + 1 - i}":
                j += 1
        out.append(splits[i] if j == i else f"{splits[i]}..{int(m.group(2)) + j - i}")
        i = j + 1
    return ", ".join(out)


def used_by_text(ds: Dataset) -> str:
    text = "; ".join(f"{env} {_splits_text(s)}" for env, s in ds.used_by.items())
    return f"{text} (optional)" if ds.optional else text


def _sha_text(ds: Dataset) -> str:
    if len(ds.files) == 1:
        return ds.files[0].sha256
    return f"digest {ds.digest()}"


def _where_text(ds: Dataset) -> str:
    locs = locate(ds)
    full = [loc for loc in locs if loc.complete]
    if full:
        return "; ".join(f"{loc.label} ({loc.root})" for loc in full)
    if locs:
        return "partly: " + "; ".join(f"{loc.present}/{loc.total} files in {loc.label} ({loc.root})" for loc in locs)
    return "no"


def _cmd_list(args) -> int:
    all_ds = datasets()
    if args.json:
        out = []
        for ds in all_ds:
            out.append({"name": ds.name, "description": ds.description, "used_by": ds.used_by,
                        "optional": ds.optional, "sources": ds.sources(), "licence": ds.licence, "size": ds.size,
                        "sha256": ds.files[0].sha256 if len(ds.files) == 1 else None, "digest": ds.digest(),
                        "files": [{"path": f.path, "size": f.size, "sha256": f.sha256, "origin": f.origin()}
                                  for f in ds.files] if args.files else len(ds.files),
                        "present": [{"where": loc.label, "root": str(loc.root), "files": loc.present}
                                    for loc in locate(ds)]})
        print(json.dumps({"data_cache": str(data_cache_dir()), "datasets": out}, indent=1, ensure_ascii=False))
        return 0
    print(f"data cache: {data_cache_dir()} (override: ${DATA_CACHE_ENV} or --cache DIR)")
    print()
    print("| dataset | used by | source | licence | size | sha256 | here |")
    print("|---|---|---|---|---:|---|---|")
    for ds in all_ds:
        cells = [ds.name, used_by_text(ds), ", ".join(ds.sources()), ds.licence,
                 f"{_size(ds.size)}, {len(ds.files)} file{'s' if len(ds.files) > 1 else ''}", _sha_text(ds),
                 _where_text(ds)]
        print("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    print()
    print("sha256 of a dataset of several files: a digest of its files' paths and SHA-256s (--files lists each). "
          "Notes:")
    for ds in all_ds:
        if ds.notes:
            print(f"- {ds.name}: {ds.notes}")
    if args.files:
        for ds in all_ds:
            print()
            print(f"{ds.name}:")
            for f in ds.files:
                print(f"    {f.sha256}  {f.size:>10}  {f.path}  <- {f.origin()}")
    return 0


class _Bar:
    """A tqdm byte counter on stderr (none when tqdm is missing or progress is off)."""

    def __init__(self, total: int, desc: str, enabled: bool):
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            # disable=None: no bar when stderr is not a terminal (CI logs)
            self.bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                            leave=False, disable=None)

    def __call__(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _selected(args) -> list[Dataset] | None:
    if args.all and args.names:
        print("error: give dataset names or --all, not both", file=sys.stderr)
        return None
    if args.all:
        return list(datasets())
    if not args.names:
        print("error: name the datasets to fetch (`agentgym data list` shows them) or pass --all", file=sys.stderr)
        return None
    try:
        return [get_dataset(n) for n in dict.fromkeys(args.names)]
    except UnknownDatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def _cmd_fetch(args) -> int:
    chosen = _selected(args)
    if chosen is None:
        return 2
    mirror = args.mirror or os.environ.get(MIRROR_ENV) or None
    cache = data_cache_dir()
    print(f"fetching {len(chosen)} dataset{'s' if len(chosen) > 1 else ''} into {cache}"
          + (f" from the mirror {mirror}" if mirror else " from upstream"), file=sys.stderr)
    failed = 0
    for ds in chosen:
        bar = _Bar(ds.size, ds.name, not args.no_progress)
        try:
            result = fetch_dataset(ds, mirror=mirror, cache=cache, force=args.force, on_bytes=bar)
        except DataIntegrityError as e:
            bar.close()
            failed += 1
            print(f"error: {ds.name}: {e.path}: SHA-256 mismatch (from {e.where})\n  expected {e.expected}\n"
                  f"  got      {e.got}\n  nothing of {ds.name} was installed", file=sys.stderr)
            continue
        except AgentGymError as e:  # FetchError, MissingDependencyError (a derivation's extra), ...
            bar.close()
            failed += 1
            print(f"error: {ds.name}: {e}", file=sys.stderr)
            continue
        bar.close()
        verb = "installed" if result.installed else "already installed"
        print(f"{ds.name}: {verb} ({result.files} file{'s' if result.files > 1 else ''}, {_size(ds.size)}, "
              f"SHA-256 verified) in {result.where}")
    if failed:
        rest = "; the others are installed" if failed < len(chosen) else ""
        print(f"error: {failed} of {len(chosen)} datasets failed{rest}", file=sys.stderr)
        return 1
    return 0


def _cmd_verify(args) -> int:
    try:
        chosen = [get_dataset(n) for n in dict.fromkeys(args.names)] if args.names else list(datasets())
    except UnknownDatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = checked = 0
    for ds in chosen:
        locs = [loc for loc in locate(ds) if loc.complete or loc.label == "the data cache"]
        if not locs:
            print(f"{ds.name}: not installed")
            continue
        for loc in locs:
            checked += 1
            report = verify_dataset(ds, loc)
            if report.ok:
                files = f"{len(ds.files)} file{'s' if len(ds.files) > 1 else ''}"
                print(f"{ds.name}: ok ({files}, {_size(ds.size)}) in {loc.label} ({loc.root})")
                continue
            bad += 1
            print(f"{ds.name}: FAILED in {loc.label} ({loc.root})")
            for path in report.missing:
                print(f"  missing  {path}")
            for path, got in report.modified.items():
                expected = next(f.sha256 for f in ds.files if f.path == path)
                print(f"  changed  {path}: SHA-256 {got}, expected {expected}")
    if bad:
        print(f"error: {bad} of {checked} installed datasets failed verification; `agentgym data fetch --force "
              "NAME` reinstalls one", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentgym data", description=__doc__.split("\n\n")[0].strip() + " Datasets "
                                "install into the data cache; every file is checked against the SHA-256 the manifest "
                                "pins before it is installed.", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", metavar="DIR", help=f"the data cache for this command (default: ${DATA_CACHE_ENV}, "
                                                  "else $AGENTGYM_CACHE/data, else ~/.cache/agentgym/data)")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = sub.add_parser("list", help="every dataset: which env splits use it, source, licence, size, SHA-256, and "
                                     "whether and where it is here")
    ls.add_argument("--files", action="store_true", help="also list every file with its SHA-256 and origin")
    ls.add_argument("--json", action="store_true", help="print JSON instead of text")
    f = sub.add_parser("fetch", help="download, verify and install datasets into the data cache")
    f.add_argument("names", nargs="*", metavar="NAME", help="datasets to fetch (see `agentgym data list`)")
    f.add_argument("--all", action="store_true", help="fetch every dataset")
    f.add_argument("--mirror", metavar="URL|DIR", help=f"fetch from a mirror of the shared/data layout (default: "
                                                       f"${MIRROR_ENV}; unset: the upstream sources)")
    f.add_argument("--force", action="store_true", help="fetch again even if installed and verified")
    f.add_argument("--no-progress", action="store_true", help="no progress bar")
    v = sub.add_parser("verify", help="re-check the SHA-256 of every installed file")
    v.add_argument("names", nargs="*", metavar="NAME", help="datasets to check (default: every installed one)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cache:
        os.environ[DATA_CACHE_ENV] = str(Path(args.cache).expanduser().resolve())
    if args.action == "list":
        return _cmd_list(args)
    if args.action == "fetch":
        return _cmd_fetch(args)
    return _cmd_verify(args)


if __name__ == "__main__":
    sys.exit(main())
