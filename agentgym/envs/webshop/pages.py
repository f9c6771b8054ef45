"""WebShop's page state machine and its ``text`` observations (spec §2-§3), without Flask or HTML.

Pages: ``search`` (the index), ``results`` (10 hits per page of the top-50), ``item`` (a product with its option
buttons), the sub-pages ``description`` / ``features`` / ``reviews`` / ``attributes``, and ``done`` after Buy Now.
Actions are ``search[query]`` and ``click[button]`` parsed as WebShop does (``(.+)\\[(.+)\\]`` matched at the start,
both groups greedy, the argument lower-cased). Invalid actions change nothing. A search is accepted on every page
(the original's behaviour), although only the search page lists it as admissible.

Observations are WebShop's ``text`` mode: the visible text segments of the rendered page joined by ``" [SEP] "``
(:meth:`ShopSession.text`); :func:`verl_agent_view` gives the quoted form verl-agent shows its models.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .catalog import Catalog, Product
from .search import QueryTooLongError

__all__ = ["ShopSession", "StepResult", "parse_webshop_action", "verl_agent_view", "admissible_list", "SEP",
           "RESULTS_PER_PAGE", "SEARCH_RETURN_N", "SEARCH_PLACEHOLDER"]

SEP = " [SEP] "
RESULTS_PER_PAGE = 10
SEARCH_RETURN_N = 50
SEARCH_PLACEHOLDER = "search[<your query>]"
_ACTION = re.compile(r"(.+)\[(.+)\]")
_SUB_PAGES = ("description", "features", "reviews", "attributes")


def parse_webshop_action(action: str) -> tuple[str, str | None]:
    """WebShop's ``parse_action``: (name, lower-cased argument), or (action, None) when it does not match."""
    m = _ACTION.match(action)
    if m is None:
        return action, None
    return m.group(1), m.group(2).lower()


def _node(text: str) -> list[str]:
    """The segment(s) a template text node yields: none for an empty node or whitespace with a newline, an empty
    segment for other ASCII whitespace, else the stripped text."""
    if text == "":
        return []
    if text.strip(" \t\n\r\f\v") == "":
        return [] if "\n" in text else [""]
    return [text.strip()]


def verl_agent_view(text: str) -> str:
    """verl-agent's observation: the segments after the instruction, each in single quotes, joined by [SEP]
    (the raw text when there is no ``Instruction:`` segment, as on the done page)."""
    segs = text.split(SEP)
    try:
        k = segs.index("Instruction:")
    except ValueError:
        return text
    return SEP.join(f"'{s}'" for s in segs[k + 2:])


def admissible_list(has_search_bar: bool, clickables: Sequence[str]) -> list[str]:
    """verl-agent's admissible actions: the search placeholder where there is a search bar, then every click."""
    return ([SEARCH_PLACEHOLDER] if has_search_bar else []) + [f"click[{c}]" for c in clickables]


@dataclass
class StepResult:
    """What one action did: ``valid`` False for a no-op (with ``reason``); ``bought`` after Buy Now."""

    valid: bool
    reason: str | None = None
    bought: bool = False
    kind: str = ""


