"""Hostile and malformed clients against the retrieval server (uvicorn, 127.0.0.1 only).

Each attack gets a JSON error or a bounded close, and throughout every attack a *canary* -- a client on its own
kept-alive connection -- keeps asking known queries and must get exactly the in-process index's answers. Covered:
deep JSON, huge numbers, huge bodies (declared and chunked), wrong methods and paths, wrong content types, a
garbage request line, oversized headers, slow-loris (headers and body trickled in), idle connections,
half-closed connections (with a whole request and with a partial one), 1,000 concurrent connections, and
connections over the server's connection limit. Every loop is bounded by a count or a deadline.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import threading
import time

import pytest

from retrieval_testkit import http_request, need, post_json, read_response, small_bm25

need("bm25s", "uvicorn", "starlette")

from retrieval.http_limits import connection_counts  # noqa: E402
from retrieval.server import RetrievalServer, ServerConfig  # noqa: E402

READ_TIMEOUT_S = 1.0
IDLE_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def bm25():
    return small_bm25(300)


@pytest.fixture(scope="module")
def queries(bm25):
    return [" ".join(p.text.split()[:5]) for p in bm25.passages[::15]][:20]


@pytest.fixture(scope="module")
def expected(bm25, queries):
    return {q: [h.id for h in row] for q, row in zip(queries, bm25.search(queries, 3))}


@pytest.fixture(scope="module")
def server(bm25):
    cfg = ServerConfig(port=0, request_timeout_s=READ_TIMEOUT_S, idle_timeout_s=IDLE_TIMEOUT_S, max_connections=2000)
    with RetrievalServer(bm25, cfg) as srv:
        yield srv


class Canary:
    """A kept-alive client that asks known queries in a loop (bounded: a stop flag, 100,000 requests) and records
    every answer that is not exactly the in-process index's."""

    def __init__(self, port: int, queries: list[str], expected: dict):
        self.port, self.queries, self.expected = port, queries, expected
        self.ok, self.failures = 0, []
        self.ok_before: int | None = None  # answers before the attack ended (set on exit)
        self.crash: BaseException | None = None  # what ended the canary's thread early, if anything
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded_run, daemon=True)

    def _guarded_run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - recorded, and check() fails on it
            self.crash = e

    def _run(self) -> None:
        sock = None
        for i in range(100_000):
            if self._stop.is_set():
                break
            q = self.queries[i % len(self.queries)]
            body = json.dumps({"queries": [q], "topk": 3}).encode()
            try:
                if sock is None:
                    sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % (self.port, len(body)) + body)
                r = read_response(sock, 30)
            except OSError as e:
                self.failures.append(f"{type(e).__name__}: {e}")
                sock = None
                continue
            if r is None:
                self.failures.append("the connection closed without an answer")
                sock.close()
                sock = None
                continue
            got = [d["id"] for d in r.json()["result"][0]] if r.status == 200 else r.status
            if got == self.expected[q]:
                self.ok += 1
            else:
                self.failures.append(f"{q!r}: {got}")
            time.sleep(0.01)
        if sock is not None:
            sock.close()

    def __enter__(self) -> "Canary":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.ok_before = ok_before = self.ok
        deadline = time.monotonic() + 30  # it must still get answers after the attack; check() asserts it
        while self.ok < ok_before + 3 and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.02)
        self._stop.set()
        self._thread.join(30)

    def check(self) -> None:
        assert self.crash is None, f"the canary crashed: {type(self.crash).__name__}: {self.crash}"
        assert not self._thread.is_alive(), "the canary did not stop"
        assert not self.failures, self.failures[:5]
        assert self.ok_before is not None and self.ok >= self.ok_before + 3, \
            f"no answers after the attack ({self.ok - (self.ok_before or 0)} of 3)"
        assert self.ok >= 3


@pytest.fixture
def canary(server, queries, expected):
    with Canary(server.port, queries, expected) as c:
        yield c
    c.check()


def _assert_json_error(r, status):
    assert r is not None, "no answer"
    assert r.status == status and r.is_json_error(), (r.status, r.headers, r.body[:300])


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Read until the server closes (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
    return False


# ---- bodies ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body, fragment", [
    (b"[" * 1000 + b"]" * 1000, "nested 1000 levels"),
    (b'{"queries": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested"),
    (b'{"queries": ["a"], "junk": ' + b'{"a":' * 2000 + b"1" + b"}" * 2000 + b"}", "nested"),
    (b'{"queries": ["a"], "topk": ' + b"9" * 5000 + b"}", "5000 characters"),
    (b'{"queries": ["a"], "topk": -' + b"9" * 5000 + b"}", "characters"),
    (b'{"queries": ["a"], "topk": 1' + b"0" * 400 + b".5}", "characters"),
    (b'{"queries": ["a"], "topk": Infinity}', "Infinity is not JSON"),
    (b"[" * 4_000_000, "levels deep or more"),  # scanned off the event loop: the canary is not held up
])
def test_hostile_json_gets_400(server, canary, body, fragment):
    r = http_request(server.port, "POST", "/retrieve", body, {"Content-Type": "application/json"})
    _assert_json_error(r, 400)
    assert fragment in r.json()["error"]


