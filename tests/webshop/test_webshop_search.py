"""The pure-Python analyzer and BM25 against Anserini/Lucene's own output (staged reference files)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("regex", reason="WebShop search needs regex: pip install -e '.[webshop]'")

from agentgym.envs.webshop.porter import stem  # noqa: E402
from agentgym.envs.webshop.search import BM25Index, QueryTooLongError, analyze, length_table  # noqa: E402


def test_porter_known_stems():
    # Lucene's Porter (Martin's C version): bli->ble, logi->log, short words untouched.
    cases = {"caresses": "caress", "ponies": "poni", "relational": "relat", "conditional": "condit",
             "possibly": "possibl", "analogies": "analog", "generalization": "gener", "hopping": "hop",
             "filing": "file", "ties": "ti", "is": "is", "sky": "sky", "washable": "washabl", "jeans": "jean",
             "reclaimed": "reclaim", "console": "consol", "bleached": "bleach", "as": "as"}
    assert {w: stem(w) for w in cases} == cases


def test_lucene_norm_length_table():
    table = length_table()
    assert table[:24] == list(range(24))  # 24 exact small lengths, then 4 significant bits
    assert table == sorted(table) and len(set(table)) == 256
    assert table[24:28] == [24, 25, 26, 27]


def test_analyzer_matches_lucene_on_every_document(catalog, ws_ref):
    with open(ws_ref("lucene_doc_tokens_1k.json"), encoding="utf-8") as f:
        ref = json.load(f)
    bad = [p.asin for p in catalog.products if analyze(p.contents) != ref[p.asin]]
    assert bad == [], f"{len(bad)} documents tokenised differently from Lucene, e.g. {bad[:5]}"


@pytest.fixture(scope="module")
def bm25_reference(ws_ref):
    with open(ws_ref("bm25_top50_reference.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_query_tokens_match_lucene(bm25_reference):
    bad = [q["query"] for q in bm25_reference if analyze(q["query"]) != q["query_tokens"]]
    assert len(bm25_reference) == 2838 and bad == []


def test_bm25_top50_matches_anserini(catalog, bm25_reference):
    """All 2,838 reference queries give Anserini's exact top-50 list (the issue asks for >= 2,830); scores agree
    to the reference's 4 decimals."""
    index = BM25Index([p.asin for p in catalog.products], [catalog.doc_tokens[p.asin] for p in catalog.products])
    differ, worst = [], 0.0
    for q in bm25_reference:
        hits = index.search(q["query_tokens"], 50)
        if [h.doc_id for h in hits] != [h[0] for h in q["hits"]]:
            differ.append(q["query"])
        for h, (asin, score) in zip(hits, q["hits"]):
            if h.doc_id == asin:
                worst = max(worst, abs(h.score - score))
    assert differ == [], f"{len(differ)} of {len(bm25_reference)} top-50 lists differ: {differ[:5]}"
    assert worst < 1e-4


def test_bm25_index_from_python_tokens_equals_lucene_tokens(catalog):
    """Where the Lucene token file is absent the env analyses the documents itself; same index."""
    ids = [p.asin for p in catalog.products]
    py = BM25Index(ids, [analyze(p.contents) for p in catalog.products])
    lu = BM25Index(ids, [catalog.doc_tokens[a] for a in ids])
    for q in ["men's jeans straight leg", "gluten free snacks", "wireless bluetooth headphones", "★ gift"]:
        assert py.search(analyze(q)) == lu.search(analyze(q))


def test_bm25_edge_cases(catalog):
    index = BM25Index([p.asin for p in catalog.products], [catalog.doc_tokens[p.asin] for p in catalog.products])
    assert index.search([]) == []
    assert index.search(analyze("the of and")) == []  # stop words only
    assert index.search(["zzzznotaword"]) == []
    with pytest.raises(QueryTooLongError):
        index.search([f"w{i}" for i in range(1025)])
    # Repeated terms count (Anserini boosts a clause by its count).
    one, two = index.scores(["jean"]), index.scores(["jean", "jean"])
    assert (two >= one).all() and (two > one).any()
