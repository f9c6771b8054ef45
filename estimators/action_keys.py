"""PACE action keys (spec 4.4 and 9).

* :func:`first_n`: a 64-bit digest of the first N = 8 response token ids.
* :func:`action_tag`: a digest of the body of the first well-formed ``<action>...</action>`` (normalized: strip,
  collapse whitespace, lowercase). A parse failure falls back to the ``first_n`` digest with a namespace bit set,
  so a fallback key can never equal a tag key.

Keys are non-negative int64: bit 63 is always clear; bit 62 is the fallback namespace bit (clear for tag keys
and for plain ``first_n`` keys).
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterable, Sequence

import numpy as np

__all__ = ["first_n", "action_tag", "action_keys", "parse_action", "FALLBACK_BIT"]

FALLBACK_BIT = 1 << 62
_MASK62 = (1 << 62) - 1
# a block whose body holds no further opening tag (so "<action>a <action>b</action>" yields "b")
_ACTION_RE = re.compile(r"<action>((?:(?!<action>).)*?)</action>", re.DOTALL | re.IGNORECASE)
_WS_RE = re.compile(r"\s+")


def _digest62(data: bytes, namespace: bytes) -> int:
    h = hashlib.blake2b(data, digest_size=8, person=namespace.ljust(16, b"\0")[:16]).digest()
    return int.from_bytes(h, "little") & _MASK62


def first_n(token_ids: Sequence[int] | np.ndarray, n: int = 8) -> int:
    """64-bit (62 significant bits) digest of the first ``n`` response token ids (spec 4.4 ``first_n``)."""
    ids = np.asarray(list(token_ids)[:n] if not isinstance(token_ids, np.ndarray) else token_ids[:n],
                     dtype="<i8")
    return _digest62(ids.tobytes(), b"agentgym.first_n")


def parse_action(text: str) -> str | None:
    """Body of the first well-formed ``<action>...</action>`` block, normalized (strip, collapse whitespace,
    lowercase); ``None`` when there is none. A block whose body is empty after stripping, or that contains
    another ``<action>`` opening tag, is not well-formed and the search moves on."""
    for m in _ACTION_RE.finditer(text):
        body = _WS_RE.sub(" ", m.group(1).strip()).lower()
        if body:
            return body
    return None


def action_tag(text: str, token_ids: Sequence[int] | np.ndarray | None = None, n: int = 8) -> tuple[int, bool]:
    """``(key, parsed)``: the tag-body digest, or on a parse failure the namespaced ``first_n`` digest.

    Without ``token_ids`` the fallback hashes the code points of the first ``n`` characters of the stripped text
    (our choice; the spec's fallback is on token ids, which the caller should pass when it has them).
    """
    body = parse_action(text)
    if body is not None:
        return _digest62(body.encode("utf-8"), b"agentgym.tag"), True
    ids = token_ids if token_ids is not None else [ord(c) for c in text.strip()[:n]]
    return first_n(ids, n) | FALLBACK_BIT, False


def action_keys(texts: Iterable[str] | None = None, token_ids: Iterable[Sequence[int]] | None = None,
                mode: str = "action_tag", n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Keys for many responses: ``(action_key int64 [N], action_parsed bool [N])`` (``mode``: action_tag or
    first_n). The parse rate is ``action_parsed.mean()`` (logged by BiPACE as ``action_tag_parse_rate``)."""
    if mode == "first_n":
        if token_ids is None:
            raise ValueError("first_n keys need token_ids")
        keys = [first_n(t, n) for t in token_ids]
        return np.asarray(keys, dtype=np.int64), np.zeros(len(keys), dtype=bool)
    if mode != "action_tag":
        raise ValueError(f"unknown action key mode {mode!r} (action_tag or first_n)")
    if texts is None:
        raise ValueError("action_tag keys need texts")
    texts = list(texts)
    toks = list(token_ids) if token_ids is not None else [None] * len(texts)
    if len(toks) != len(texts):
        raise ValueError("texts and token_ids differ in length")
    pairs = [action_tag(t, k, n) for t, k in zip(texts, toks)]
    keys = np.asarray([p[0] for p in pairs], dtype=np.int64)
    parsed = np.asarray([p[1] for p in pairs], dtype=bool)
    return keys, parsed
