"""WebShop-v0's pages and clicks against the original WebShop code on all 1,000 products, and on perturbed episodes.

The reference is princeton-nlp/WebShop at ``64fa2a5c`` run from ``shared/reference`` (:mod:`upstream` loads it; no
copy is kept here): ``load_products`` builds the products, a real ``SimServer`` serves them through its ``receive``
routing with the real templates rendered by Flask, and a real ``WebAgentTextEnv`` (``observation_mode="text"``)
parses each page with BeautifulSoup 4.11.1 (WebShop's pin) into its ``text`` observation and
``get_available_actions()``. Its search engine is a stand-in for pyserini (a JVM and a Lucene index) answering with
agentgym's BM25 ranking, which tests/webshop checks equal to Anserini's on 2,838 queries. Against it, agentgym's
:class:`ShopSession`:

* ``load_products`` rebuilds the staged catalogue from the items file's fields (title, description, bullets, price,
  options and their images, attributes, human instructions), and agentgym's catalogue has the same options;
* every category listed by WebShop's ``<c>`` search, every results page of it (10 per page, first and later pages,
  covering all 1,000 products): text and clickables;
* every product's item page reached from those results: text and ``get_available_actions()`` (search bar and
  clickables, in order): the original's clickables are the keys of a dict, so a value repeated in an option group
  (B08G14B779, B099WH1RTM) is one click while the page text lists both labels;
* every option click, through ``SimServer.receive``: the chosen options as the server records them, and the page
  after the last click;
* the Description, Features and Attributes sub-pages of every 4th product, Reviews of 10, and back (text and
  clickables; the options survive);
* the Attributes button (``show_attrs``, off in every published setting) on 100 products and the Attributes page of
  every 4th;
* perturbed episodes: 12 seeded episodes of up to 40 steps of the real text env's ``step`` in lockstep with
  ``ShopSession.step``, on actions an agent gets wrong as well as right: clicks in other letter case, buttons that
  are not on the page, ``click[search]``, searches from every page (BM25, ``<c>`` and ``<q>``), empty and malformed
  actions, paging past the last results page, Buy Now: every observation, every clickable list and the end.

Search ranking, goals and rewards have their own reference tests (tests/webshop). Cost: about 30 s of CPU, most of it
Flask rendering and BeautifulSoup parsing some 7,000 pages.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import upstream
from agentgym.envs.webshop.pages import SEP, ShopSession

# bs4 4.11 warns about findAll(text=...), which the original calls.
pytestmark = pytest.mark.filterwarnings("ignore:The 'text' argument:DeprecationWarning")

INSTRUCTION = "i need a pink & light blue 26 inch rug, and price lower than 40.00 dollars"
#: git blob ids of the upstream files at 64fa2a5c that this test runs
BLOBS = {
    "engine/engine.py": "2e5eee3f5fcd96a4acd7defbeef4bef966324e4b",
    "engine/goal.py": "09ad26819db8b90ec09be24fa542c2fd387e725d",
    "utils.py": "f1d7447678ab1d663b6a55fbeac701f37ecef129",
    "envs/web_agent_text_env.py": "9c8d27bea504e4a619e116060d0c08c49f843893",
    "templates/search_page.html": "f834614a4f66e9bc830e94d91c992ca0189d6905",
    "templates/results_page.html": "03373f57a95f2da4528f39ddd2175c8bf0b485d3",
    "templates/item_page.html": "a4b4bb3f758d76545d0e66829620be7f0886503a",
    "templates/description_page.html": "5fd598e613abee0f3940e79c016dc9fbfa9cd4f7",
    "templates/features_page.html": "4baab1047c07be55f98b8598f02226d3fd2275b1",
    "templates/review_page.html": "805842909c2edb1ffc8db54ed1258bc62415c981",
    "templates/attributes_page.html": "68ec6b98edbf1880dc13e5b9b30f4c657f21cfc2",
    "templates/done_page.html": "4803dc89764961be11de208c0ad4de6281aca89e",
}
#: the items file's fields load_products reads (the staged products keep them as they were)
RAW_FIELDS = ("asin", "category", "query", "product_category", "name", "full_description", "small_description",
              "customization_options", "images")
#: the fields load_products derives, compared with the staged products
DERIVED_FIELDS = ("Title", "Description", "BulletPoints", "Price", "pricing", "options", "option_to_image",
                  "Attributes", "MainImage", "query", "Reviews", "Rating")


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
def search(catalog):
    from agentgym.envs.webshop.env import get_engine

    return get_engine(catalog).search


@pytest.fixture(scope="module")
def webshop(search):
    return upstream.load_webshop(search)


@pytest.fixture(scope="module")
def items_files(products, shared_data, tmp_path_factory):
    """WebShop's input files for load_products: the items (each product's raw fields; its price as the "$..." string
    load_products parses, which is the staged Price text), the instruction attributes (staged) and the human
    instructions (of the 13 products that have them)."""
    d = tmp_path_factory.mktemp("webshop_items")
    raw = [{**{k: p[k] for k in RAW_FIELDS}, "pricing": p["Price"]} for p in products]
    (d / "items.json").write_text(json.dumps(raw))
    (d / "human.json").write_text(json.dumps({p["asin"]: p["instructions"] for p in products if "instructions" in p}))
    return {"items": d / "items.json", "attrs": shared_data / "webshop" / "items_ins_v2_1000.json",
            "human": d / "human.json"}


@pytest.fixture(scope="module")
def server(webshop, items_files):
    """A real SimServer over the 1,000 products, with synthetic goals (it seeds the global random module: the state
    is put back)."""
    webshop.engine.DEFAULT_ATTR_PATH = str(items_files["attrs"])
    webshop.engine.HUMAN_ATTR_PATH = str(items_files["human"])
    with upstream.keep_global_random():
        return webshop.text_env.SimServer("http://127.0.0.1:3000", str(items_files["items"]), None, -1, None, False,
                                          False)


@pytest.fixture
def text_env(webshop, server):
    """The real text env on the shared server, reset to goal 0 (reset draws its session name from ``random``)."""
    with upstream.keep_global_random():
        env = webshop.text_env.WebAgentTextEnv(observation_mode="text", server=server)
        env.reset(session=0)
    server.show_attrs = False
    return env


def ours(catalog, search, instruction=INSTRUCTION, show_attrs=False, seed=0) -> ShopSession:
    return ShopSession(catalog, instruction, search, random.Random(seed), show_attrs=show_attrs)


def instruction_of(server, env) -> str:
    """The goal's instruction the server shows on every page of the env's session."""
    return server.user_sessions[env.session]["goal"]["instruction_text"]


def page_of(env) -> tuple[str, dict]:
    """The real env's ``text`` observation and ``get_available_actions()`` of its current page (one parse each)."""
    return env.observation, env.get_available_actions()


