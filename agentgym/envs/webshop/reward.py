"""WebShop's purchase reward (``web_agent_site/engine/goal.py::get_reward``), exactly.

``total = r_type * (n_attr + n_opt + r_price) / (|attributes| + |goal_options| + 1)``

* ``r_type`` (type factor): 1.0, lowered to 0.5 when neither the scrape query, >= 2 shared category levels nor a
  title-noun overlap > 0.2 agrees, to 0.1 when the overlap is < 0.1 and to 0.0 when it is 0 (later rules win).
  The title nouns are spaCy NOUN/PROPN tokens of the product names; both names always come from the fixed
  catalogue, so a precomputed table (:attr:`~.catalog.Catalog.nouns`) replaces spaCy exactly.
* ``n_attr``: goal attributes matched by a purchased attribute with ``token_set_ratio > 85``, or contained in the
  title, bullet points or description.
* ``n_opt``: goal options matched (``token_set_ratio > 85``) by some chosen value after :func:`normalize_color`.
  Synthetic goals pass ``(name, value)`` tuples here, so the option name becomes a token and a value that only
  *contains* a colour word (``black1901``) can never match; 458 of the 6,910 synthetic goals cannot reach 1.0.
* ``r_price``: price <= the goal's upper bound.

:func:`token_set_ratio` is thefuzz 0.19.0's (WebShop's pin) with its difflib ``ratio``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Sequence

__all__ = ["COLOR_SET", "normalize_color", "token_set_ratio", "full_process", "RewardGoal", "get_reward",
           "type_reward", "attribute_matches", "option_matches"]

COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass",
    "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow",
    "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow",
)

_NON_WORD = re.compile(r"(?ui)\W")
_LATIN1 = dict.fromkeys(range(128, 256))  # thefuzz's force_ascii deletes U+0080-U+00FF only


def normalize_color(value: Any) -> Any:
    """The first COLOR_SET word that is *in* ``value`` (substring for a str, element for a tuple), else ``value``."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def full_process(s: Any) -> str:
    """thefuzz 0.19.0 ``full_process(s, force_ascii=True)``: str(), drop U+0080-U+00FF, non-word -> space,
    lower-case, strip."""
    s = str(s).translate(_LATIN1)
    return _NON_WORD.sub(" ", s).lower().strip()


def _ratio(a: str, b: str) -> int:
    # thefuzz's decorators: equal strings score 100 (even empty ones), then an empty one scores 0.
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))


@lru_cache(maxsize=500_000)
def _token_set_processed(p1: str, p2: str) -> int:
    if not p1 or not p2:
        return 0
    t1, t2 = set(p1.split()), set(p2.split())
    sect = " ".join(sorted(t1 & t2))
    a = (sect + " " + " ".join(sorted(t1 - t2))).strip()
    b = (sect + " " + " ".join(sorted(t2 - t1))).strip()
    sect = sect.strip()
    return max(_ratio(sect, a), _ratio(sect, b), _ratio(a, b))


def token_set_ratio(s1: Any, s2: Any) -> int:
    """thefuzz 0.19.0 ``fuzz.token_set_ratio`` (difflib backend); None on either side scores 0."""
    if s1 is None or s2 is None:
        return 0
    return _token_set_processed(full_process(s1), full_process(s2))


@dataclass(frozen=True)
class RewardGoal:
    """The goal fields the reward reads (the gold product's name, query and category, plus the targets)."""

    name: str
    query: str
    product_category: str
    attributes: tuple[str, ...]
    goal_options: Any  # dict name -> value (synthetic goals) or a list of value strings (human goals)
    price_upper: float
    nouns: tuple[str, ...]


def type_reward(purchased_query: str, purchased_category: str, purchased_nouns: Sequence[str],
                goal: RewardGoal) -> dict[str, Any]:
    query_match = purchased_query == goal.query
    pc = {x.strip() for x in purchased_category.split("›")}
    gc = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(pc & gc) >= 2
    desired = list(goal.nouns)
    title_score = 0.2 if not desired else len(set(purchased_nouns) & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def attribute_matches(purchased_attributes: Iterable[str], title: str, bullet_points: Sequence[str],
                      description: str, goal_attributes: Sequence[str]) -> int:
    p_attrs = list(purchased_attributes)
    title_l, bullets_l, desc_l = title.lower(), " ".join(bullet_points).lower(), description.lower()
    n = 0
    for g in goal_attributes:
        if any(token_set_ratio(p, g) > 85 for p in p_attrs):
            n += 1
        elif g in title_l or g in bullets_l or g in desc_l:
            n += 1
    return n


def option_matches(purchased_values: Iterable[Any], goal_options: Any) -> int:
    purchased = [normalize_color(v) for v in purchased_values]
    items = list(goal_options.items()) if isinstance(goal_options, dict) else list(goal_options)
    goals = [normalize_color(g) for g in items]
    return sum(1 for g in goals if any(token_set_ratio(p, g) > 85 for p in purchased))


def get_reward(product, goal: RewardGoal, price: float, options: dict[str, str],
               purchased_nouns: Sequence[str]) -> tuple[float, dict[str, Any]]:
    """(total reward, WebShop's verbose breakdown) for buying ``product`` (a :class:`~.catalog.Product`) with the
    chosen ``options`` (group -> value) at ``price``."""
    t = type_reward(product.query, product.product_category, purchased_nouns, goal)
    r_price = price <= goal.price_upper
    n_att = attribute_matches(product.attributes, product.title, product.bullet_points, product.description,
                              goal.attributes)
    n_goal_opts = len(goal.goal_options)
    n_opt = option_matches(options.values(), goal.goal_options) if n_goal_opts else 0
    denom = len(goal.attributes) + n_goal_opts + 1
    total = (n_att + n_opt + r_price) / denom * t["r_type"]
    info: dict[str, Any] = {"r_type": t["r_type"], "r_att": n_att / len(goal.attributes),
                            "w_att": len(goal.attributes) / denom, "query_match": t["query_match"],
                            "category_match": t["category_match"], "title_score": t["title_score"]}
    if n_goal_opts:
        info["r_option"] = n_opt / n_goal_opts
        info["w_option"] = n_goal_opts / denom
    info["r_price"] = r_price
    info["w_price"] = 1 / denom
    return total, info