@dataclass
class ShopSession:
    """One shopping session: the page state of WebShop's SimServer for one instruction.

    Args:
        catalog: the products.
        instruction: the goal text shown on every page.
        search_fn: query string -> ranked asins (the BM25 engine's top 50).
        rng: the session's generator for ``<r>`` random searches.
        show_attrs: whether item pages have an Attributes button (off in every published setting).
        shortcuts: accept WebShop's ``<r>`` / ``<c> category`` / ``<q> query`` searches (``<a>`` is always refused:
            it crashes the original).
    """

    catalog: Catalog
    instruction: str
    search_fn: Callable[[str], list[str]]
    rng: random.Random
    show_attrs: bool = False
    shortcuts: bool = True
    page: str = "search"
    keywords: list[str] | None = None
    page_num: int = 1
    asin: str | None = None
    asins: set = field(default_factory=set)
    options: dict = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)

    # ---- search ---------------------------------------------------------------------------------------------
    def _run_search(self, keywords: list[str]) -> list[str] | str:
        """The ranked asins for ``keywords`` (WebShop ``get_top_n_product_from_keywords``), or a refusal reason."""
        first = keywords[0]
        if first == "<a>":
            return "attribute searches (<a>) are not supported (they crash the original WebShop)"
        if self.shortcuts and first == "<r>":
            return [p.asin for p in self.rng.sample(self.catalog.products, k=SEARCH_RETURN_N)]
        if self.shortcuts and first == "<c>":
            if len(keywords) < 2:
                return "a category search needs a category: <c> beauty"
            category = keywords[1].strip()
            return [p.asin for p in self.catalog.products if p.category == category]
        if self.shortcuts and first == "<q>":
            query = " ".join(keywords[1:]).strip()
            return [p.asin for p in self.catalog.products if p.query == query]
        try:
            ranked = self.search_fn(" ".join(keywords))
        except QueryTooLongError as e:  # the original crashes; here it is the agent's invalid action
            return str(e)
        return [a for a in ranked if a in self.catalog.by_asin]

    def _show_results(self, keywords: list[str], page_num: int) -> StepResult:
        hits = self._run_search(keywords)
        if isinstance(hits, str):
            return StepResult(False, hits)
        # Every results render clears the product and its options (the original re-searches each time).
        self.page, self.keywords, self.page_num, self.hits = "results", keywords, page_num, hits
        self.asin, self.options = None, {}
        return StepResult(True, kind="results")

    # ---- what is on the page --------------------------------------------------------------------------------
    @property
    def product(self) -> Product | None:
        return self.catalog.by_asin.get(self.asin) if self.asin else None

    def page_asins(self) -> list[str]:
        lo = (self.page_num - 1) * RESULTS_PER_PAGE
        return self.hits[lo:lo + RESULTS_PER_PAGE] if lo >= 0 else []

    @property
    def has_search_bar(self) -> bool:
        return self.page == "search"

    def clickables(self) -> list[str]:
        """WebShop's ``get_available_actions()["clickables"]``: the keys of its ``text_to_clickable`` dict, built from
        the page's buttons and product links (lower-cased text) and then its option radios (values). Being dict
        keys, each text appears once, where it first appeared: a value repeated in an option group (products
        B08G14B779, B099WH1RTM) or across groups is one click, and the page text still lists every label."""
        if self.page == "search":
            return ["search"]
        if self.page == "results":
            keys = (["back to search"] + (["< prev"] if self.page_num > 1 else []) + ["next >"]
                    + [a.lower() for a in self.page_asins()])
        elif self.page == "item":
            keys = ["back to search", "< prev", "description", "features", "reviews"]
            keys += ["attributes"] if self.show_attrs else []
            keys.append("buy now")
            for values in self.product.options.values():
                keys.extend(values)
        elif self.page in _SUB_PAGES:
            keys = ["back to search", "< prev"]
        else:
            keys = []
        return list(dict.fromkeys(keys))

    def admissible_actions(self) -> list[str]:
        return admissible_list(self.has_search_bar, self.clickables())

    def text(self, reward: float | None = None) -> str:
        """WebShop's ``text`` observation of the current page."""
        head = ["Instruction:", self.instruction]
        nav = ["Back to Search", "< Prev"]
        if self.page == "search":
            segs = ["WebShop", *head, "Search"]
        elif self.page == "results":
            segs = [*head, "Back to Search", f"Page {self.page_num} (Total results: {len(self.hits)})"]
            if self.page_num > 1:
                segs.append("< Prev")
            segs.append("Next >")
            for a in self.page_asins():
                p = self.catalog.by_asin[a]
                segs += [a.upper(), *_node(p.title), p.price_text]
        elif self.page == "item":
            p = self.product
            segs = [*head, *nav]
            for name, values in p.options.items():
                segs.append(name)
                segs.extend(values)
            segs += [*_node(p.title), f"Price: {p.price_text}", "Rating: N.A.", "Description", "Features",
                     "Reviews"]
            if self.show_attrs:
                segs.append("Attributes")
            segs.append("Buy Now")
        elif self.page == "description":
            segs = [*head, *nav, *_node(self.product.description)]
        elif self.page == "features":
            segs = [*head, *nav]
            for bullet in self.product.bullet_points:
                segs += _node(" " + bullet)
        elif self.page == "reviews":
            segs = [*head, *nav]
        elif self.page == "attributes":
            p = self.product
            segs = [*head, *nav]
            for attribute in p.attributes:  # the template puts a space before each, as on the Features page
                segs += _node(" " + attribute)
            for text in (p.category, p.query, p.product_category):
                segs += _node(text)
        else:  # done: informational only; the original page lists more "None" fields between attrs and the score
            # (spec §3.1 elides them), which no wrapper reads: verl-agent resets and AgentGym stops at Buy Now.
            segs = ["Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
                    "Purchased", "asin", (self.asin or "").upper(), "options", json.dumps(self.options), "attrs",
                    "None", "Your score (min 0.0, max 1.0)", str(reward), "Reward Details", "None"]
        return SEP.join(segs)

    # ---- actions --------------------------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        """Apply one raw action string (already lower-cased where the caller wants that)."""
        if self.page == "done":
            return StepResult(False, "the purchase is complete")
        name, arg = parse_webshop_action(action)
        if arg is None:
            return StepResult(False, f"{action[:60]!r} is not search[...] or click[...]")
        if name == "search":
            return self._show_results(arg.split(" "), 1)
        if name != "click":
            return StepResult(False, f"unknown action {name[:40]!r}: use search[...] or click[...]")
        if arg == "search" or arg not in self.clickables():
            return StepResult(False, f"{arg[:60]!r} is not a button on this page")
        return self._click(arg)

    def _click(self, arg: str) -> StepResult:
        if arg == "back to search":
            self.page, self.keywords, self.page_num, self.hits = "search", None, 1, []
            self.asin, self.asins, self.options = None, set(), {}
            return StepResult(True, kind="back")
        if self.page == "results":
            if arg == "next >":
                return self._show_results(self.keywords, self.page_num + 1)
            if arg == "< prev":
                return self._show_results(self.keywords, self.page_num - 1)
            self.page, self.asin = "item", arg.upper()
            self.asins.add(self.asin)
            return StepResult(True, kind="item")
        if self.page == "item":
            if arg == "< prev":
                return self._show_results(self.keywords, self.page_num)
            if arg in _SUB_PAGES:
                self.page = arg
                return StepResult(True, kind="sub")
            if arg == "buy now":
                self.page = "done"
                return StepResult(True, bought=True, kind="buy")
            groups = [g for g, values in self.product.options.items() if arg in values]
            self.options[groups[-1]] = arg  # a value in two groups sets the later one, as in WebShop
            return StepResult(True, kind="option")
        # a sub-page: only "< prev" is left
        self.page = "item"
        return StepResult(True, kind="item")
