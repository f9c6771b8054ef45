"""Fuzz: the attacks of issue 33 (rows 6-9 and the smaller points) on the retrieval server, kept as tests.

Each test starts its own ``python -m retrieval serve`` (a BM25 index of 2,000 HotpotQA paragraphs) on 127.0.0.1
and reads the server process's memory from ``/proc`` (``VmHWM``: its peak over the whole test). While the attack
runs, a canary in a process of its own asks known queries on a kept-alive connection; it must get every answer
right, with a p99 latency under 5 s; the server's peak RSS must stay under 500 MB, and it must log no error.
Before the fixes: the amplification took RSS from 110 MB to 3.06 GB (canary p99 28.6 s), six unread answers pinned
1.45 GB, and each 8 MiB body with ``[`` inside a string cost 417 MB in the depth scan. Every test is bounded
(counts, deadlines, socket timeouts) and takes well under a minute on an idle machine.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("bm25s", reason="the retrieval extra: pip install 'agentgym-kit[retrieval]'")
pytest.importorskip("uvicorn", reason="the retrieval extra: pip install 'agentgym-kit[retrieval]'")

from retrieval_kit import (Canary, ServerProcess, build_bm25_dir, exchange, expected_answers,  # noqa: E402
                           read_response, request_bytes, search_body)

RSS_LIMIT_MB = 500
#: The canary's p99 limit separates a server the attack stalls (28.6 s before the fixes) from one that keeps serving
#: (0.09-1.56 s measured: the attack's clients, the server and the canary share CI's 2 cores). A tighter limit
#: measured the machine, not the server: 1 s failed a CI run at 1.56 s.
P99_LIMIT_S = 5.0
MIB = 1024 * 1024
#: The server's flags in these tests: the defaults, but a short write timeout (the slow readers are dropped within
#: the test) and an answer cap the big requests below reach.
WRITE_TIMEOUT_S = 3
ANSWER_CAP = 24 * MIB
FLAGS = ("--write-timeout", str(WRITE_TIMEOUT_S), "--max-answer-bytes", str(ANSWER_CAP))


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return build_bm25_dir(tmp_path_factory.mktemp("fuzz-retrieval") / "bm25")


@pytest.fixture(scope="module")
def words(index_dir):
    """The corpus's vocabulary (alphabetic words, lowercased, sorted)."""
    with (index_dir / "passages.jsonl").open(encoding="utf-8") as f:
        return sorted({w.lower() for line in f for w in json.loads(line)["contents"].split()[1:] if w.isalpha()})


