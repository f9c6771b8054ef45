"""The batched HTTP server and its client: correctness under concurrent load from several client processes,
Search-R1 response shapes, 4xx for bad requests, typed client errors, no retries. Only 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import multiprocessing as mp
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from retrieval_testkit import need, small_corpus_records

need("bm25s")

from retrieval.client import RetrievalClient  # noqa: E402
from retrieval.corpus import Corpus  # noqa: E402
from retrieval.errors import (ConnectionFailedError, RequestRejectedError, RequestTimeoutError,  # noqa: E402
                              ServerError)
from retrieval.index import build_index  # noqa: E402
from retrieval.server import RetrievalServer, ServerConfig  # noqa: E402
from retrieval.types import Passage  # noqa: E402


@pytest.fixture(scope="module")
def bm25():
    corpus = Corpus.from_passages([Passage(**r) for r in small_corpus_records(300)], "test")
    return build_index(corpus, "bm25")


@pytest.fixture(scope="module")
def server(bm25):
    with RetrievalServer(bm25, ServerConfig(port=0, max_topk=20, max_queries=16, max_query_chars=200,
                                            max_body_bytes=64 * 1024)) as srv:
        yield srv


def _post(srv, body: bytes, path: str = "/retrieve", headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers=headers or {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def _queries(bm25, n=40):
    return [" ".join(p.text.split()[:6]) for p in bm25.passages[::max(1, len(bm25.passages) // n)]][:n]


def test_health_and_search_r1_shapes(server, bm25):
    h = RetrievalClient(server.url).health()
    assert h["status"] == "ok" and h["kind"] == "bm25" and h["n_passages"] == len(bm25)
    assert h["corpus_checksum"] == bm25.corpus.checksum
    q = _queries(bm25, 3)
    status, body = _post(server, json.dumps({"queries": q, "topk": 2, "return_scores": True}).encode())
    assert status == 200 and len(body["result"]) == 3
    item = body["result"][0][0]
    assert set(item) == {"document", "score"} and {"id", "contents", "title", "text"} <= set(item["document"])
    assert item["document"]["contents"] == f'"{item["document"]["title"]}"\n{item["document"]["text"]}'
    status, body = _post(server, json.dumps({"queries": q}).encode())  # Search-R1 defaults: topk 3, no scores
    assert status == 200 and all(len(r) == 3 and "contents" in r[0] and "score" not in r[0] for r in body["result"])
    expected = bm25.search(q, 3)
    assert [[d["id"] for d in r] for r in body["result"]] == [[h.id for h in r] for r in expected]


@pytest.mark.parametrize("body, fragment", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"topk": 3}', "'queries' must be a list"),
    (b'{"queries": "a string"}', "'queries' must be a list"),
    (b'{"queries": []}', "'queries' is empty"),
    (b'{"queries": ["ok", ""]}', "queries[1] is empty"),
    (b'{"queries": ["   "]}', "queries[0] is empty"),
    (b'{"queries": [3]}', "not a string"),
    (json.dumps({"queries": ["x" * 201]}).encode(), "too long"),
    (json.dumps({"queries": ["q"] * 17}).encode(), "too many queries"),
    (b'{"queries": ["q"], "topk": 0}', "'topk' must be in [1, 20]"),
    (b'{"queries": ["q"], "topk": 21}', "'topk' must be in [1, 20]"),
    (b'{"queries": ["q"], "topk": "3"}', "'topk' must be an integer"),
    (b'{"queries": ["q"], "topk": true}', "'topk' must be an integer"),
    (b'{"queries": ["q"], "return_scores": "yes"}', "'return_scores'"),
    (b"\xff\xfe", "not valid JSON"),
])
def test_bad_requests_get_400(server, body, fragment):
    status, payload = _post(server, body)
    assert status == 400 and fragment in payload["error"]


def test_other_4xx(server):
    status, payload = _post(server, b"x" * (64 * 1024 + 1))
    assert status == 413 and "limit" in payload["error"]
    assert _post(server, b"{}", path="/search")[0] == 404
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/retrieve")
    assert conn.getresponse().status == 405
    conn.close()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:  # no Content-Length
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(64).split()[1] == b"411"


def test_client_raises_typed_errors(server):
    c = RetrievalClient(server.url)
    with pytest.raises(RequestRejectedError) as e:
        c.search(["fine", ""], 2)
    assert e.value.status == 400 and "queries[1] is empty" in str(e.value)
    with pytest.raises(RequestRejectedError, match="topk"):
        c.search(["fine"], 1000)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(ConnectionFailedError):
        RetrievalClient(f"http://127.0.0.1:{free}", timeout=2).search(["x"], 1)
    with pytest.raises(ValueError):
        RetrievalClient("ftp://127.0.0.1:1")


class _Scripted:
    """A retriever that counts calls and can block, sleep or fail (to test the server's own behaviour)."""

    def __init__(self, inner, sleep=0.0, fail=False):
        self.inner, self.sleep, self.fail = inner, sleep, fail
        self.calls: list[int] = []
        self.gate = threading.Event()
        self.gate.set()

    def search(self, queries, topk=3):
        self.calls.append(len(queries))
        self.gate.wait(10)
        time.sleep(self.sleep)
        if self.fail:
            raise RuntimeError("index exploded")
        return self.inner.search(queries, topk)


def test_timeout_is_typed_and_not_retried(bm25, wait_until):
    slow = _Scripted(bm25, sleep=1.0)
    with RetrievalServer(slow, ServerConfig(port=0)) as srv:
        with pytest.raises(RequestTimeoutError):
            RetrievalClient(srv.url, timeout=0.2).search(["anything"], 1)
        wait_until(lambda: slow.calls, "the request to reach the index")
        time.sleep(1.2)  # longer than the search: a retry would have arrived by now
        assert slow.calls == [1]  # one request reached the index: the client did not retry


def test_index_failure_is_a_500(bm25):
    with RetrievalServer(_Scripted(bm25, fail=True), ServerConfig(port=0)) as srv:
        with pytest.raises(ServerError, match="index exploded") as e:
            RetrievalClient(srv.url).search(["q"], 1)
        assert e.value.status == 500


def test_requests_waiting_together_share_one_search(bm25, wait_until):
    gated = _Scripted(bm25)
    gated.gate.clear()
    q = _queries(bm25, 8)
    with RetrievalServer(gated, ServerConfig(port=0)) as srv:
        client = RetrievalClient(srv.url)
        results: dict[int, list] = {}
        first = threading.Thread(target=lambda: results.__setitem__(0, client.search(q[:1], 2)))
        first.start()
        wait_until(lambda: gated.calls, "the first search to start")  # it is running (blocked)
        rest = [threading.Thread(target=lambda i=i: results.__setitem__(i, client.search(q[i:i + 2], i % 3 + 1)))
                for i in range(1, 5)]
        for t in rest:
            t.start()
        wait_until(lambda: srv.batcher.queue.qsize() >= 4, "four queued requests")  # all wait behind it
        gated.gate.set()
        for t in [first, *rest]:
            t.join(10)
        assert gated.calls == [1, 8]  # the four waiting requests went into one search call
        for i in range(1, 5):
            assert [[h.id for h in r] for r in results[i]] == [[h.id for h in r] for r in bm25.search(q[i:i + 2],
                                                                                                     i % 3 + 1)]


def test_concurrent_client_processes(bm25):
    """Four client processes x 25 bounded requests against one server: zero errors, every row correct."""
    pool = _queries(bm25, 60) + ["qqqzzzxxy unknown words"]
    expected = {q: [(h.id, h.score) for h in r] for q, r in zip(pool, bm25.search(pool, 5))}
    sys.path.insert(0, str(Path(__file__).parent))
    from retrieval_load_client import run_client

    with RetrievalServer(bm25, ServerConfig(port=0, batch_wait_ms=5)) as srv:
        ctx = mp.get_context("spawn")
        with ctx.Pool(4) as procs:
            outs = procs.map(run_client, [(srv.url, seed, 25, pool) for seed in range(4)], chunksize=1)
        health = RetrievalClient(srv.url).health()
    answered = [r for out in outs for r in out]
    errors = [r[2] for r in answered if isinstance(r[2], str)]
    assert len(answered) == 100 and not errors, errors[:3]
    for queries, topk, rows in answered:
        for q, row in zip(queries, rows):
            want = expected[q][:topk]
            assert [i for i, _ in row] == [i for i, _ in want], q
            assert [s for _, s in row] == pytest.approx([s for _, s in want], rel=1e-5)
    assert health["queries_served"] == sum(len(q) for q, _, _ in answered)
    assert health["batches"] <= 100


def test_wiki_search_eval_splits_do_not_need_bm25s(server):
    """WikiSearch's evaluation splits are answered by a retrieval server (or an index directory), so their
    availability does not hang on bm25s; the in-process default of ``demo`` / ``hotpotqa-500`` does. The env
    itself runs against the server URL."""
    from dataclasses import replace

    import agentgym
    from agentgym.registration import get_entry

    entry = replace(get_entry("WikiSearch-v0"), requires=("agentgym_no_such_module",))
    ok, why = entry.split_available("demo")
    assert not ok and "agentgym_no_such_module" in why
    for split in ("nq", "bamboogle"):
        ok, why = entry.split_available(split)
        assert "agentgym_no_such_module" not in why  # only its question file can be missing
    env = agentgym.make("WikiSearch-v0", split="demo", retriever_url=server.url)
    env.reset(seed=0)
    obs, _r, _term, _trunc, info = env.step(env.oracle_action())
    assert "<information>" in obs and info["n_searches"] == 1
    env.close()
