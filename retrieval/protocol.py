"""The ``/retrieve`` wire protocol: parsing and validating request bodies, and shaping answers (no HTTP here).

Requests (Search-R1's, verl's and verl-agent's clients all send one of these):

* ``{"queries": [str, ...], "topk": int, "return_scores": bool}`` -- Search-R1's ``QueryRequest``; ``topk`` and
  ``return_scores`` are optional (``ServerConfig.default_topk``, false). An empty ``queries`` list is answered
  ``{"result": []}`` (Search-R1's server does the same), not an error.
* ``{"query": str, "topk": int, "return_scores": bool}`` -- verl-agent's search tool (one query, singular key);
  answered like ``{"queries": [query]}``: ``{"result": [[...]]}``, the shape its client reads.

Unknown keys are ignored, as pydantic ignores them in Search-R1's server.

Answers: ``{"result": [row, ...]}``, one row per query in order: documents ``{"id", "title", "text", "contents"}``
(``contents`` is wiki-18's ``"Title"\\ntext``), or with ``return_scores`` ``{"document": {...}, "score": float}``.
A query that cannot be searched (an empty string can: it is an ordinary search) -- not encodable as UTF-8 (a lone
surrogate from a broken tokenizer decode), longer than ``max_query_chars``, or one the index itself fails on -- gets
an empty row, and the reason goes to ``"errors": [{"index": i, "error": why}, ...]`` (present only when not
empty). Such a query never fails another query or another request.

Errors of the whole request are :class:`ProtocolError` with an HTTP status: 400 when the body is not JSON we accept
(not UTF-8, not JSON, nested deeper than ``max_json_depth``, a number longer than :data:`MAX_NUMBER_CHARS`
characters, ``NaN``/``Infinity``), 422 when it is JSON but not a request (wrong types, ``topk`` out of range, more
than ``max_queries`` queries, more than ``max_results`` results asked for: queries x topk), 413 when it holds more
JSON tokens than a request of ``max_queries`` queries needs (checked before parsing).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import BadRequestError
from .types import Hit

__all__ = ["ProtocolError", "SearchRequest", "ProtocolLimits", "decode_json_body", "json_depth", "json_shape",
           "JsonShape", "parse_search_request", "query_problem", "hits_to_json", "MAX_NUMBER_CHARS"]

#: Longest number literal accepted (characters): int64 has 19 digits; a 5,000-digit ``topk`` is refused before
#: Python converts it.
MAX_NUMBER_CHARS = 32


class ProtocolLimits(Protocol):
    """The :class:`~retrieval.server.ServerConfig` fields the protocol reads."""

    default_topk: int
    max_topk: int
    max_queries: int
    max_results: int
    max_query_chars: int
    max_json_depth: int


class ProtocolError(BadRequestError):
    """The request as a whole is rejected; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class SearchRequest:
    """A parsed ``/retrieve`` body. ``errors`` maps the index of each query that cannot be searched to why."""

    queries: list[str]
    topk: int
    return_scores: bool = False
    singular: bool = False
    errors: dict[int, str] = field(default_factory=dict)

    def searchable(self) -> list[int]:
        """Indices of the queries to search."""
        return [i for i in range(len(self.queries)) if i not in self.errors]


# The scanner of a body's nesting and size: a small state machine over the bytes, in place (no copy, no array per
# byte). Outside strings it jumps from one structural byte to the next and takes a whole run of opening brackets,
# closing brackets or commas in one step; a string is skipped with memchr-speed finds (its closing quote, and any
# backslash before it), and only where escapes are is a regex walked through them (escape by escape, in C), so
# brackets and quotes inside strings never count. Each step is one *token* (a string or a run), and the loop stops
# as soon as a limit is passed: its Python-level cost is bounded by the limits, not by the body's size. Every regex
# and find looks at most _SLICE bytes per call, so no single call holds the GIL for long (the server scans big
# bodies in a worker thread while its event loop keeps answering).
_SLICE = 1 << 18  # at least 2: an escape (two bytes) always fits in one
_STRUCTURAL = re.compile(rb'["\[\]{},]')
_THROUGH_ESCAPES = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.DOTALL)  # stops at a quote that ends the string
_RUNS = {91: re.compile(rb'[\[{]++'), 123: re.compile(rb'[\[{]++'), 93: re.compile(rb'[\]}]++'),
         125: re.compile(rb'[\]}]++'), 44: re.compile(rb',++')}