def assert_same(session: ShopSession, env, where) -> None:
    text, actions = page_of(env)
    assert session.text() == text, where
    assert {"has_search_bar": session.has_search_bar, "clickables": session.clickables()} == actions, where


def click(env, name: str) -> None:
    """A click through the real browser and server (``SimBrowser.click`` -> ``SimServer.receive``) on the page whose
    clickables ``env.text_to_clickable`` holds (set by the last ``get_available_actions()``)."""
    env.browser.click(name, env.text_to_clickable)


def test_the_reference_is_webshops_own():
    root = upstream.require("webshop/web_agent_site") / "webshop" / "web_agent_site"
    for name, blob in BLOBS.items():
        assert upstream.git_blob_id(root / name) == blob, f"{root / name} is not WebShop's file at 64fa2a5c"


def test_load_products_rebuilds_the_staged_catalogue(webshop, items_files, products, catalog):
    webshop.engine.DEFAULT_ATTR_PATH = str(items_files["attrs"])
    webshop.engine.HUMAN_ATTR_PATH = str(items_files["human"])
    with upstream.keep_global_random():  # generate_product_prices draws ranged prices from random
        built, by_asin, _, _ = webshop.engine.load_products(str(items_files["items"]), human_goals=True)
    assert [p["asin"] for p in built] == [p["asin"] for p in products] and len(built) == 1000
    for mine, staged in zip(built, products):
        asin = staged["asin"]
        for field in DERIVED_FIELDS:
            assert mine[field] == staged[field], (asin, field)
        assert mine.get("instructions") == staged.get("instructions"), asin
        assert {k: list(v) for k, v in catalog.by_asin[asin].options.items()} == mine["options"], asin
    assert [p.asin for p in catalog.products] == [p["asin"] for p in built]  # the <c>/<q> listings' order


def test_search_page_results_item_pages_option_clicks_and_sub_pages(catalog, search, server, text_env, products):
    env = text_env
    session = ours(catalog, search, instruction_of(server, env))
    assert_same(session, env, "search page")
    assert env.get_available_actions() == {"has_search_bar": True, "clickables": ["search"]}
    repeated, seen, results_pages = set(), [], 0
    for category in sorted({p["category"] for p in products}):
        env.browser.search(["<c>", category])
        assert session.step(f"search[<c> {category}]").valid
        while True:
            results_pages += 1
            assert_same(session, env, (category, session.page_num))
            listed = session.page_asins()
            if not listed:
                break
            results_clickables = dict(env.text_to_clickable)
            for asin in listed:
                i = len(seen)
                seen.append(asin)
                env.text_to_clickable = results_clickables
                click(env, asin.lower())
                assert session.step(f"click[{asin.lower()}]").valid
                assert_same(session, env, asin)
                item_clickables = dict(env.text_to_clickable)
                p = catalog.by_asin[asin]
                values = [v for vs in p.options.values() for v in vs]
                if len(set(values)) < len(values):
                    repeated.add(asin)
                    assert len(session.admissible_actions()) == len(set(session.admissible_actions()))
                    assert all(session.text().split(SEP).count(v) == values.count(v) for v in values)
                # Every option click, one after another, as SimServer.receive records it (the chosen options change
                # only the page's script and URLs, so the page is compared once, after the last click).
                for value in dict.fromkeys(values):
                    click(env, value)
                    assert session.step(f"click[{value}]").valid and session.page == "item"
                    assert server.user_sessions[env.session]["options"] == session.options, (asin, value)
                if values:
                    assert_same(session, env, (asin, session.options))
                    item_clickables = dict(env.text_to_clickable)
                assert "attributes" not in item_clickables and not session.step("click[attributes]").valid
                # The sub-pages, reached from the item page and back, on every 4th product (reviews are empty
                # throughout the catalogue, so ten suffice).
                for sub in ("description", "features", "reviews") if i % 4 == 0 else ():
                    if sub == "reviews" and i >= 40:
                        continue
                    env.text_to_clickable = item_clickables
                    click(env, sub)
                    assert session.step(f"click[{sub}]").valid
                    assert_same(session, env, (asin, sub))
                    click(env, "< prev")
                    assert session.step("click[< prev]").valid and session.page == "item"
                    assert server.user_sessions[env.session]["options"] == session.options
                env.text_to_clickable = item_clickables
                click(env, "< prev")
                assert session.step("click[< prev]").valid and session.page == "results"
            env.text_to_clickable = results_clickables
            click(env, "next >")
            assert session.step("click[next >]").valid
    assert sorted(seen) == sorted(p["asin"] for p in products)
    assert repeated == {"B08G14B779", "B099WH1RTM"} and results_pages >= 100


