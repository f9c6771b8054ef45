"""A gymnasium text space that accepts any unicode text.

``gymnasium.spaces.Text`` checks every character against a charset (alphanumerics by default), so a real
observation with punctuation or a model response with ``<action>`` tags is "not in the space" and ``check_env``
fails. :class:`UnicodeText` keeps ``Text``'s length bounds but accepts any ``str``; ``sample()`` draws from a
charset that includes punctuation, whitespace and a few non-ASCII characters so fuzzing exercises them.
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium.spaces import Text

__all__ = ["UnicodeText", "SAMPLE_CHARSET"]

SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n\t" + "éßλ中文→😀"


class UnicodeText(Text):
    """Any ``str`` with ``min_length <= len <= max_length``."""

    def __init__(self, max_length: int = 1 << 20, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length=max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnicodeText) and (self.min_length, self.max_length) == (
            other.min_length, other.max_length)
