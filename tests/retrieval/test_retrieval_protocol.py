"""The /retrieve wire protocol without HTTP: JSON nesting scanned in linear time, number and query checks."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval.protocol import (MAX_NUMBER_CHARS, ProtocolError, decode_json_body, json_depth, parse_search_request,
                                query_problem)
from retrieval.server import ServerConfig

_text = st.text(alphabet=st.sampled_from(list('ab"\\[]{}\u00e9 ,:')), max_size=12)
_json = st.recursive(st.none() | st.booleans() | st.integers() | _text,
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
                     max_leaves=30)


def _depth(v) -> int:
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    return 0


@given(_json, st.booleans())
def test_json_depth_matches_the_parsed_value(value, ascii_only):
    """Brackets, quotes and backslashes inside strings never count; whitespace and ensure_ascii do not matter."""
    text = json.dumps(value, ensure_ascii=ascii_only, indent=1 if ascii_only else None)
    assert json_depth(text.encode("utf-8")) == _depth(value)


def test_decode_json_body_bounds():
    assert decode_json_body(b'{"queries": [["a"]]}', 3) == {"queries": [["a"]]}
    with pytest.raises(ProtocolError, match="nested 4 levels") as e:
        decode_json_body(b'{"queries": [[["a"]]]}', 3)
    assert e.value.status == 400
    with pytest.raises(ProtocolError, match="characters"):
        decode_json_body(b'{"topk": ' + b"1" * (MAX_NUMBER_CHARS + 1) + b"}", 16)
    assert decode_json_body(b'{"topk": ' + b"1" * MAX_NUMBER_CHARS + b"}", 16)["topk"] == int("1" * MAX_NUMBER_CHARS)
    for bad in (b'{"a": NaN}', b'{"a": -Infinity}', b"\xef\xbb\xbf{}", b"{", b"\xc3\x28"):
        with pytest.raises(ProtocolError) as e:
            decode_json_body(bad, 16)
        assert e.value.status == 400


def test_parse_search_request():
    cfg = ServerConfig(max_queries=3, max_query_chars=10)
    r = parse_search_request({"queries": ["a", "", "\ud800", "x" * 11][:3], "topk": None}, cfg)
    assert (r.queries, r.topk, r.return_scores, r.singular) == (["a", "", "\ud800"], 3, False, False)
    assert set(r.errors) == {2} and r.searchable() == [0, 1]
    r = parse_search_request({"query": "x" * 11, "return_scores": True, "extra": [1]}, cfg)
    assert r.singular and r.return_scores and set(r.errors) == {0} and "too long" in r.errors[0]
    assert parse_search_request({"queries": []}, cfg).queries == []
    with pytest.raises(ProtocolError, match="too many"):
        parse_search_request({"queries": ["a"] * 4}, cfg)
    assert query_problem("", 5) is None and query_problem("  ", 5) is None


@given(_json, st.booleans(), st.integers(min_value=2, max_value=7))
def test_json_shape_is_the_same_in_tiny_slices(value, ascii_only, slice_bytes):
    """The scanner looks at most ``_SLICE`` bytes per regex or find call; slices of a few bytes cut strings, escape
    runs and bracket runs anywhere, and the depth is still exact."""
    import retrieval.protocol as protocol

    text = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
    saved = protocol._SLICE
    protocol._SLICE = slice_bytes
    try:
        assert json_depth(text) == _depth(value)
    finally:
        protocol._SLICE = saved


def test_json_shape_stops_at_its_limits_and_copies_nothing():
    from retrieval.protocol import json_shape

    assert json_shape(b'{"queries": ["a", "b[{", "c\\"]"], "topk": 3}') == json_shape(
        bytearray(b'{"queries": ["a", "b[{", "c\\"]"], "topk": 3}'))
    shape = json_shape(b'{"queries": ["a", "b[{", "c\\"]"], "topk": 3}')
    assert (shape.depth, shape.complete) == (2, True) and shape.tokens == 12  # { q [ a , b , c ] , topk }
    shape = json_shape(b"[" * 1000 + b"]" * 1000, max_depth=16)
    assert (shape.depth, shape.complete) == (1000, False)  # a run is taken whole: the depth of a plain run is exact
    shape = json_shape(b"[" + b'"a",' * 100_000 + b'"a"]', max_tokens=50)
    assert shape.tokens == 51 and not shape.complete
    assert json_shape(b'["unterminated \\', 16, 50) == json_shape(b'["unterminated \\')  # no endless loop
    assert json_shape(b'"\\\\"]]]').depth == 0  # an escaped backslash does not escape the quote after it


def test_decode_json_body_refuses_too_many_tokens_before_parsing():
    many = b'{"queries": [' + b'"a",' * 99 + b'"a"]}'
    assert len(decode_json_body(many, 16, max_tokens=210)["queries"]) == 100
    with pytest.raises(ProtocolError, match=r"more than 150 JSON tokens .*; at most 70 queries") as e:
        decode_json_body(many, 16, max_tokens=150, tokens_hint="; at most 70 queries")
    assert e.value.status == 413
    with pytest.raises(ProtocolError, match="nested 17 levels deep or more"):
        decode_json_body(b"[" * 17 + b" [", 16)


def test_results_per_request_are_capped():
    cfg = ServerConfig(max_queries=100, max_topk=50, max_results=200)
    assert parse_search_request({"queries": ["a"] * 4, "topk": 50}, cfg).topk == 50
    with pytest.raises(ProtocolError, match=r"asks for 250 results \(5 queries x topk 50\); at most 200") as e:
        parse_search_request({"queries": ["a"] * 5, "topk": 50}, cfg)
    assert e.value.status == 422 and "--max-results" in str(e.value)
    assert parse_search_request({"queries": [], "topk": 50}, cfg).queries == []
