"""Stable digests for observations and actions.

``obs_hash`` and ``action_key`` must be equal for equal text in any process, on any machine and in any run, so
they are computed with BLAKE2b over UTF-8 bytes, never with Python's salted ``hash()``. The digest is truncated to
63 bits so it fits a non-negative ``int64`` (the dtype of the ``obs_hash``/``action_key`` columns of
``estimators.TrajectoryBatch``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["stable_digest", "normalize_text", "obs_hash", "action_key", "ACTION_KEY_FALLBACK_TOKENS"]

_WS = re.compile(r"\s+")
_MASK63 = (1 << 63) - 1
#: When no action could be parsed, the action key is the digest of this many leading whitespace tokens.
ACTION_KEY_FALLBACK_TOKENS = 8


def normalize_text(text: str) -> str:
    """NFC-normalize, lower-case, and collapse runs of whitespace; strip the ends."""
    return _WS.sub(" ", unicodedata.normalize("NFC", text)).strip().lower()


def stable_digest(text: str, *, namespace: str = "") -> int:
    """A non-negative 63-bit integer digest of ``text`` (BLAKE2b-64, top bit cleared)."""
    h = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, person=namespace.encode()[:16])
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
