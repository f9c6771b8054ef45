"""The oracle: buy the goal's product with the goal's options, through the pages like an agent.

Plan, re-derived from the current page at every step (so it recovers from any state):

1. Pick a query whose top 50 contain the gold product: the goal instruction itself if it finds it, else the
   product title, else ``<q> <scrape query>`` (every product scraped with that query).
2. From the search page, search it; on a results page, page forward/back to the gold product and click it; on any
   other product or page, go back.
3. On the gold item page, click each goal option value not chosen yet (synthetic goals: ``name: value`` pairs;
   human goals: the listed strings that are option values of the product), then Buy Now.

Buying the gold product with its goal options scores 1.0 except where WebShop's option matching cannot (spec §4.3,
458 of 6,910 synthetic goals); :func:`ceiling_reward` gives that ceiling for a goal.
"""

from __future__ import annotations

from typing import Callable

from .catalog import Catalog
from .goals import WebShopGoal, session_prices
from .pages import RESULTS_PER_PAGE, ShopSession
from .reward import RewardGoal, get_reward

__all__ = ["oracle_query", "oracle_command", "goal_option_values", "ceiling_reward"]


def ceiling_reward(goal: WebShopGoal, catalog: Catalog, prices: dict[str, float] | None = None) -> float:
    """The reward of buying the gold product with exactly the goal options at its session price (``prices``,
    default: those of the goal's seed): the best any policy can score on ``goal`` (1.0 for 6,452 of the 6,910
    synthetic goals)."""
    if prices is None:
        prices = session_prices(catalog, goal.seed)
    gold = catalog.by_asin[goal.asin]
    rgoal = RewardGoal(name=gold.title, query=gold.query, product_category=gold.product_category,
                       attributes=goal.attributes, goal_options=goal.goal_options, price_upper=goal.price_upper,
                       nouns=tuple(catalog.nouns[gold.asin]))
    if isinstance(goal.goal_options, dict):
        options = dict(goal.goal_options)
    else:  # human goals: the listed values that are options of the product, each in its (last) group
        options = {}
        for value in goal_option_values(goal, catalog):
            options[[g for g, vs in gold.options.items() if value in vs][-1]] = value
    return get_reward(gold, rgoal, prices.get(gold.asin, 100.0), options, catalog.nouns[gold.asin])[0]


def oracle_query(goal: WebShopGoal, catalog: Catalog, search_fn: Callable[[str], list[str]]) -> str:
    """A query whose results contain the gold product (see the module docstring)."""
    product = catalog.by_asin[goal.asin]
    for q in (goal.instruction.lower(), product.title.lower()):
        if goal.asin in search_fn(" ".join(q.split())):
            return " ".join(q.split())
    return f"<q> {product.query}"


def goal_option_values(goal: WebShopGoal, catalog: Catalog) -> list[str]:
    """The option values the oracle clicks, in order."""
    if isinstance(goal.goal_options, dict):
        return list(goal.goal_options.values())
    values = {v for vs in catalog.by_asin[goal.asin].options.values() for v in vs}
    return [v for v in goal.goal_options if v in values]


def oracle_command(session: ShopSession, goal: WebShopGoal, query: str) -> str:
    """The oracle's next WebShop command for the session's current page."""
    gold = goal.asin
    page = session.page
    if page == "search":
        return f"search[{query}]"
    if page == "results":
        if gold in session.hits:
            pos = session.hits.index(gold)
            want = pos // RESULTS_PER_PAGE + 1
            if want == session.page_num:
                return f"click[{gold.lower()}]"
            return "click[next >]" if want > session.page_num else "click[< prev]"
        return "click[back to search]"
    if page == "item":
        if session.asin != gold:
            return "click[< prev]"
        chosen = set(session.options.values())
        for value in goal_option_values(goal, session.catalog):
            if value not in chosen:
                return f"click[{value}]"
        return "click[buy now]"
    if page == "done":
        return "click[buy now]"  # nothing left to do; the env has ended the episode
    return "click[< prev]"  # a sub-page: back to the item
