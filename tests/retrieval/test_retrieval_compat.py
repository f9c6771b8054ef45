"""The retrieval server answers the Search-R1-style trainers' own request code, on 127.0.0.1.

The request shapes and the client-side rendering below are those of:

* Search-R1, ``search_r1/llm_agent/generation.py`` at PeterGriffinJin/Search-R1
  a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06: ``_batch_search`` posts ``{"queries": [...], "topk": k,
  "return_scores": True}`` with ``requests.post(url, json=payload).json()``, ``batch_search`` maps
  ``_passages2string`` over ``['result']``, and ``execute_predictions`` puts ``.strip()`` of each into
  ``<information>...</information>``. A turn where no rollout searches posts ``"queries": []``.
* verl-agent's search tool, ``agent_system/environments/env_package/search/third_party/skyrl_gym/tools/search.py``
  as added by langfengQ/verl-agent 29e3e8b3e3412aff53b1e4a461dac77a8eec19bd (read from the copy in
  lms2004/verl-agent afe3633c8c2728cec51429e28e62be63d4f0207e): ``call_search_api`` posts ONE query,
  ``{"query": q, "topk": k, "return_scores": True}`` with headers ``Content-Type``/``Accept: application/json`` on a
  shared ``requests.Session``; ``SearchToolGroup.search`` joins ``_passages2string`` (``Doc i: <contents>``) of
  every row of ``result`` with ``"\\n---\\n"`` and turns anything else into "Search error" / "No search results".

Neither project is on PyPI, so their few lines of request code are restated here (not imported); verl's own client
(``verl/tools/utils/search_r1_like_utils.py``) is imported for real in test_retrieval_compat_verl.py.
"""

from __future__ import annotations

import json
import threading

import pytest

from retrieval_testkit import need, passage_queries, small_bm25

need("bm25s", "uvicorn", "starlette")
requests = pytest.importorskip("requests", reason="the trainers' clients use requests")

import agentgym  # noqa: E402
from agentgym.registration import get_entry  # noqa: E402
from retrieval.server import RetrievalServer, ServerConfig  # noqa: E402


# ---- Search-R1 generation.py (a14dc3a), restated -----------------------------------------------------------
def search_r1_batch_search(search_url: str, queries: list[str], topk: int = 3) -> list[str]:
    payload = {"queries": queries, "topk": topk, "return_scores": True}
    results = requests.post(search_url, json=payload).json()["result"]
    return [search_r1_passages2string(result) for result in results]


def search_r1_passages2string(retrieval_result) -> str:
    format_reference = ""
    for idx, doc_item in enumerate(retrieval_result):
        content = doc_item["document"]["contents"]
        title = content.split("\n")[0]
        text = "\n".join(content.split("\n")[1:])
        format_reference += f"Doc {idx+1}(Title: {title}) {text}\n"
    return format_reference


# ---- verl-agent's skyrl_gym search tool (29e3e8b), restated --------------------------------------------------
def verl_agent_call_search_api(session, url: str, query: str, topk: int = 3, timeout: int = 30):
    payload = {"query": query, "topk": topk, "return_scores": True}
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    response = session.post(url, headers=headers, json=payload, timeout=timeout)
    response.raise_for_status()
    return response.json()


def verl_agent_passages2string(retrieval_result) -> str:
    format_reference = ""
    for idx, doc_item in enumerate(retrieval_result):
        content = doc_item["document"]["contents"].strip()
        format_reference += f"Doc {idx+1}: {content}\n"
    return format_reference


def verl_agent_search(session, url: str, query: str, topk: int = 3) -> str:
    api_response = verl_agent_call_search_api(session, url, query.strip(), topk)
    raw_results = api_response.get("result", [])
    if not raw_results:
        return json.dumps({"result": "No search results found."})
    return json.dumps({"result": "\n---\n".join(verl_agent_passages2string(r) for r in raw_results)})


