"""The batched HTTP server (Starlette on uvicorn) and its client: correctness under concurrent load from several
client processes, Search-R1 response shapes, JSON 4xx for bad requests, per-query failures isolated, 503 with
Retry-After, graceful shutdown, typed client errors, no retries. Only 127.0.0.1. (Malformed HTTP and hostile
clients: test_retrieval_hardening.py; the trainers' own request code: test_retrieval_compat*.py.)"""

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

from retrieval_testkit import http_request, need, post_json, small_bm25

need("bm25s", "uvicorn", "starlette")

from retrieval.client import RetrievalClient  # noqa: E402
from retrieval.errors import (ConnectionFailedError, QueryFailedError, RequestRejectedError,  # noqa: E402
                              RequestTimeoutError, ServerError)
from retrieval.server import RetrievalServer, ServerConfig  # noqa: E402


@pytest.fixture(scope="module")
def bm25():
    return small_bm25(300)


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


@pytest.mark.parametrize("body, status, fragment", [
    (b"{not json", 400, "not valid JSON"),
    (b"", 400, "not valid JSON"),
    (b"\xff\xfe", 400, "not valid UTF-8"),
    (b'{"queries": ["q"], "topk": NaN}', 400, "NaN is not JSON"),
    (b"[1, 2]", 422, "JSON object"),
    (b'{"topk": 3}', 422, "needs 'queries'"),
    (b'{"queries": "a string"}', 422, "'queries' must be a list"),
    (b'{"queries": ["a"], "query": "b"}', 422, "not both"),
    (b'{"query": ["a"]}', 422, "'query' must be a string"),
    (b'{"queries": [3]}', 422, "queries[0] is not a string"),
    (json.dumps({"queries": ["q"] * 17}).encode(), 422, "too many queries"),
    (b'{"queries": ["q"], "topk": 0}', 422, "'topk' must be in [1, 20]"),
    (b'{"queries": ["q"], "topk": 21}', 422, "'topk' must be in [1, 20]"),
    (b'{"queries": ["q"], "topk": "3"}', 422, "'topk' must be an integer"),
    (b'{"queries": ["q"], "topk": true}', 422, "'topk' must be an integer"),
    (b'{"queries": ["q"], "topk": 3.5}', 422, "'topk' must be an integer"),
    (b'{"queries": ["q"], "return_scores": "yes"}', 422, "'return_scores'"),
])
def test_bad_requests_get_json_4xx(server, body, status, fragment):
    r = http_request(server.port, "POST", "/retrieve", body, {"Content-Type": "application/json"})
    assert r.status == status and r.is_json_error() and fragment in r.json()["error"], (r.status, r.body)


def test_search_r1_protocol_edges(server, bm25):
    """Empty 'queries' is 200 {"result": []}; an empty or blank query is an ordinary search; the singular 'query'
    form answers one row; a query that cannot be searched (a lone surrogate, an over-long query) gets an empty row
    and an 'errors' entry, and the other queries of the request are answered as usual."""
    r = post_json(server.port, {"queries": [], "topk": 3, "return_scores": True})
    assert r.status == 200 and r.json() == {"result": []}
    q = _queries(bm25, 2)
    r = post_json(server.port, {"queries": ["", "   ", q[0]], "topk": 2})
    rows = r.json()["result"]
    assert r.status == 200 and "errors" not in r.json()
    assert rows[0] == [] and rows[1] == [] and [d["id"] for d in rows[2]] == [h.id for h in bm25.search([q[0]], 2)[0]]
    r = post_json(server.port, {"query": q[1], "topk": 2, "return_scores": True})
    assert r.status == 200 and len(r.json()["result"]) == 1
    assert [x["document"]["id"] for x in r.json()["result"][0]] == [h.id for h in bm25.search([q[1]], 2)[0]]
    # json.dumps writes the lone surrogate as the escape \\ud800, as a client's JSON encoder does
    r = post_json(server.port, {"queries": [q[0], "\ud800 broken", "x" * 201, q[1]], "topk": 2})
    payload = r.json()
    assert r.status == 200 and [len(row) for row in payload["result"]] == [2, 0, 0, 2]
    assert [e["index"] for e in payload["errors"]] == [1, 2]
    assert "surrogate" in payload["errors"][0]["error"] and "too long" in payload["errors"][1]["error"]
    assert [d["id"] for d in payload["result"][3]] == [h.id for h in bm25.search([q[1]], 2)[0]]


