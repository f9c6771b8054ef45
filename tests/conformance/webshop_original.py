"""The original WebShop's page and option logic, as the conformance test runs it.

Source: princeton-nlp/WebShop at commit ``64fa2a5c15c7daa698b9ac93f5bb5437b634c9bd`` (MIT licence:
``webshop_original/LICENSE``). WebShop is not on PyPI, so what the text environment needs is taken from that commit:

* ``webshop_original/*.html``: the page templates of ``web_agent_site/templates/``, verbatim (their git blob ids are
  pinned in :data:`TEMPLATE_BLOB_IDS` and checked by the test);
* the functions below, copied from ``web_agent_site/envs/web_agent_text_env.py`` (``tag_visible``,
  ``WebAgentTextEnv.convert_html_to_text`` in ``simple`` mode, ``WebAgentTextEnv.get_available_actions``, the option
  update of ``SimServer.item_page``) and ``web_agent_site/engine/engine.py`` (the option block of
  ``load_products``), with ``self`` replaced by arguments and nothing else changed, except that a page is parsed once
  (:func:`parse`, the original's ``_parse_html``) and handed to both functions, which each parse it themselves there.

Rendering: ``map_action_to_html`` renders a template with Flask's ``render_template_string``, which autoescapes; here a
Jinja2 environment with ``autoescape=True`` and a ``url_for`` that returns a placeholder path does the same (URLs only
reach ``href``/``action``/``data-url`` attributes and the script, none of which the text mode or the clickables read).
Parsing: BeautifulSoup 4.11.1 with ``html.parser``, WebShop's pinned version (``requirements.txt``).
"""

from __future__ import annotations

from pathlib import Path

COMMIT = "64fa2a5c15c7daa698b9ac93f5bb5437b634c9bd"
TEMPLATES = Path(__file__).with_name("webshop_original")
#: git blob ids of web_agent_site/templates/<name> at COMMIT.
TEMPLATE_BLOB_IDS = {
    "search_page.html": "f834614a4f66e9bc830e94d91c992ca0189d6905",
    "results_page.html": "03373f57a95f2da4528f39ddd2175c8bf0b485d3",
    "item_page.html": "a4b4bb3f758d76545d0e66829620be7f0886503a",
    "description_page.html": "5fd598e613abee0f3940e79c016dc9fbfa9cd4f7",
    "features_page.html": "4baab1047c07be55f98b8598f02226d3fd2275b1",
    "review_page.html": "805842909c2edb1ffc8db54ed1258bc62415c981",
    "attributes_page.html": "68ec6b98edbf1880dc13e5b9b30f4c657f21cfc2",
}
# engine.py: ACTION_TO_TEMPLATE
SUB_PAGE_TEMPLATES = {"description": "description_page.html", "features": "features_page.html",
                      "reviews": "review_page.html", "attributes": "attributes_page.html"}


def jinja_env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True)
    env.globals["url_for"] = lambda endpoint, **kwargs: f"/{endpoint}"
    return env


def render(env, template: str, **kwargs) -> str:
    return env.get_template(template).render(**kwargs)


# ---- engine.py, load_products (the option block) ------------------------------------------------------------------
def load_product_options(p: dict) -> tuple[dict, dict]:
    options = dict()
    customization_options = p['customization_options']
    option_to_image = dict()
    if customization_options:
        for option_name, option_contents in customization_options.items():
            if option_contents is None:
                continue
            option_name = option_name.lower()

            option_values = []
            for option_content in option_contents:
                option_value = option_content['value'].strip().replace('/', ' | ').lower()
                option_image = option_content.get('image', None)

                option_values.append(option_value)
                option_to_image[option_value] = option_image
            options[option_name] = option_values
    return options, option_to_image


# ---- web_agent_text_env.py --------------------------------------------------------------------------------------
def parse(html):
    """``WebAgentTextEnv._parse_html``."""
    from bs4 import BeautifulSoup

    html_obj = BeautifulSoup(html, 'html.parser')
    return html_obj


def tag_visible(element):
    from bs4.element import Comment

    ignore = {'style', 'script', 'head', 'title', 'meta', '[document]'}
    return (
        element.parent.name not in ignore and not isinstance(element, Comment)
    )


def convert_html_to_text(html_obj):
    """``WebAgentTextEnv.convert_html_to_text(html, simple=True)``: the ``text`` observation."""
    texts = html_obj.findAll(text=True)
    visible_texts = filter(tag_visible, texts)
    return ' [SEP] '.join(t.strip() for t in visible_texts if t != '\n')


def get_available_actions(html_obj):
    """``WebAgentTextEnv.get_available_actions``: (its return value, ``text_to_clickable``)."""

    # Collect search bar, buttons, links, and options as clickables
    search_bar = html_obj.find(id='search_input')
    has_search_bar = True if search_bar is not None else False
    buttons = html_obj.find_all(class_='btn')
    product_links = html_obj.find_all(class_='product-link')
    buying_options = html_obj.select('input[type="radio"]')

    text_to_clickable = {
        f'{b.get_text()}'.lower(): b
        for b in buttons + product_links
    }
    for opt in buying_options:
        opt_value = opt.get('value')
        text_to_clickable[f'{opt_value}'] = opt
    return dict(
        has_search_bar=has_search_bar,
        clickables=list(text_to_clickable.keys()),
    ), text_to_clickable


def click_option(session_options: dict, clickable_name: str, text_to_clickable: dict) -> None:
    """The option update of ``SimServer.item_page`` (a click on a radio input of the item page)."""
    clickable = text_to_clickable[clickable_name]
    if (clickable.get('class') is not None and
            clickable.get('class')[0] == 'product-link'):
        raise AssertionError("not an option")
    elif clickable.get('name') is not None:
        clickable_key = clickable['name'].lower()
        session_options[clickable_key] = clickable_name
