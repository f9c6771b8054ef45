"""Extracting the action from a raw model response.

Models answer with free text such as ``<think>...</think><action>get 2 oak logs</action>``. An environment names
the tag it reads (``action`` by default; ``search``, ``answer``, ``code`` or a tool-call tag elsewhere) and takes the
body of the *first well-formed* occurrence. Well-formed: an opening tag (any letter case) followed by its closing
tag with no other opening tag of the same name in between. So a tag is never read as nested: in
``<action>a<action>b</action>`` the first well-formed occurrence is the inner ``<action>b</action>`` (body ``b``); an
unclosed tag does not parse. Among several tag names the earliest occurrence wins. If that occurrence's body is
blank, nothing parses (a later occurrence is not tried). Parsing never raises: it returns a :class:`ParsedAction`
whose ``body`` is ``None`` and whose ``problem`` says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["ParsedAction", "parse_action", "parse_first_tag", "text_around_first_tag"]


@dataclass(frozen=True)
class ParsedAction:
    """The result of parsing one response.

    Attributes:
        tag: the tag that matched (e.g. ``"action"``), or None when none did.
        body: the stripped text between the tags, or None when nothing parsed.
        problem: a human-readable reason when nothing parsed, else None.
    """

    tag: str | None
    body: str | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.body is not None


@lru_cache(maxsize=64)
def _tag_regex(tag: str) -> re.Pattern[str]:
    t = re.escape(tag)
    # Non-greedy body; the body may not contain another opening tag of the same name (that would be nesting).
    return re.compile(rf"<{t}>((?:(?!<{t}>).)*?)</{t}>", re.DOTALL | re.IGNORECASE)


def parse_first_tag(response: str, tags: tuple[str, ...]) -> ParsedAction:
    """The first well-formed ``<tag>body</tag>`` among ``tags`` (earliest position wins; ties by tag order)."""
    if not isinstance(response, str):
        return ParsedAction(None, None, f"response must be str, got {type(response).__name__}")
    best: tuple[int, str, str] | None = None
    for tag in tags:
        m = _tag_regex(tag).search(response)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), tag, m.group(1))
    if best is None:
        names = ", ".join(f"<{t}>...</{t}>" for t in tags)
        return ParsedAction(None, None, f"no well-formed {names} found in the response")
    body = best[2].strip()
    if not body:
        return ParsedAction(best[1], None, f"the <{best[1]}> tag is empty")
    return ParsedAction(best[1], body)


def parse_action(response: str, tag: str = "action") -> ParsedAction:
    """The first well-formed ``<tag>...</tag>`` body of ``response``."""
    return parse_first_tag(response, (tag,))


def text_around_first_tag(response: str, tags: tuple[str, ...]) -> str:
    """``response`` without the occurrence :func:`parse_first_tag` reads (the reasoning and any other text around
    it), stripped; the whole response when no tag parses."""
    best = None
    for tag in tags:
        m = _tag_regex(tag).search(response)
        if m and (best is None or m.start() < best.start()):
            best = m
    if best is None:
        return response.strip()
    return (response[:best.start()].rstrip() + "\n" + response[best.end():].lstrip()).strip()
