"""WebShop's reward: all 6,000 reference cases exactly, and the fuzzy-matching quirks the spec documents."""

from __future__ import annotations

from agentgym.envs.webshop.reward import (COLOR_SET, RewardGoal, get_reward, normalize_color, option_matches,
                                          token_set_ratio)


def _goal(catalog, asin, attributes, goal_options, price_upper):
    gold = catalog.by_asin[asin]
    return RewardGoal(gold.title, gold.query, gold.product_category, tuple(attributes), goal_options, price_upper,
                      tuple(catalog.nouns[asin]))


def test_all_reference_reward_cases(catalog, reward_cases):
    assert len(reward_cases) == 6000
    wrong = []
    for c in reward_cases:
        goal = _goal(catalog, c["goal_asin"], c["goal_attributes"], c["goal_options"], c["price_upper"])
        product = catalog.by_asin[c["purchased_asin"]]
        total, info = get_reward(product, goal, c["price"], c["purchased_options"], catalog.nouns[product.asin])
        if total != c["reward"] or info != c["info"]:
            wrong.append((c["goal_index"], c["kind"], total, c["reward"]))
    assert wrong == [], f"{len(wrong)} cases differ, e.g. {wrong[:3]}"
    kinds = {c["kind"] for c in reward_cases}
    assert kinds == {"oracle", "gold_random_opts", "cand_goal_like_opts", "cand_random_opts"}


def test_token_set_ratio_thefuzz_semantics():
    assert token_set_ratio("machine wash", "Machine-Wash!") == 100
    assert token_set_ratio("", "x") == 0 and token_set_ratio(None, "x") == 0
    assert token_set_ratio("café", "caf") == 100  # U+0080-U+00FF characters are deleted
    # A tuple goal option enters as str(): the option name becomes a token.
    assert token_set_ratio("small", ("size", "x-small")) == 100
    assert token_set_ratio("black", ("color", "black1901")) <= 85


def test_normalize_color_and_option_quirks():
    assert COLOR_SET[0] == "alabaster" and len(COLOR_SET) == 102
    assert normalize_color("light blue") == "blue" and normalize_color("washed") == "ash"
    assert normalize_color(("color", "black")) == "black"
    assert normalize_color(("color", "black1901")) == ("color", "black1901")
    # Buying exactly `color: black1901` cannot match it (the cause of the 458 unattainable goals).
    assert option_matches(["black1901"], {"color": "black1901"}) == 0
    assert option_matches(["large"], {"size": "x-large"}) == 1
    assert option_matches(["navy blue"], {"color": "light blue"}) == 1
    assert option_matches(["medium"], ["medium", "navy"]) == 1  # human goals: plain strings


def test_type_factor_rules(catalog):
    p = catalog.products[0]
    goal = _goal(catalog, p.asin, ["solid wood"], {}, 1000.0)
    total, info = get_reward(p, goal, 100.0, {}, catalog.nouns[p.asin])
    assert info["r_type"] == 1.0 and total == 1.0 and "r_option" not in info
    # No shared nouns -> r_type 0 -> total 0 whatever else matches.
    total, info = get_reward(p, goal, 100.0, {}, [])
    assert info["title_score"] == 0 and info["r_type"] == 0.0 and total == 0.0
    # Over the price bound.
    total, info = get_reward(p, goal, 2000.0, {}, catalog.nouns[p.asin])
    assert info["r_price"] is False and total == 0.5