def test_other_4xx(server):
    r = post_json(server.port, {"queries": ["x" * (64 * 1024)]})
    assert r.status == 413 and r.is_json_error() and "limit" in r.json()["error"]
    r = post_json(server.port, {}, path="/search")
    assert r.status == 404 and r.is_json_error()
    r = http_request(server.port, "GET", "/retrieve")
    assert r.status == 405 and r.is_json_error() and r.headers["allow"] == "POST"
    r = http_request(server.port, "POST", "/retrieve", b'{"queries": ["a"]}', {"Content-Type": "text/plain"})
    assert r.status == 415 and r.is_json_error() and "application/json" in r.json()["error"]
    r = http_request(server.port, "POST", "/retrieve", b'{"queries": ["a"]}',
                     {"Content-Length": None, "Content-Type": "application/json"})
    assert r.status == 400 and r.is_json_error()  # without a length there is no body (h11): not JSON


def test_client_raises_typed_errors(server):
    c = RetrievalClient(server.url)
    with pytest.raises(RequestRejectedError) as e:
        c.search(["fine"], 1000)
    assert e.value.status == 422 and "topk" in str(e.value)
    with pytest.raises(QueryFailedError) as e:
        c.search(["fine", "bad \ud800"], 2)
    assert set(e.value.errors) == {1} and e.value.rows[1] == [] and "surrogate" in e.value.errors[1]
    rows = c.search(["fine", "bad \ud800"], 2, strict=False)
    assert rows[1] == [] and [h.id for h in rows[0]] == [h.id for h in e.value.rows[0]]
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


class _Fussy:
    """A retriever that fails on any query containing BOOM (and, with broken=True, on everything)."""

    def __init__(self, inner, broken=False):
        self.inner, self.broken = inner, broken
        self.calls: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()

    def search(self, queries, topk=3):
        self.calls.append(list(queries))
        self.gate.wait(30)
        if self.broken or any("BOOM" in q for q in queries):
            raise ValueError("cannot search that")
        return self.inner.search(queries, topk)


def test_a_query_the_index_fails_on_fails_alone(bm25, wait_until):
    """A query that makes the index raise, batched with other clients' queries, gets an empty row and an 'errors'
    entry; every other query of that batch (its own request's and other requests') is answered normally."""
    fussy = _Fussy(bm25)
    fussy.gate.clear()
    q = _queries(bm25, 6)
    with RetrievalServer(fussy, ServerConfig(port=0)) as srv:
        out: dict[int, object] = {}
        bodies = {0: {"queries": [q[0], "BOOM here", q[1]], "topk": 2}, 1: {"queries": q[2:5], "topk": 3},
                  2: {"query": q[5]}, 3: {"queries": ["blocker"]}}
        threads = {i: threading.Thread(target=lambda i=i: out.__setitem__(i, post_json(srv.port, bodies[i])))
                   for i in bodies}
        threads[3].start()
        wait_until(lambda: fussy.calls, "the blocker's search to start")
        for i in (0, 1, 2):
            threads[i].start()
        wait_until(lambda: srv.batcher.queue.qsize() == 3, "three requests waiting behind it")
        fussy.gate.set()
        for t in threads.values():
            t.join(30)
    assert sorted(fussy.calls[1]) == sorted([q[0], "BOOM here", q[1], *q[2:5], q[5]])  # one batch of the three
    r0, r1, r2 = (out[i] for i in range(3))
    assert r0.status == r1.status == r2.status == 200
    assert r0.json()["errors"] == [{"index": 1, "error": "the index failed on this query: ValueError: cannot "
                                                       "search that"}]
    assert [len(row) for row in r0.json()["result"]] == [2, 0, 2] and "errors" not in r1.json()
    assert [[d["id"] for d in row] for row in r1.json()["result"]] == [[h.id for h in r] for r in bm25.search(q[2:5], 3)]
    assert [d["id"] for d in r2.json()["result"][0]] == [h.id for h in bm25.search([q[5]], 3)[0]]
    with RetrievalServer(_Fussy(bm25, broken=True), ServerConfig(port=0)) as srv:  # the index itself is broken
        r = post_json(srv.port, {"queries": ["anything"]})
        assert r.status == 500 and r.is_json_error() and "cannot search that" in r.json()["error"]