def _string_end(raw: bytes | bytearray, pos: int, n: int) -> int:
    """The index just past the closing quote of the string whose contents start at ``pos`` (``n`` if it is not
    closed)."""
    while pos < n:
        end = min(n, pos + _SLICE)
        quote = raw.find(b'"', pos, end)
        backslash = raw.find(b"\\", pos, end if quote < 0 else quote)
        if backslash < 0:
            if quote >= 0:
                return quote + 1
            pos = end
            continue
        stop = _THROUGH_ESCAPES.match(raw, backslash, end).end()
        if stop < end and raw[stop] == 34:  # an unescaped quote: the end of the string
            return stop + 1
        if stop == backslash and backslash == n - 1:  # a backslash as the last byte: nothing left to escape
            return n
        pos = stop  # the slice ended, or cut an escape in two: the next one starts there (and holds the escape)
    return n


@dataclass(frozen=True)
class JsonShape:
    """What :func:`json_shape` found: ``depth`` (the deepest nesting of ``[``/``{``), ``tokens`` (strings, and runs
    of opening brackets, closing brackets or commas, outside strings: a list of n strings has about 2n) and
    ``complete`` (False when the scan stopped at a limit: both are then lower bounds)."""

    depth: int
    tokens: int
    complete: bool


def json_shape(raw: bytes | bytearray, max_depth: int | None = None,
               max_tokens: int | None = None) -> JsonShape:
    """The nesting and token count of a JSON text, scanned in place in O(1) memory (see the comment above). Stops
    at the end of the first run of brackets that takes the depth past ``max_depth`` (so the depth of a plain run
    such as ``[[[[`` is exact), or at the first token past ``max_tokens``. Meant for valid JSON; on invalid JSON it
    returns some shape, and the parser rejects the text anyway."""
    depth = deepest = tokens = 0
    pos, n = 0, len(raw)
    search = _STRUCTURAL.search
    while pos < n:
        m = search(raw, pos, min(n, pos + _SLICE))
        if m is None:
            pos = min(n, pos + _SLICE)
            continue
        pos = m.start()
        c = raw[pos]
        tokens += 1
        if c == 34:  # a string: skip it whole, closing quote included
            pos = _string_end(raw, pos + 1, n)
        else:
            end = _RUNS[c].match(raw, pos, min(n, pos + _SLICE)).end()  # a longer run is taken in slices
            if c == 91 or c == 123:  # [ {
                depth += end - pos
                deepest = max(deepest, depth)
            elif c != 44:  # ] }
                depth -= end - pos
            pos = end
        if (max_depth is not None and deepest > max_depth) or (max_tokens is not None and tokens > max_tokens):
            return JsonShape(deepest, tokens, False)
    return JsonShape(deepest, tokens, True)


def json_depth(raw: bytes | bytearray) -> int:
    """Deepest nesting of ``[``/``{`` outside strings in a JSON text (a backslash escapes the next byte), in linear
    time, O(1) memory and without recursion (:func:`json_shape` without limits)."""
    return json_shape(raw).depth


class _Numbers:
    """``json.loads`` hooks that refuse a number literal over ``max_chars`` characters before Python converts it
    (``int()`` of a 5,000-digit literal raises ValueError past Python's digit limit, and is slow below it)."""

    def __init__(self, max_chars: int, what: str, finite: bool):
        self.max_chars, self.what, self.finite = max_chars, what, finite

    def _check(self, s: str) -> str:
        if len(s) > self.max_chars:
            raise ProtocolError(f"a number in {self.what} has {len(s)} characters; at most {self.max_chars} are "
                                "accepted", 400)
        return s

    def parse_int(self, s: str) -> int:
        return int(self._check(s))

    def parse_float(self, s: str) -> float:
        value = float(self._check(s))
        if self.finite and math.isinf(value):  # 1e999: JSON has no infinity
            raise ProtocolError(f"a number in {self.what} is out of range: {s}", 400)
        return value


def _parse_constant(s: str):
    raise ProtocolError(f"{s} is not JSON", 400)