def test_a_big_valid_request_is_answered(server, canary, queries, expected):
    qs = [q + " " + "x" * 80 for q in queries] * 200  # 4,000 queries, ~400 KB
    r = http_request(server.port, "POST", "/retrieve", json.dumps({"queries": qs, "topk": 1}).encode(),
                     {"Content-Type": "application/json"}, timeout=60)
    assert r.status == 200 and len(r.json()["result"]) == 4000
    # brackets inside strings, after escaped quotes and backslashes, are text, not nesting
    tricky = '"[' * 50 + "\\" + "[{" * 50
    r = http_request(server.port, "POST", "/retrieve", json.dumps({"queries": [tricky, queries[0]]}).encode(),
                     {"Content-Type": "application/json"})
    assert r.status == 200 and [d["id"] for d in r.json()["result"][1]] == expected[queries[0]]


def test_numbers_json_accepts_are_range_checked(server, canary):
    for topk in ("1e999", "3.0", "-1", "101", "12345678901234567890"):
        r = http_request(server.port, "POST", "/retrieve", b'{"queries": ["a"], "topk": %s}' % topk.encode(),
                         {"Content-Type": "application/json"})
        _assert_json_error(r, 422)


@pytest.fixture(scope="module")
def patient_server(bm25):
    """Default read and idle timeouts (a 9 MB body or 1,000 connections take a while on a busy machine)."""
    with RetrievalServer(bm25, ServerConfig(port=0)) as srv:
        yield srv


def test_huge_bodies_get_a_json_413(patient_server, queries, expected):
    """A 9 MB body (limit 8 MiB) sent whole by a client that reads only after sending, as requests does: the
    client reads a JSON 413, not a broken pipe. Chunked too; a declared 10 GB body is refused without waiting."""
    with Canary(patient_server.port, queries, expected) as c:
        _huge_bodies(patient_server)
    c.check()


def _huge_bodies(server) -> None:
    big = json.dumps({"queries": ["x" * 1000] * 9000}).encode()
    assert len(big) > 9_000_000
    _assert_json_error(http_request(server.port, "POST", "/retrieve", big, {"Content-Type": "application/json"},
                                    timeout=60), 413)
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" % server.port)
        chunk = b"y" * 1_000_000
        for _ in range(9):
            s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        s.sendall(b"0\r\n\r\n")
        _assert_json_error(read_response(s, 30), 413)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 10000000000\r\n\r\n" % server.port)
        _assert_json_error(read_response(s, 10), 413)


# ---- methods, paths, content types, the request line, headers ---------------------------------------------
@pytest.mark.parametrize("method, path, status", [
    ("GET", "/retrieve", 405), ("PUT", "/retrieve", 405), ("DELETE", "/health", 405), ("BREW", "/retrieve", 405),
    ("GET", "/", 404), ("POST", "/retrieve/x", 404), ("GET", "/health/../etc/passwd", 404),
])
def test_wrong_methods_and_paths(server, canary, method, path, status):
    _assert_json_error(http_request(server.port, method, path), status)


@pytest.mark.parametrize("ctype, status", [
    ("text/plain", 415), ("application/x-www-form-urlencoded", 415), ("multipart/form-data; boundary=x", 415),
    ("application/json; charset=utf-8", 200), ("application/vnd.api+json", 200),
    (None, 415),  # what a browser's no-cors fetch with a Blob body sends: no Content-Type at all
])
def test_content_types(server, canary, ctype, status):
    r = http_request(server.port, "POST", "/retrieve", b'{"queries": ["alpha"]}', {"Content-Type": ctype})
    assert r.status == status
    if status != 200:
        _assert_json_error(r, status)


@pytest.mark.parametrize("raw, status", [
    (b"HELLO\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n", 431),
    (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400),
    (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40 + b"\r\n\r\n", 400),  # a TLS hello
])
def test_what_the_parser_rejects_gets_a_json_error_and_a_close(server, canary, raw, status):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(raw)
        _assert_json_error(read_response(s, 10), status)
        assert _closed_within(s, 5)