def test_full_queue_is_a_503_with_retry_after(bm25, wait_until):
    gated = _Scripted(bm25)
    gated.gate.clear()
    with RetrievalServer(gated, ServerConfig(port=0, max_pending=1, batch_wait_ms=0)) as srv:
        first = threading.Thread(target=lambda: post_json(srv.port, {"queries": ["a"]}))
        first.start()
        wait_until(lambda: gated.calls, "the first search to start")  # taken off the queue, blocked in search
        second = threading.Thread(target=lambda: post_json(srv.port, {"queries": ["b"]}))
        second.start()
        wait_until(lambda: srv.batcher.queue.qsize() == 1, "the second request to wait in the queue")
        r = post_json(srv.port, {"queries": ["c"]})
        assert r.status == 503 and r.is_json_error() and r.headers["retry-after"] == "1"
        gated.gate.set()
        first.join(30)
        second.join(30)


def test_graceful_shutdown_finishes_the_batch_in_flight(bm25, wait_until):
    """stop() while a search runs: the request in flight gets its 200 answer, then the port is closed."""
    gated = _Scripted(bm25)
    gated.gate.clear()
    q = _queries(bm25, 1)
    srv = RetrievalServer(gated, ServerConfig(port=0)).start()
    out = {}
    t = threading.Thread(target=lambda: out.__setitem__("r", post_json(srv.port, {"queries": q, "topk": 2})))
    t.start()
    wait_until(lambda: gated.calls, "the search to start")
    stopper = threading.Thread(target=srv.stop)
    stopper.start()
    time.sleep(0.3)  # the shutdown has begun and waits for the request in flight
    assert stopper.is_alive()
    gated.gate.set()
    stopper.join(30)
    t.join(30)
    assert out["r"].status == 200 and [d["id"] for d in out["r"].json()["result"][0]] == \
        [h.id for h in bm25.search(q, 2)[0]]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()


def test_keep_alive_connections_have_tcp_nodelay(server, bm25):
    """Every accepted connection has TCP_NODELAY (no Nagle wait on kept-alive connections), and a kept-alive
    connection serves several requests."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for q in _queries(bm25, 3):
            conn.request("POST", "/retrieve", body=json.dumps({"queries": [q]}),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200 and len(json.loads(resp.read())["result"]) == 1
        protocols = list(server._uvicorn.server_state.connections)
        assert protocols
        for p in protocols:
            sock = p.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        conn.close()


def test_python_m_retrieval_serve_and_sigint(bm25, tmp_path, wait_until):
    """`python -m retrieval serve` with the CLI's flags answers on 127.0.0.1 and stops gracefully on SIGINT."""
    import signal
    import subprocess

    bm25.save(tmp_path / "idx")
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "retrieval", "serve", "--index", str(tmp_path / "idx"),
                                 "--port", "0", "--max-batch", "64", "--batch-wait-ms", "1", "--max-topk", "5",
                                 "--max-queries", "8", "--omp-threads", "1", "--request-timeout", "5",
                                 "--idle-timeout", "5"], stdout=out, stderr=subprocess.STDOUT)
    try:
        def served_url() -> str | None:
            for line in log.read_text().splitlines():
                if " on http://" in line:
                    return line.split(" on ", 1)[1].split()[0]
            return None

        wait_until(lambda: served_url() is not None or proc.poll() is not None, "the server to print its URL",
                   timeout_s=60)
        url = served_url()
        assert url, log.read_text()
        port = int(url.rsplit(":", 1)[1])
        q = _queries(bm25, 2)
        r = post_json(port, {"queries": q, "topk": 5})
        assert r.status == 200 and [[d["id"] for d in row] for row in r.json()["result"]] == \
            [[h.id for h in row] for row in bm25.search(q, 5)]
        assert post_json(port, {"queries": q, "topk": 6}).status == 422  # --max-topk 5
        assert post_json(port, {"queries": ["a"] * 9}).status == 422  # --max-queries 8
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# ---- issue 33: fair batches, streamed answers, the browser rules, the config's checks --------------------------------
def test_a_big_request_is_split_and_small_ones_are_not_held_up(bm25, wait_until):
    """With --max-batch 10, a request of 95 queries is searched in chunks; a one-query request that arrives while
    the first chunk runs is in the very next search, next to a fair share of the big one, not after all of it.
    Both answers equal the in-process index's."""
    fussy = _Fussy(bm25)
    fussy.gate.clear()
    q = _queries(bm25, 40)
    big = (q * 3)[:95]
    with RetrievalServer(fussy, ServerConfig(port=0, max_batch=10)) as srv:
        out: dict[str, object] = {}
        t_big = threading.Thread(target=lambda: out.__setitem__("big", post_json(srv.port, {"queries": big,
                                                                                         "topk": 2})))
        t_big.start()
        wait_until(lambda: fussy.calls, "the first chunk's search to start")
        t_small = threading.Thread(target=lambda: out.__setitem__("small", post_json(srv.port, {"query": q[7]})))
        t_small.start()
        wait_until(lambda: srv.batcher.queue.qsize() == 1, "the small request to wait")
        fussy.gate.set()
        t_big.join(30)
        t_small.join(30)
    assert fussy.calls[0] == big[:10] and q[7] in fussy.calls[1]  # the next search, not the tenth
    assert len(fussy.calls) == 10 and sorted(sum(fussy.calls, [])) == sorted(big + [q[7]])
    assert all(len(call) <= 10 for call in fussy.calls)
    assert [[d["id"] for d in row] for row in out["big"].json()["result"]] == \
        [[h.id for h in row] for row in bm25.search(big, 2)]
    assert [d["id"] for d in out["small"].json()["result"][0]] == [h.id for h in bm25.search([q[7]], 3)[0]]


