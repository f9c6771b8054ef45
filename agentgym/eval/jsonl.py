"""The one reader of agentgym's JSONL files: results files, transcript side files, and what ``agentgym report`` reads.

The files are written by ``agentgym eval``, but a reader takes whatever is on disk: a torn last line from a killed
run, a file edited or produced by another tool, or one crafted to break the reader. So every line is read the same
careful way (:func:`read_jsonl`), and a line that cannot be used is *skipped with a warning that names the file and
the line and says why*, never a traceback:

* at most ``max_line_bytes`` bytes are read of a line (a longer one is skipped, read past without keeping it);
* the bytes must be UTF-8 and the text one JSON **object** (not a list, a string, ``null``...);
* integers of more than :data:`MAX_INT_DIGITS` digits are refused (Python's own limit is 4,300 digits, and without
  it reading one is quadratic), as are values nested past what ``json`` can read;
* no string or key may hold a lone surrogate (JSON's ``"\\ud800"``: no UTF-8 text can hold it, so writing it into a
  page or a dataset would fail later);
* ``check`` (the file kind's own rule: :func:`agentgym.eval.results.row_problem` for results rows) says what else a
  usable line needs.

Warnings are bounded: the first :data:`MAX_WARNINGS` skipped lines of a file are named one by one, the rest counted
in one closing line (:class:`SkipLog`). Lines come with their byte offset, so a reader can come back to one line
(``read_line_at``) instead of holding a whole file: transcripts are decoded one episode at a time this way.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterator

__all__ = ["read_jsonl", "read_line_at", "parse_line", "SkipLog", "JsonlLine", "MAX_INT_DIGITS", "MAX_WARNINGS",
           "DEFAULT_MAX_LINE_BYTES", "has_lone_surrogate", "loads_checked"]

logger = logging.getLogger(__name__)

#: The longest line read (a results row; a transcript line is allowed its own, larger, limit by its reader).
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
#: The most digits an integer of a results row or transcript may have (seeds and 63-bit hashes have 20).
MAX_INT_DIGITS = 1000
#: Skipped lines named one by one per file; the rest are counted.
MAX_WARNINGS = 20

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_READ = 1 << 20


@dataclass
class JsonlLine:
    """One usable line: its number (1-based), its byte offset in the file and its object."""

    number: int
    offset: int
    value: dict


@dataclass
class SkipLog:
    """The lines a reader skipped, per file: warns about the first :data:`MAX_WARNINGS` of each file and counts the
    rest (:meth:`close` logs the count); ``notes()`` says it in a sentence per file (for ``agentgym view``'s page)."""

    counts: dict[str, int] = field(default_factory=dict)

    def skip(self, path: str | os.PathLike, number: int, why: str, what: str = "line") -> None:
        key = str(path)
        n = self.counts[key] = self.counts.get(key, 0) + 1
        if n <= MAX_WARNINGS:
            logger.warning("%s:%d: %s skipped: %s", key, number, what, why)

    def close(self, path: str | os.PathLike) -> None:
        n = self.counts.get(str(path), 0)
        if n > MAX_WARNINGS:
            logger.warning("%s: %d lines skipped in all (the first %d named above)", path, n, MAX_WARNINGS)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def notes(self) -> list[str]:
        return [f"{path}: {n} unreadable or malformed line(s) skipped (the command's warnings name them)"
                for path, n in self.counts.items()]


def _parse_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS + 1:
        raise _TooLong(len(text.lstrip("-")))
    return int(text)


class _TooLong(ValueError):
    def __init__(self, digits: int):
        super().__init__(f"a number of {digits} digits (at most {MAX_INT_DIGITS} are read)")


def has_lone_surrogate(value: Any) -> bool:
    """Whether a string or key anywhere in ``value`` holds a lone surrogate (iterative: any depth)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def loads_checked(raw: bytes) -> tuple[Any, str | None]:
    """``raw`` (UTF-8 JSON) read by the rules of the module doc, but any JSON value: ``(value, None)``, or
    ``(None, why)``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})"
    try:
        value = json.loads(text, parse_int=_parse_int)
    except _TooLong as e:
        return None, str(e)
    except json.JSONDecodeError as e:
        return None, f"not JSON ({e.msg.removesuffix(' at')} at column {e.colno}: a torn or foreign line)"
    except ValueError as e:  # the interpreter's own digit limit, when set lower than ours
        return None, f"unreadable ({str(e)[:120]})"
    except RecursionError:
        return None, "nested too deep to read"
    if _SURROGATE_ESCAPE.search(raw) and has_lone_surrogate(value):
        return None, "a string holds a lone surrogate (\\ud800-\\udfff), which no UTF-8 text can hold"
    return value, None


def parse_line(raw: bytes, check: Callable[[dict], str | None] | None = None) -> tuple[dict | None, str | None]:
    """One line's bytes (newline included or not) -> ``(object, None)`` or ``(None, why it cannot be used)``."""
    value, why = loads_checked(raw)
    if why is not None:
        return None, why
    if not isinstance(value, dict):
        kind = "null" if value is None else {list: "a list", str: "a string", bool: "a boolean"}.get(
            type(value), "a number")
        return None, f"{kind}, not a JSON object"
    if check is not None:
        why = check(value)
        if why is not None:
            return None, why
    return value, None


def _read_bounded_line(fh: IO[bytes], limit: int) -> tuple[bytes | None, int]:
    """The next line (``None`` when longer than ``limit``: read past without keeping it) and the bytes consumed;
    ``(b"", 0)`` at the end of the file."""
    raw = fh.readline(limit + 1)
    if len(raw) <= limit or raw.endswith(b"\n"):
        return raw, len(raw)
    used = len(raw)
    while True:  # too long: skip to the end of the line in bounded chunks
        more = fh.readline(_READ)
        used += len(more)
        if not more or more.endswith(b"\n"):
            return None, used


def read_jsonl(path: str | os.PathLike, *, check: Callable[[dict], str | None] | None = None,
               max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, skipped: SkipLog | None = None,
               what: str = "line") -> Iterator[JsonlLine]:
    """The usable lines of ``path``, in order (see the module doc); the others are skipped with a warning (through
    ``skipped`` when given, which also keeps the counts). Blank lines are ignored silently. ``what`` names a line in
    the warnings ("results row", "transcript")."""
    log = skipped if skipped is not None else SkipLog()
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            offset, number = 0, 0
            while True:
                raw, used = _read_bounded_line(fh, max_line_bytes)
                if used == 0:
                    break
                number += 1
                start, offset = offset, offset + used
                if raw is None:
                    log.skip(path, number, f"longer than {max_line_bytes} bytes", what)
                    continue
                if not raw.strip():
                    continue
                value, why = parse_line(raw, check)
                if why is not None:
                    log.skip(path, number, why, what)
                    continue
                yield JsonlLine(number, start, value)
    finally:
        log.close(path)


def read_line_at(fh: IO[bytes], offset: int, max_line_bytes: int) -> bytes | None:
    """The line that starts at ``offset`` of an open file (``None`` when longer than ``max_line_bytes``)."""
    fh.seek(offset)
    raw, _ = _read_bounded_line(fh, max_line_bytes)
    return raw
