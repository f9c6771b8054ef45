"""WebShop-v0's pages and admissible clicks against the original ``web_agent_site`` on all 1,000 products.

The reference is princeton-nlp/WebShop at commit ``64fa2a5c15c7daa698b9ac93f5bb5437b634c9bd``: its page templates,
rendered and parsed as its text environment does (:mod:`webshop_original` says exactly what was taken and how it
runs). For every product of the staged catalogue this checks, against agentgym's :class:`ShopSession`:

* the options ``load_products`` derives from ``customization_options`` (group names, values, order);
* the item page's ``text`` observation and ``get_available_actions()`` (search bar and clickables, in order): the
  original's clickables are the keys of a dict, so a value repeated in an option group (B08G14B779, B099WH1RTM) is
  one click while the page text lists both labels;
* every option click: the chosen options as ``SimServer.item_page`` records them, and the page after the click;
* the Description, Features and Attributes sub-pages of every 4th product, Reviews of 10 (text and clickables);
* the results pages listing all 1,000 products (10 per page, first and later pages) and the search page.

Search ranking, goals and rewards have their own reference tests (tests/webshop). Cost: about 9 s of CPU (most of it
BeautifulSoup parsing about 2,500 pages).
"""

from __future__ import annotations

import json
import random

import pytest

# bs4 4.11 warns about findAll(text=...), which the original calls.
pytestmark = pytest.mark.filterwarnings("ignore:The 'text' argument:DeprecationWarning")
pytest.importorskip("bs4", reason="the original WebShop's HTML parsing needs beautifulsoup4 (pip install -e '.[test]')")
pytest.importorskip("jinja2", reason="rendering the original WebShop templates needs jinja2 (pip install -e '.[test]')")

import webshop_original as orig  # noqa: E402

from agentgym.envs.webshop.pages import SEP, ShopSession  # noqa: E402

INSTRUCTION = "i need a pink & light blue 26 inch rug, and price lower than 40.00 dollars"


@pytest.fixture(scope="module")
def products(shared_data):
    path = shared_data / "webshop" / "documents_1k.jsonl"
    if not path.exists():
        pytest.skip(f"WebShop's staged catalogue {path} is absent")
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line)["product"] for line in fh if line.strip()]


@pytest.fixture(scope="module")
def catalog(products):
    from agentgym.envs.webshop.catalog import load_catalog

    return load_catalog()


@pytest.fixture(scope="module")
def jenv():
    return orig.jinja_env()


def session(catalog, **state) -> ShopSession:
    s = ShopSession(catalog, INSTRUCTION, lambda q: [], random.Random(0))
    for k, v in state.items():
        setattr(s, k, v)
    return s


def original_page(jenv, template, **kwargs):
    html = orig.parse(orig.render(jenv, template, session_id="abc", instruction_text=INSTRUCTION, **kwargs))
    actions, text_to_clickable = orig.get_available_actions(html)
    return orig.convert_html_to_text(html), actions, text_to_clickable


def assert_same(ours: ShopSession, text, actions, where):
    assert ours.text() == text, where
    assert {"has_search_bar": ours.has_search_bar, "clickables": ours.clickables()} == actions, where


def test_vendored_templates_are_the_pinned_ones():
    import hashlib

    for name, blob in orig.TEMPLATE_BLOB_IDS.items():
        data = (orig.TEMPLATES / name).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, name


def test_options_as_load_products_builds_them(products, catalog):
    assert len(products) == 1000
    for p in products:
        options, option_to_image = orig.load_product_options(p)
        assert options == p["options"] and option_to_image == p["option_to_image"], p["asin"]
        assert {k: list(v) for k, v in catalog.by_asin[p["asin"]].options.items()} == options, p["asin"]


def test_item_pages_option_clicks_and_sub_pages(products, catalog, jenv):
    repeated = set()
    for i, p in enumerate(products):
        asin = p["asin"]
        kw = dict(product_info=p, keywords=["rug"], page=1, asin=asin, show_attrs=False)
        text, actions, text_to_clickable = original_page(jenv, "item_page.html", options={}, **kw)
        ours = session(catalog, page="item", asin=asin, keywords=["rug"], page_num=1)
        assert_same(ours, text, actions, asin)
        values = [v for vs in p["options"].values() for v in vs]
        if len(set(values)) < len(values):
            repeated.add(asin)
            assert len(ours.admissible_actions()) == len(set(ours.admissible_actions()))
            assert all(text.split(SEP).count(v) == values.count(v) for v in values)  # every label is on the page
        # Every option click, one after another, as SimServer.item_page records it (the chosen options change
        # only the page's script and URLs, so the re-rendered page is checked once, after the last click).
        chosen: dict = {}
        for value in dict.fromkeys(values):
            orig.click_option(chosen, value, text_to_clickable)
            result = ours.step(f"click[{value}]")
            assert result.valid and result.kind == "option" and ours.options == chosen, (asin, value)
        if chosen:
            text, actions, _ = original_page(jenv, "item_page.html", options=dict(chosen), **kw)
            assert_same(ours, text, actions, (asin, chosen))
        # The sub-pages, reached from the item page and back, on every 4th product (each page costs a parse;
        # reviews are empty throughout the catalogue, so a few suffice).
        assert not ours.step("click[attributes]").valid  # no Attributes button in the published setting
        for sub in ("description", "features", "reviews") if i % 4 == 0 else ():
            if sub == "reviews" and i >= 40:
                continue
            assert ours.step(f"click[{sub}]").valid
            text, actions, _ = original_page(jenv, orig.SUB_PAGE_TEMPLATES[sub], options=dict(chosen), **kw)
            assert_same(ours, text, actions, (asin, sub))
            assert ours.step("click[< prev]").valid and ours.page == "item" and ours.options == chosen
    assert repeated == {"B08G14B779", "B099WH1RTM"}


def test_attributes_button_and_page(products, catalog, jenv):
    """``show_attrs=True`` (off in every published setting): the item page's extra button on 100 products, the
    Attributes page of every 4th product."""
    for i, p in enumerate(products[::4]):
        asin = p["asin"]
        kw = dict(product_info=p, keywords=["rug"], page=1, asin=asin, options={})
        ours = session(catalog, page="item", asin=asin, keywords=["rug"], page_num=1, show_attrs=True)
        if i < 100:
            assert_same(ours, *original_page(jenv, "item_page.html", show_attrs=True, **kw)[:2], asin)
        assert ours.step("click[attributes]").valid
        assert_same(ours, *original_page(jenv, "attributes_page.html", **kw)[:2], (asin, "attributes"))


def test_results_pages_list_every_product(products, catalog, jenv):
    asins = [p["asin"] for p in products]
    by_asin = {p["asin"]: p for p in products}
    for start in range(0, len(asins), 50):  # 20 searches of 50 hits, 5 pages each
        hits = asins[start:start + 50]
        for page_num in range(1, 6):
            shown = [by_asin[a] for a in hits[(page_num - 1) * 10:page_num * 10]]
            text, actions, _ = original_page(jenv, "results_page.html", products=shown, keywords=["rug"],
                                             page=page_num, total=len(hits))
            ours = session(catalog, page="results", keywords=["rug"], page_num=page_num, hits=hits)
            assert_same(ours, text, actions, (start, page_num))


def test_search_page(catalog, jenv):
    text, actions, _ = original_page(jenv, "search_page.html")
    assert_same(session(catalog), text, actions, "search")
    assert actions == {"has_search_bar": True, "clickables": ["search"]}