def test_big_answers_are_streamed_exactly_and_capped(bm25):
    """An answer over 1 MiB is written piece by piece as it is read, with its exact Content-Length; the client gets
    exactly the in-process index's rows. An answer over --max-answer-bytes is a 413 naming the flag; a request for
    more results than --max-results a 422."""
    q = _queries(bm25, 40) * 5
    with RetrievalServer(bm25, ServerConfig(port=0, max_answer_bytes=8 * 1024 * 1024, max_results=9000)) as srv:
        r = post_json(srv.port, {"queries": q, "topk": 20, "return_scores": True})
        assert r.status == 200 and len(r.body) == int(r.headers["content-length"]) > 1024 * 1024
        rows = RetrievalClient(srv.url).search(q, 20)
        want = bm25.search(q, 20)
        assert [[(h.id, h.passage.contents) for h in row] for row in rows] == \
            [[(h.id, h.passage.contents) for h in row] for row in want]
        r = post_json(srv.port, {"queries": q + q, "topk": 20, "return_scores": True})
        assert r.status == 413 and "--max-answer-bytes" in r.json()["error"]
        r = post_json(srv.port, {"queries": q + q, "topk": 23})
        assert r.status == 422 and "--max-results" in r.json()["error"]
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:  # a client that leaves mid-answer
            body = json.dumps({"queries": q, "topk": 20}).encode()
            s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % (srv.port, len(body)) + body)
            assert s.recv(1024).startswith(b"HTTP/1.1 200")
        assert RetrievalClient(srv.url).health()["status"] == "ok"