def decode_json_body(raw: bytes | bytearray, max_depth: int, *, max_number_chars: int = MAX_NUMBER_CHARS,
                     what: str = "the body", finite: bool = False, max_tokens: int | None = None,
                     tokens_hint: str = "") -> Any:
    """The JSON value of ``raw`` (a request body, or a WebSocket frame: ``what`` names it in messages), or
    :class:`ProtocolError` saying why not: 400 when it is not UTF-8, not JSON, nested deeper than ``max_depth``, has
    a number longer than ``max_number_chars`` or ``NaN``/``Infinity`` (and with ``finite`` a literal such as
    ``1e999`` that overflows to infinity; without it, the caller's range checks see ``inf``); 413 when it holds more
    than ``max_tokens`` JSON tokens (see :class:`JsonShape`; ``tokens_hint`` is added to that message). The shape is
    checked before anything is decoded or parsed, in O(1) memory (:func:`json_shape`), so a body the limits refuse
    costs no copy and no Python objects; never recurses on the input's nesting."""
    if max_tokens is not None or raw.count(b"[") + raw.count(b"{") > max_depth:  # else it cannot nest too deep
        shape = json_shape(raw, max_depth, max_tokens)
        if shape.depth > max_depth:
            more = "" if shape.complete else " or more"
            raise ProtocolError(f"{what} is nested {shape.depth} levels deep{more}; at most {max_depth} are "
                                "accepted", 400)
        if max_tokens is not None and shape.tokens > max_tokens:
            raise ProtocolError(f"{what} holds more than {max_tokens} JSON tokens (strings, runs of brackets or "
                                f"commas){tokens_hint}", 413)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"{what} is not valid UTF-8: {e}", 400) from None
    numbers = _Numbers(max_number_chars, what, finite)
    try:
        return json.loads(text, parse_int=numbers.parse_int, parse_float=numbers.parse_float,
                          parse_constant=_parse_constant)
    except ProtocolError:
        raise
    except json.JSONDecodeError as e:
        raise ProtocolError(f"{what} is not valid JSON: {e}", 400) from None
    except (ValueError, RecursionError) as e:  # a backstop: the checks above should have caught these
        raise ProtocolError(f"{what} is not JSON this server accepts: {type(e).__name__}: {e}", 400) from None


def query_problem(query: str, max_chars: int) -> str | None:
    """Why ``query`` cannot be searched, or None. An empty or blank query can (Search-R1 searches it)."""
    if len(query) > max_chars:
        return f"the query is too long: {len(query)} > {max_chars} characters"
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"the query is not valid Unicode text ({e.reason} at character {e.start}; a lone surrogate?)"
    return None


def parse_search_request(body: Any, limits: ProtocolLimits) -> SearchRequest:
    """Validate a decoded ``/retrieve`` body (see the module docstring); :class:`ProtocolError` (422) if it is not
    a request."""
    if not isinstance(body, dict):
        raise ProtocolError("the body must be a JSON object with 'queries' (a list of strings) or 'query' (a string)")
    has_many, has_one = "queries" in body, "query" in body
    if has_many and has_one:
        raise ProtocolError("give 'queries' (a list) or 'query' (one string), not both")
    if not has_many and not has_one:
        raise ProtocolError("the body needs 'queries' (a list of strings) or 'query' (a string)")
    if has_one:
        if not isinstance(body["query"], str):
            raise ProtocolError("'query' must be a string")
        queries = [body["query"]]
    else:
        queries = body["queries"]
        if not isinstance(queries, list):
            raise ProtocolError("'queries' must be a list of strings")
        if len(queries) > limits.max_queries:
            raise ProtocolError(f"too many queries: {len(queries)} > {limits.max_queries} per request")
        for i, q in enumerate(queries):
            if not isinstance(q, str):
                raise ProtocolError(f"queries[{i}] is not a string")
    topk = body.get("topk")
    if topk is None:
        topk = limits.default_topk
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise ProtocolError("'topk' must be an integer")
    if not 1 <= topk <= limits.max_topk:
        raise ProtocolError(f"'topk' must be in [1, {limits.max_topk}], got {topk}")
    if len(queries) * topk > limits.max_results:
        raise ProtocolError(f"the request asks for {len(queries) * topk} results ({len(queries)} queries x topk "
                            f"{topk}); at most {limits.max_results} are answered per request (--max-results): send "
                            "fewer queries per request or a smaller topk")
    return_scores = body.get("return_scores")
    if return_scores is None:
        return_scores = False
    if not isinstance(return_scores, bool):
        raise ProtocolError("'return_scores' must be true or false")
    errors = {}
    for i, q in enumerate(queries):
        why = query_problem(q, limits.max_query_chars)
        if why is not None:
            errors[i] = why
    return SearchRequest(queries, topk, return_scores, has_one, errors)


def hits_to_json(rows: list[list[Hit]], return_scores: bool) -> list:
    """Result rows in Search-R1's shapes (see the module docstring)."""
    if return_scores:
        return [[{"document": h.to_document(), "score": h.score} for h in row] for row in rows]
    return [[h.to_document() for h in row] for row in rows]