@pytest.fixture(scope="module")
def wide_queries(words):
    """300 queries of 40 words spread over the vocabulary: each finds its topk 100 (~1.5 KB of answer per hit)."""
    step = max(1, len(words) // 300)
    return [" ".join(words[i::step][:40]) for i in range(300)]


@pytest.fixture
def server(index_dir):
    with ServerProcess(index_dir, *FLAGS) as srv:
        yield srv


def _canary(srv, words):
    queries = [f"{a} {b}" for a, b in zip(words[::997], words[501::997])][:12]
    return Canary(srv.port, queries, expected_answers(srv.port, queries))


def _check(srv, canary, what: str) -> None:
    peak = srv.peak_rss_mb()
    print(f"{what}: server peak RSS {peak:.0f} MB, canary p99 {canary.p99 * 1000:.0f} ms over "
          f"{len(canary.latencies)} requests")
    assert not canary.failures, canary.failures[:5]
    assert len(canary.latencies) >= 20, "the canary hardly ran"
    assert "Traceback" not in srv.log() and "ERROR" not in srv.log(), srv.log()[-3000:]
    assert peak < RSS_LIMIT_MB, f"{what}: the server's RSS peaked at {peak:.0f} MB"
    assert canary.p99 < P99_LIMIT_S, f"{what}: canary p99 {canary.p99:.2f} s"


def _in_threads(n: int, fn) -> list:
    out: list = [None] * n

    def run(i: int) -> None:
        try:
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "an attacker thread did not finish"
    return out


# ---- row 6: amplification ----------------------------------------------------------------------------------------
def test_amplification_is_refused_and_big_answers_are_bounded(server, words, wide_queries):
    """4,096 queries x topk 100 with scores (a 114 KB request for an 857 MB answer) is a 422 naming the limit; a
    request under the results cap whose answer is over ``--max-answer-bytes`` is a 413 naming that. Then, while two
    clients send the amplification twenty times, four clients each ask twice for a big answer under the cap (~22
    MB) and get it whole and exact; the canary keeps its latency and the server its memory."""
    queries = wide_queries
    amplify = search_body((queries * 20)[:4096], 100)
    status, _, body = exchange(server.port, amplify)
    assert status == 422 and "--max-results" in json.loads(body)["error"] and "32768" in json.loads(body)["error"]

    over_cap = search_body((queries * 2)[:327], 100)  # 32,700 results, ~49 MB of answer
    status, _, body = exchange(server.port, over_cap)
    assert status == 413 and "--max-answer-bytes" in json.loads(body)["error"], body[:300]

    big = queries[:150]  # up to 15,000 results, ~22 MB
    from retrieval.index import load_index

    want = [[h.id for h in row] for row in load_index(server.index_dir).search(big, 100)]

    def client(i: int) -> int:
        sizes = []
        for _ in range(2):
            status, headers, body = exchange(server.port, search_body(big, 100), timeout=90)
            assert status == 200 and len(body) == int(headers["content-length"])
            result = json.loads(body)["result"]
            assert [[d["document"]["id"] for d in row] for row in result] == want
            sizes.append(len(body))
        return max(sizes)

    def amplifier(i: int) -> int:
        for _ in range(10):
            assert exchange(server.port, amplify)[0] == 422
        return 0

    with _canary(server, words) as canary:
        sizes = _in_threads(6, lambda i: client(i) if i < 4 else amplifier(i))
    errors = [s for s in sizes if isinstance(s, BaseException)]
    assert not errors, errors[:3]
    assert 10 * MIB < max(sizes) <= ANSWER_CAP
    _check(server, canary, "amplification")


# ---- row 7: clients that never read their answer ------------------------------------------------------------------
def test_clients_that_never_read_cannot_pin_memory(server, words, wide_queries):
    """Twelve clients (twice the attack's six) each ask for a ~22 MB answer and never read a byte of it. The server
    writes an answer only as fast as it is read, so they hold a send buffer's worth each, and it drops them after
    ``--write-timeout``; meanwhile the canary keeps its latency and the server its memory."""
    queries = wide_queries[:150]
    held = []
    with _canary(server, words) as canary:
        try:
            for _ in range(12):
                s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and never reads
                s.sendall(request_bytes(server.port, search_body(queries, 100)))
                held.append(s)
            time.sleep(WRITE_TIMEOUT_S + 3)  # all twelve are stuck at a full buffer, then dropped
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                health = json.loads(exchange(server.port, b"", method="GET", path="/health")[2])
                if health["open_connections"] <= 3:  # the canary's, this one, maybe one closing
                    break
                time.sleep(0.5)
            assert health["open_connections"] <= 3, f"the unread answers still hold {health['open_connections']}"
            while time.monotonic() < deadline:  # what they got before the drop, then a reset or a close
                if all(_drained(s) for s in held):
                    break
            assert all(_drained(s) for s in held)
        finally:
            for s in held:
                s.close()
    _check(server, canary, "slow readers")


def _drained(sock: socket.socket) -> bool:
    """Read what is buffered; True once the server has closed or reset the connection."""
    sock.settimeout(0.2)
    try:
        for _ in range(1000):
            if not sock.recv(1 << 20):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return False


# ---- row 8: the depth scan ---------------------------------------------------------------------------------------
def test_big_bodies_cost_bounded_memory(server, words):
    """Twenty 8 MiB bodies at once whose one string is full of ``[`` (or of escapes), plus bodies deeper than the
    limit and bodies of 2 million tiny strings: each gets its answer (a query too long to search: an empty row and
    an ``errors`` entry; 400 for the nesting; 413 naming the token limit) while the server's memory stays bounded
    (the scan copies nothing, and big bodies wait for their share of a 32 MiB budget)."""
    n = 8 * MIB - 32
    bodies = [
        b'{"queries": ["' + b"[" * n + b'"]}',
        b'{"queries": ["' + b"\\n" * (n // 2) + b'"]}',
        b'{"queries": ["' + b'\\"[' * (n // 3) + b'"]}',
    ]

    def client(i: int):
        body = bodies[i % len(bodies)]
        status, _, answer = exchange(server.port, body, timeout=120)
        payload = json.loads(answer)
        assert status == 200 and payload["result"] == [[]] and "too long" in payload["errors"][0]["error"], \
            (status, answer[:200])
        return status

    deep = b"[" * (4 * MIB)
    many = b"[" + b'"a",' * (2 * MIB - 2) + b'"a"]'
    with _canary(server, words) as canary:
        results = _in_threads(20, client)
        status, _, body = exchange(server.port, deep)
        assert status == 400 and "levels deep" in json.loads(body)["error"]
        status, _, body = exchange(server.port, many)
        assert status == 413 and "JSON tokens" in json.loads(body)["error"]
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    _check(server, canary, "8 MiB bodies")


# ---- the smaller points -------------------------------------------------------------------------------------------
def test_the_printed_url_is_the_bound_address_and_blank_tokens_are_refused(index_dir):
    """Bound to 0.0.0.0 (with a token: these tests expose nothing), the server prints ``http://0.0.0.0:P``, not
    ``127.0.0.1``; a blank or whitespace token, on the command line or in ``$AGENTGYM_RETRIEVAL_TOKEN``, is refused
    before anything is loaded or bound (exit 2, the cause on stderr)."""
    with ServerProcess(index_dir, "--auth-token", "s3cret", host="0.0.0.0") as srv:
        assert srv.url == f"http://0.0.0.0:{srv.port}", srv.banner
        status, _, _ = exchange(srv.port, search_body(["alpha"]), headers={"Authorization": "Bearer s3cret"})
        assert status == 200
    base = [sys.executable, "-m", "retrieval", "serve", "--index", str(index_dir), "--port", "0"]
    for extra, env in ((["--auth-token", " "], {}), (["--auth-token", "tok "], {}),
                       ([], {"AGENTGYM_RETRIEVAL_TOKEN": " \t"})):
        r = subprocess.run(base + extra, capture_output=True, text=True, timeout=60,
                           env={**ServerProcess(index_dir).env, **env})
        assert r.returncode == 2 and "auth token must not be empty, blank" in r.stderr, (extra, env, r.stderr[-500:])
        assert "Traceback" not in r.stderr


def test_what_a_browser_request_looks_like_is_refused(server, words):
    """Without a browser: the requests a web page can make (no Content-Type, text/plain, a foreign Origin, a rebound
    Host) get a JSON 403 / 415 and search nothing; the same request from a non-browser client is answered."""
    q = search_body([f"{words[0]} {words[1]}"])
    cases = [
        ({"Content-Type": None}, 415),
        ({"Content-Type": "text/plain;charset=UTF-8"}, 415),
        ({"Content-Type": "multipart/form-data; boundary=x"}, 415),
        ({"Origin": "http://127.0.0.1:1"}, 403),
        ({"Origin": "null"}, 403),
        ({"Host": f"rebind.evil.example:{server.port}"}, 403),
        ({"Host": f"rebind.evil.example:{server.port}", "Origin": f"http://rebind.evil.example:{server.port}"}, 403),
        ({"Host": f"127.0.0.1:{server.port + 1}"}, 403),
        ({"Host": "[::1"}, 403),  # not a host name at all
        ({"Host": f"localhost:{server.port}", "Origin": f"http://localhost:{server.port}"}, 200),
        ({"Host": f"[::1]:{server.port}"}, 200),
    ]
    before = json.loads(exchange(server.port, b"", method="GET", path="/health")[2])["queries_served"]
    for headers, status in cases:
        r = exchange(server.port, q, headers=headers)
        assert r is not None and r[0] == status, (headers, r and r[0], r and r[2][:200])
        if status != 200:
            assert "error" in json.loads(r[2]), r[2][:200]
    after = json.loads(exchange(server.port, b"", method="GET", path="/health")[2])["queries_served"]
    assert after - before == 2  # the two answered requests, and nothing else


# ---- row 9: a web page, in a real browser ---------------------------------------------------------------------------
ATTACK_PAGE = "<!doctype html><title>attack</title><p>a page that tries to use the search server</p>"


def test_a_web_page_gets_nothing(server, words):
    """In headless Chromium: a page served on another port of 127.0.0.1 sends ``fetch(..., {mode: "no-cors"})`` POSTs
    with a Blob body (no type, text/plain, application/json) and a plain form-typed string; a page whose host name
    was rebound to 127.0.0.1 (``rebind.evil.example`` at the server's own port, so its requests are same-origin to
    the browser) posts JSON and reads the answers. The server searches none of them: the no-cors requests get 403
    (their Origin) and would get 415 (no JSON Content-Type), the rebound ones 403 (their Host). Controls: the same
    no-cors requests reach a recording server as sent (so the browser did send them), and the same page at the
    server's own origin (127.0.0.1) is answered (so the page code works)."""
    from browser_kit import FETCH_JS, REBIND_HOST, PageServer, launch_chromium, open_page_as

    marker = "zzyzx qwertyuiop"  # a query nothing else sends
    body = json.dumps({"queries": [marker], "topk": 3})

    def served() -> int:
        return json.loads(exchange(server.port, b"", method="GET", path="/health")[2])["queries_served"]

    no_cors = [{"method": "POST", "mode": "no-cors", "body": {"blob": body, "type": t}}
               for t in (None, "text/plain", "application/json")]
    no_cors.append({"method": "POST", "mode": "no-cors", "body": body,
                    "headers": {"Content-Type": "application/x-www-form-urlencoded"}})
    with launch_chromium() as browser, PageServer(ATTACK_PAGE) as site, PageServer("") as recorder:
        before = served()
        page = browser.new_page()
        page.goto(site.url + "/attack.html")
        for init in no_cors:  # the control: what the browser sends, seen by a plain server on a third port
            got = page.evaluate(FETCH_JS, {"url": recorder.url + "/retrieve", "init": init})
            assert got.get("type") == "opaque", got
        posts = [r for r in recorder.requests if r[0] == "POST"]
        assert len(posts) == len(no_cors) and all(marker.encode() in r[3] for r in posts)
        assert all(r[2].get("origin") == site.url for r in posts)  # a browser always says where it comes from
        assert not any((r[2].get("content-type") or "").startswith("application/json") for r in posts)
        for init in no_cors:  # the attack
            got = page.evaluate(FETCH_JS, {"url": f"http://127.0.0.1:{server.port}/retrieve", "init": init})
            assert got.get("type") == "opaque", got  # the page learns nothing, and nothing was searched:
        assert served() == before
        page.close()

        rebound = open_page_as(browser, f"http://{REBIND_HOST}:{server.port}/attack.html", ATTACK_PAGE)
        json_post = {"method": "POST", "headers": {"Content-Type": "application/json"}, "body": body}
        got = rebound.evaluate(FETCH_JS, {"url": f"http://{REBIND_HOST}:{server.port}/retrieve", "init": json_post})
        assert got.get("status") == 403 and "Host" in json.loads(got["text"])["error"], got
        got = rebound.evaluate(FETCH_JS, {"url": f"http://{REBIND_HOST}:{server.port}/health", "init": {}})
        assert got.get("status") == 403, got
        assert served() == before
        rebound.context.close()

        own = open_page_as(browser, f"http://127.0.0.1:{server.port}/attack.html", ATTACK_PAGE)  # the control
        got = own.evaluate(FETCH_JS, {"url": f"http://127.0.0.1:{server.port}/retrieve", "init": json_post})
        assert got.get("status") == 200 and json.loads(got["text"])["result"][0] == [], got
        assert served() == before + 1
        own.context.close()