def test_attributes_button_and_page(catalog, search, server, text_env, products):
    """``show_attrs=True`` (off in every published setting): the item page's extra button on 100 products, the
    Attributes page of every 4th."""
    env = text_env
    server.show_attrs = True
    try:
        for i, p in enumerate(products[:400]):
            if i % 4 and i >= 100:
                continue
            session = ours(catalog, search, instruction_of(server, env), show_attrs=True)
            env.browser.search(["<q>", *p["query"].split(" ")])
            assert session.step(f"search[<q> {p['query']}]").valid
            while p["asin"] not in session.page_asins():
                env.get_available_actions()
                click(env, "next >")
                assert session.step("click[next >]").valid
            env.get_available_actions()
            click(env, p["asin"].lower())
            assert session.step(f"click[{p['asin'].lower()}]").valid
            assert_same(session, env, p["asin"])
            if i % 4 == 0:
                click(env, "attributes")
                assert session.step("click[attributes]").valid
                assert_same(session, env, (p["asin"], "attributes"))
    finally:
        server.show_attrs = False


# ---- perturbed episodes: the real text env's step() in lockstep --------------------------------------------------
def perturbed_action(rng: np.random.Generator, clickables: list[str], instruction: str, categories: list[str],
                     queries: list[str]) -> str:
    """One action of a sloppy agent: mostly listed clicks, often in another letter case; searches from any page;
    buttons that are not there; malformed and empty actions. Buy Now only when drawn among the clicks."""
    words = instruction.split()
    r = rng.random()
    if clickables == ["search"] and r < 0.62:  # the search page's one button is not clickable: search instead
        r = 0.62
    if r < 0.50 and clickables:
        return f"click[{clickables[rng.integers(len(clickables))]}]"
    if r < 0.62 and clickables:
        c = clickables[rng.integers(len(clickables))]
        return f"click[{c.upper() if rng.random() < 0.5 else c.title()}]"
    if r < 0.72:
        k = int(rng.integers(1, 5))
        return "search[" + " ".join(words[int(j)] for j in rng.integers(len(words), size=k)) + "]"
    if r < 0.75:
        return f"search[<c> {categories[rng.integers(len(categories))]}]"
    if r < 0.80:
        return f"search[<q> {queries[rng.integers(len(queries))]}]"
    return ["click[search]", "click[next >]", "click[< prev]", "click[back to search]", "click[no such button]",
            "click[ back to search]", "search[]", "click[]", "buy now", "", "Search[rug]", "click[buy now",
            "CLICK[back to search]", "search[[nested] words]"][rng.integers(14)]


@pytest.mark.parametrize("episode", range(12))
def test_perturbed_episodes_step_for_step(catalog, search, server, webshop, products, episode):
    rng = np.random.default_rng([20261129, episode])
    with upstream.keep_global_random():
        env = webshop.text_env.WebAgentTextEnv(observation_mode="text", server=server)
        env.reset(session=int(rng.integers(len(server.goals))))
    session = ours(catalog, search, instruction_of(server, env))
    categories = sorted({p["category"] for p in products})
    queries = sorted({p["query"] for p in products})
    assert_same(session, env, "reset")
    for step in range(40):
        clickables = env.get_available_actions()["clickables"]
        action = perturbed_action(rng, clickables, session.instruction, categories, queries)
        if step == 39 and "buy now" in clickables:
            action = "click[Buy Now]"  # an episode that reached an item page ends with a purchase
        with upstream.keep_global_random():
            state, _, done, _ = env.step(action)
        result = session.step(action)
        assert done == result.bought, (episode, step, action)
        if done:
            assert session.page == "done"
            break
        assert state == session.text(), (episode, step, action)
        assert_same(session, env, (episode, step, action))