# ---- slow clients ------------------------------------------------------------------------------------------
def _trickle(sock: socket.socket, data: bytes, interval: float, seconds: float, why: dict) -> None:
    """Send ``data`` one byte per ``interval`` for at most ``seconds`` (the server may close first); ``why["stop"]``
    says why it stopped: "closed" (by the server), "deadline" or "done" (all of ``data`` sent)."""
    deadline = time.monotonic() + seconds
    for b in data:
        if time.monotonic() > deadline:
            why["stop"] = "deadline"
            return
        try:
            sock.sendall(bytes([b]))
        except OSError:
            why["stop"] = "closed"
            return
        time.sleep(interval)
    why["stop"] = "done"


@pytest.mark.parametrize("head, trickled", [
    (b"", b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"),  # headers trickled
    (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\nContent-Type: application/json\r\n"
     b"Content-Length: 200\r\n\r\n", b'{"queries": ["' + b"a" * 150),
])
def test_slow_loris_gets_a_408_within_the_read_timeout(server, canary, head, trickled):
    """The server cuts a trickling client off at its read timeout (a 408, then a close) instead of waiting for the
    trickle: the sender sees the close long before it would have sent everything (70+ bytes at 0.2 s each)."""
    why: dict = {}
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(head.replace(b"PORT", b"%d" % server.port))
        sender = threading.Thread(target=_trickle, args=(s, trickled, 0.2, 30.0, why), daemon=True)
        sender.start()
        r = read_response(s, 10)
        sender.join(40)
        assert not sender.is_alive(), "the trickle did not stop"
    _assert_json_error(r, 408)
    assert why.get("stop") == "closed", why  # bounded by the server's deadline, not by the trickle


def test_idle_connections_are_closed(server, canary):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:  # never sends a byte
        assert _closed_within(s, IDLE_TIMEOUT_S + 5)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:  # idle after one answer
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % server.port)
        assert read_response(s, 10).status == 200
        assert _closed_within(s, IDLE_TIMEOUT_S + 5)


def test_half_closed_connections(server, canary, queries, expected):
    """A client that sends its request and shuts its sending side gets its whole answer, then a close; one that
    shuts down in the middle of a request is closed without an answer."""
    body = json.dumps({"queries": [queries[0]], "topk": 3}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (server.port, len(body)) + body)
        s.shutdown(socket.SHUT_WR)
        r = read_response(s, 30)
        assert r is not None and r.status == 200
        assert [d["id"] for d in r.json()["result"][0]] == expected[queries[0]]
        assert _closed_within(s, 5)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"queries\"" % server.port)
        s.shutdown(socket.SHUT_WR)
        assert _closed_within(s, 5)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\nGET /hea" % server.port)
        s.shutdown(socket.SHUT_WR)
        assert read_response(s, 10).status == 200
        assert _closed_within(s, 5)