def test_the_browser_rules_on_the_server(bm25):
    body = json.dumps({"queries": ["alpha"]}).encode()
    ctype = {"Content-Type": "application/json"}
    with RetrievalServer(bm25, ServerConfig(port=0, allowed_origins=("https://search.example",))) as srv:
        assert http_request(srv.port, "POST", "/retrieve", body, ctype).status == 200
        for headers in ({"Host": f"rebind.example:{srv.port}"}, {"Host": f"localhost:{srv.port + 1}"},
                        {"Origin": "http://127.0.0.1:1"}, {"Host": "search.example:8443"}):
            r = http_request(srv.port, "POST", "/retrieve", body, {**ctype, **headers})
            assert r.status == 403 and r.is_json_error(), headers
        for headers in ({"Host": "search.example", "Origin": "https://search.example"},
                        {"Host": f"localhost:{srv.port}", "Origin": f"http://localhost:{srv.port}"}):
            assert http_request(srv.port, "POST", "/retrieve", body, {**ctype, **headers}).status == 200, headers
        assert http_request(srv.port, "POST", "/retrieve", body).status == 415  # no Content-Type
        assert http_request(srv.port, "GET", "/health", headers={"Host": f"rebind.example:{srv.port}"}).status == 403
    with RetrievalServer(bm25, ServerConfig(port=0, auth_token="tok")) as srv:  # a token: any Host, still no Origin
        auth = {**ctype, "Authorization": "Bearer tok"}
        assert http_request(srv.port, "POST", "/retrieve", body, {**auth, "Host": "gpu-box.lan:1"}).status == 200
        assert http_request(srv.port, "POST", "/retrieve", body, {**auth, "Origin": "http://evil.example"}).status \
            == 403
        assert http_request(srv.port, "POST", "/retrieve", body, ctype).status == 401


def test_the_config_refuses_what_cannot_work():
    for token in ("", " ", "\t\n", " tok", "tok "):
        with pytest.raises(ValueError, match="auth token must not be empty, blank or surrounded by whitespace"):
            ServerConfig(auth_token=token)
    with pytest.raises(ValueError, match="origin"):
        ServerConfig(allowed_origins=("evil.example",))
    with pytest.raises(ValueError, match="max_buffered_body_bytes"):
        ServerConfig(max_body_bytes=1 << 20, max_buffered_body_bytes=1 << 19)
    for field in ("max_results", "max_answer_bytes", "max_batch"):
        with pytest.raises(ValueError, match=field):
            ServerConfig(**{field: 0})
    with pytest.raises(ValueError, match="write_timeout_s"):
        ServerConfig(write_timeout_s=0)


def test_the_url_is_the_bound_address(bm25):
    for host in ("127.0.0.1", "localhost"):
        srv = RetrievalServer(bm25, ServerConfig(host=host, port=0))
        try:
            assert srv.url == f"http://127.0.0.1:{srv.port}"
        finally:
            srv.stop()


def test_big_bodies_take_turns_in_the_body_budget():
    """The body budget grants shares in arrival order, never over its limit, and hands back a share granted to a
    request that was cancelled while it waited."""
    import asyncio

    from retrieval.server import _BodyBudget

    async def main():
        budget = _BodyBudget(10)
        order = []

        async def take(name, n, hold):
            await budget.acquire(n)
            order.append((name, budget.used))
            await asyncio.sleep(hold)
            budget.release(n)

        await asyncio.gather(take("a", 6, 0.05), take("b", 6, 0.01), take("c", 4, 0.01), take("d", 1, 0))
        assert [name for name, _ in order] == ["a", "b", "c", "d"]  # c and d fit beside a, but wait their turn
        assert all(used <= 10 for _, used in order) and budget.used == 0
        await budget.acquire(8)
        waiter = asyncio.ensure_future(budget.acquire(5))
        await asyncio.sleep(0.01)
        waiter.cancel()
        budget.release(8)
        await asyncio.sleep(0.01)
        assert budget.used == 0 and not budget._waiters

    asyncio.run(main())


def test_when_requests_outnumber_a_search_they_take_turns(bm25):
    """Four waiting requests of three queries and searches of two queries: each search serves the requests the
    previous one left out, so none waits more than one search behind the others."""
    import asyncio

    from retrieval.server import _Batcher, _Pending

    fussy = _Fussy(bm25)
    names = "abcd"

    async def main():
        loop = asyncio.get_running_loop()
        batcher = _Batcher(fussy, ServerConfig(max_batch=2, batch_wait_ms=300))
        try:
            items = [_Pending([f"{n}{i}" for i in range(3)], 1, loop, loop.create_future()) for n in names]
            for item in items:
                batcher.submit(item)
            return await asyncio.wait_for(asyncio.gather(*(item.future for item in items)), 30)
        finally:
            batcher.stop(10)

    results = asyncio.run(main())
    assert fussy.calls == [["a0", "b0"], ["c0", "d0"], ["a1", "b1"], ["c1", "d1"], ["a2", "b2"], ["c2", "d2"]]
    assert all(len(rows) == 3 and not errors for rows, errors in results)
