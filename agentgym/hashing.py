"""Stable digests for observations and actions.

``obs_hash`` and ``action_key`` must be equal for equal text in any process, on any machine and in any run, so
they are computed with BLAKE2b over UTF-8 bytes, never with Python's salted ``hash()``. The digest is truncated to
63 bits so it fits a non-negative ``int64`` (the dtype of the ``obs_hash``/``action_key`` columns of
``estimators.TrajectoryBatch``).
"""

from __future__ import annotations

import hashlib
import unicodedata

__all__ = ["stable_digest", "normalize_text", "obs_hash", "action_key", "ACTION_KEY_FALLBACK_TOKENS"]

_MASK63 = (1 << 63) - 1
#: When no action could be parsed, the action key is the digest of this many leading whitespace tokens.
ACTION_KEY_FALLBACK_TOKENS = 8


def normalize_text(text: str) -> str:
    """NFC-normalize, lower-case, and collapse runs of whitespace; strip the ends."""
    if not text.isascii():  # NFC is the identity on ASCII; skip it on the hot path
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split()).lower()


_HASHERS: dict[str, "hashlib._Hash"] = {}


def stable_digest(text: str, *, namespace: str = "") -> int:
    """A non-negative 63-bit integer digest of ``text`` (BLAKE2b-64 personalised with ``namespace``, top bit
    cleared)."""
    base = _HASHERS.get(namespace)
    if base is None:
        base = _HASHERS[namespace] = hashlib.blake2b(digest_size=8, person=namespace.encode()[:16])
    h = base.copy()  # copying a keyed state is cheaper than building one
    h.update(text.encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "big") & _MASK63


def obs_hash(observation: str) -> int:
    """Digest of the normalized current observation (no history)."""
    return stable_digest(normalize_text(observation), namespace="obs")


def action_key(parsed_action: str | None, raw_response: str) -> int:
    """Digest of the parsed action, or of the first tokens of the raw response when nothing parsed.

    The two cases live in different namespaces, so an unparsed response never collides with a parsed action of
    the same text.
    """
    if parsed_action is not None:
        return stable_digest(normalize_text(parsed_action), namespace="act")
    head = " ".join(raw_response.split()[:ACTION_KEY_FALLBACK_TOKENS])
    return stable_digest(normalize_text(head), namespace="raw")