# ---- many connections --------------------------------------------------------------------------------------
def _raise_fd_limit(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        if hard != resource.RLIM_INFINITY and hard < n:
            pytest.skip(f"needs {n} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def test_1000_concurrent_connections(patient_server, queries, expected):
    """1,000 connections open at once, each sending a request before any answer is read: every one gets the
    right answer, none is dropped."""
    _raise_fd_limit(4096)
    with Canary(patient_server.port, queries, expected) as c:
        _many_connections(patient_server, 1000, queries, expected)
    c.check()


def _many_connections(server, n: int, queries, expected) -> None:

    async def one(i: int):
        q = queries[i % len(queries)]
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            await opened.wait()  # all connections are open before any request is sent
            body = json.dumps({"queries": [q], "topk": 3}).encode()
            writer.write(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % (server.port, len(body)) + body)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int([h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0])
            payload = json.loads(await reader.readexactly(length))
            return int(head.split()[1]) == 200 and [d["id"] for d in payload["result"][0]] == expected[q]
        finally:
            writer.close()

    async def main():
        tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
        deadline = time.monotonic() + 60
        while sum(1 for p in server._uvicorn.server_state.connections) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        peak = len(server._uvicorn.server_state.connections)
        opened.set()
        return peak, await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)

    opened = None

    async def run():
        nonlocal opened
        opened = asyncio.Event()
        return await main()

    peak, results = asyncio.run(run())
    assert peak >= n
    failures = [r for r in results if r is not True]
    assert not failures, failures[:5]


class _HeldSearch:
    """``bm25``'s search, held until ``release`` is set (bounded: 60 s): requests in flight stay busy."""

    def __init__(self, index, release: threading.Event):
        self.index, self.release = index, release

    def search(self, queries, topk=3):
        self.release.wait(60)
        return self.index.search(queries, topk)


def test_connections_over_the_limit_make_room_then_get_a_json_503(bm25, wait_until):
    """At the connection limit a new connection closes the longest-idle one, then the slowest request still
    arriving (a JSON 503), and is answered; only when every connection is busy in the app is it refused (503)."""
    release = threading.Event()
    body = json.dumps({"queries": ["alpha"]}).encode()
    with RetrievalServer(_HeldSearch(bm25, release), ServerConfig(port=0, max_connections=4)) as srv:
        host = b"127.0.0.1:%d" % srv.port  # without a token only loopback Host names are answered
        search = (b"POST /retrieve HTTP/1.1\r\nHost: " + host + b"\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)

        def counts() -> dict:
            return connection_counts(srv._uvicorn.server_state)

        def busy_one() -> socket.socket:  # a request held in the search: busy in the app
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            s.sendall(search)
            return s

        idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(4)]
        busy: list[socket.socket] = []
        try:
            wait_until(lambda: counts()["idle"] == 4, "the server to hold 4 idle connections")
            assert http_request(srv.port, "GET", "/health").status == 200  # room made: the oldest idle one closed
            assert _closed_within(idle[0], 10)
            slow = idle[1]
            slow.sendall(b"POST /retrieve HTTP/1.1\r\nHost: " + host + b"\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 50\r\n\r\n{\"que")
            wait_until(lambda: counts()["reading"] == 1 and counts()["open"] == 3, "idle 2, 3 and the slow one")
            busy.append(busy_one())
            wait_until(lambda: counts()["idle"] == 2 and counts()["open"] == 4, "the first busy one")
            busy.append(busy_one())  # makes room: idle[2], the longest idle, goes
            assert _closed_within(idle[2], 10)
            assert http_request(srv.port, "GET", "/health").status == 200  # idle[3] goes
            assert _closed_within(idle[3], 10)
            wait_until(lambda: counts()["open"] == 3, "the slow one and 2 busy")
            busy.append(busy_one())
            # (a fresh connection is idle until its request is read: the only idle one would be the one to go)
            wait_until(lambda: counts()["open"] == 4 and not counts()["idle"], "3 busy and the slow one")
            assert http_request(srv.port, "GET", "/health").status == 200  # no idle one left: the slow request goes
            r = read_response(slow, 10)
            _assert_json_error(r, 503)
            assert "slowest" in r.json()["error"] and r.headers["retry-after"] == "1"
            wait_until(lambda: counts()["open"] == 3, "3 busy")
            busy.append(busy_one())
            wait_until(lambda: counts()["open"] == 4 and not counts()["idle"], "4 busy connections")
            r = http_request(srv.port, "GET", "/health")  # every connection busy: refused
            _assert_json_error(r, 503)
            assert r.headers["retry-after"] == "1" and counts()["refused"] == 1
            assert counts()["evicted_idle"] == 3 and counts()["evicted_reading"] == 1
            release.set()
            for s in busy:  # the held requests are all answered
                assert read_response(s, 30).status == 200
        finally:
            release.set()
            for s in idle + busy:
                s.close()
        wait_until(lambda: not srv._uvicorn.server_state.connections, "the connections to be closed")
        assert post_json(srv.port, {"queries": ["alpha"]}).status == 200


# ---- who may connect ----------------------------------------------------------------------------------------------
def test_a_token_guards_every_request_and_a_remote_bind_needs_one(bm25, caplog):
    from retrieval.client import RetrievalClient
    from retrieval.errors import ClientError

    with RetrievalServer(bm25, ServerConfig(port=0, auth_token="s3cret")) as srv:
        _assert_json_error(http_request(srv.port, "GET", "/health"), 401)
        _assert_json_error(http_request(srv.port, "GET", "/health", headers={"Authorization": "Bearer wrong"}), 401)
        assert http_request(srv.port, "GET", "/health", headers={"Authorization": "Bearer s3cret"}).status == 200
        got = RetrievalClient(srv.url, auth_token="s3cret").search(["alpha"], 2)[0]
        assert [h.id for h in got] == [h.id for h in bm25.search(["alpha"], 2)[0]]
        with pytest.raises(ClientError):
            RetrievalClient(srv.url, auth_token="nope").search(["alpha"], 2)
    # a non-loopback bind without a token is refused before any socket is bound; with --allow-remote it warns
    with pytest.raises(ValueError, match="--auth-token"):
        RetrievalServer(bm25, ServerConfig(host="0.0.0.0", port=0))
    from retrieval.http_limits import check_bind

    with caplog.at_level("WARNING"):
        check_bind("0.0.0.0", None, True, "the retrieval server")
    assert "no auth token" in caplog.text
    check_bind("::1", None, False, "x")
    check_bind("10.1.2.3", "tok", False, "x")