# ---- fixtures ----------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _no_proxy_for_loopback(monkeypatch):
    """requests honours http_proxy even for 127.0.0.1; the server is local, so never go through a proxy."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def bm25():
    return small_bm25(300)


@pytest.fixture(scope="module")
def server(bm25):
    with RetrievalServer(bm25, ServerConfig(port=0)) as srv:
        yield srv



def test_search_r1_generation_client(server, bm25):
    from agentgym.envs.wiki_search.env import format_passages

    url = server.url + "/retrieve"
    qs = passage_queries(bm25, 8)
    rendered = search_r1_batch_search(url, qs, 3)
    expected = bm25.search(qs, 3)
    assert len(rendered) == len(qs)
    for text, hits in zip(rendered, expected):
        assert text.strip() == format_passages(hits)  # WikiSearch shows exactly what Search-R1 shows
        assert text.startswith(f'Doc 1(Title: "{hits[0].passage.title}") {hits[0].passage.text}')
    # a turn where no rollout searched: Search-R1 posts an empty list and must get an empty result
    assert requests.post(url, json={"queries": [], "topk": 3, "return_scores": True},
                         timeout=30).json() == {"result": []}
    assert search_r1_batch_search(url, [], 3) == []
    # an empty query is an ordinary search (BM25 finds nothing for it); the other queries are unaffected
    out = search_r1_batch_search(url, ["", qs[0]], 3)
    assert out[0] == "" and out[1] == rendered[0]


def test_search_r1_training_batch_of_2560_queries(server, bm25):
    """Search-R1's training config (train_batch_size 512 x n_agent 5) sends up to 2,560 queries in one request."""
    qs = (passage_queries(bm25, 40) * 64)[:2560]
    r = requests.post(server.url + "/retrieve", json={"queries": qs, "topk": 3, "return_scores": True},
                      timeout=30)
    assert r.status_code == 200
    rows = r.json()["result"]
    want = [[h.id for h in row] for row in bm25.search(qs[:40], 3)]
    assert len(rows) == 2560
    assert [[x["document"]["id"] for x in row] for row in rows] == want * 64


def test_broken_queries_do_not_break_a_search_r1_batch(server, bm25):
    """A lone surrogate (a broken tokenizer decode; requests sends it as the JSON escape \\\\ud800) gets an empty
    row, which _passages2string renders as nothing; the other rows of the batch, and a concurrent client's batch,
    are answered as usual."""
    url = server.url + "/retrieve"
    qs = passage_queries(bm25, 4)
    other: dict = {}
    t = threading.Thread(target=lambda: other.setdefault("out", search_r1_batch_search(url, qs[2:], 3)))
    t.start()
    payload = requests.post(url, json={"queries": [qs[0], "\ud800 x", qs[1]], "topk": 3,
                                       "return_scores": True}, timeout=30).json()
    t.join(30)
    assert [search_r1_passages2string(r) for r in payload["result"]][1] == ""
    assert [len(r) for r in payload["result"]] == [3, 0, 3] and payload["errors"][0]["index"] == 1
    assert other["out"] == [search_r1_passages2string(r) for r in requests.post(
        url, json={"queries": qs[2:], "topk": 3, "return_scores": True}, timeout=30).json()["result"]]


def test_verl_agent_singular_query_client(server, bm25):
    url = server.url + "/retrieve"
    with requests.Session() as session:
        for q in passage_queries(bm25, 5):
            resp = verl_agent_call_search_api(session, url, q, 3)
            assert len(resp["result"]) == 1 and len(resp["result"][0]) == 3
            hits = bm25.search([q], 3)[0]
            assert [x["document"]["id"] for x in resp["result"][0]] == [h.id for h in hits]
            text = json.loads(verl_agent_search(session, url, q, 3))["result"]
            assert text == "".join(f"Doc {i + 1}: {h.passage.contents.strip()}\n" for i, h in enumerate(hits))
            assert not text.startswith("Search error")


def test_wiki_search_renders_search_r1_format_on_every_split(server):
    """The demo split in-process and over HTTP, and an evaluation split over HTTP, show Search-R1's format with the
    quoted titles of wiki-18's contents."""
    local = agentgym.make("WikiSearch-v0")
    local.reset(options={"task_id": "demo-06"})
    obs = local.step("<search>Mount Kilimanjaro in Africa</search>")[0]
    assert obs.startswith('<information>Doc 1(Title: "Mount Kilimanjaro") Mount Kilimanjaro is a dormant volcano')
    assert '\nDoc 2(Title: "' in obs and obs.endswith("</information>")
    with RetrievalServer(local.retriever, ServerConfig(port=0)) as srv:
        remote = agentgym.make("WikiSearch-v0", retriever_url=srv.url)
        remote.reset(options={"task_id": "demo-06"})
        assert remote.step("<search>Mount Kilimanjaro in Africa</search>")[0] == obs
        assert remote.step("<search>qqqzzzxxy</search>")[0] == "<information></information>"  # Search-R1's empty
        rendered = search_r1_batch_search(srv.url + "/retrieve", ["Mount Kilimanjaro in Africa"], 3)[0]
        assert obs == f"<information>{rendered.strip()}</information>"
        ok, why = get_entry("WikiSearch-v0").split_available("bamboogle")
        if not ok:
            pytest.skip(f"bamboogle split unavailable: {why}")
        env = agentgym.make("WikiSearch-v0", split="bamboogle", retriever_url=srv.url)
        env.reset(seed=0)
        obs = env.step(env.oracle_action())[0]
        assert obs.startswith('<information>Doc 1(Title: "')
