"""Parsing, hashing and the text space."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentgym.hashing import action_key, normalize_text, obs_hash, stable_digest
from agentgym.parsing import parse_action, parse_first_tag
from agentgym.spaces import UnicodeText


def test_first_well_formed_tag_wins():
    p = parse_action("<think>hmm</think><action> get 1 oak logs </action><action>inventory</action>")
    assert p.ok and p.body == "get 1 oak logs" and p.tag == "action"


def test_unclosed_and_nested_tags_do_not_parse_as_nested():
    assert not parse_action("<action>get 1 x").ok
    p = parse_action("<action><action>inner</action>")
    assert p.body == "inner"  # the first *well-formed* occurrence is the inner one


def test_empty_tag_is_a_problem():
    p = parse_action("<action>   </action>")
    assert not p.ok and "empty" in p.problem


def test_earliest_of_several_tags():
    p = parse_first_tag("<answer>Paris</answer> <search>capital</search>", ("search", "answer"))
    assert (p.tag, p.body) == ("answer", "Paris")


def test_non_string_response():
    p = parse_action(None)  # type: ignore[arg-type]
    assert not p.ok and "str" in p.problem


def test_obs_hash_normalizes_whitespace_and_case():
    assert obs_hash("Got 2  oak\nLOGS ") == obs_hash("got 2 oak logs")
    assert obs_hash("got 2 oak logs") != obs_hash("got 3 oak logs")


def test_action_key_namespaces():
    assert action_key("inventory", "") != action_key(None, "inventory")
    assert action_key(None, "a b c d e f g h i j") == action_key(None, "a b c d e f g h zzz")


@given(st.text())
def test_digests_are_63_bit(s):
    for d in (stable_digest(s), obs_hash(s), action_key(s, s), action_key(None, s)):
        assert 0 <= d < 2**63
    assert normalize_text(normalize_text(s)) == normalize_text(s)


@given(st.text(max_size=200))
def test_unicode_text_contains_any_string(s):
    assert UnicodeText().contains(s)


def test_unicode_text_rejects_non_strings_and_bounds():
    assert not UnicodeText().contains(3)
    assert not UnicodeText(max_length=3).contains("abcd")
    assert UnicodeText().contains(UnicodeText(seed=0).sample())
