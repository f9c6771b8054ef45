"""The Host, Origin and Content-Type rules of retrieval.browser_guard, without a server (the server applies them in
test_retrieval_server.py; a real browser attacks them in tests/fuzz/test_fuzz_retrieval.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from retrieval.browser_guard import (BrowserGuard, host_allowed, is_json_content_type, normalize_origins,
                                     origin_allowed, split_host)

ORIGINS = normalize_origins(["https://search.example/", "HTTP://LocalHost:9000"])


def test_normalize_origins():
    assert ORIGINS == {"https://search.example", "http://localhost:9000"}
    for bad in ("search.example", "ftp://x", "http://x/path", "http://", "http://u@x", "http://x:99999", "null"):
        with pytest.raises(ValueError, match="origin"):
            normalize_origins([bad])


@pytest.mark.parametrize("value, parsed", [
    ("127.0.0.1:8000", ("127.0.0.1", 8000)), ("LOCALHOST", ("localhost", None)), ("[::1]:80", ("::1", 80)),
    ("[::1]", ("::1", None)), ("a:b:c", None), ("[::1", None), ("[::1]x", None), ("x:", None), ("x:0", None),
    ("x:65536", None), ("x:8a", None), (":80", None), ("", None), ("a b:1", None), ("u@x:1", None), ("x/y", None),
])
def test_split_host(value, parsed):
    assert split_host(value) == parsed


@pytest.mark.parametrize("host, ok", [
    ("127.0.0.1:8000", True), ("localhost:8000", True), ("[::1]:8000", True), ("127.0.0.2:8000", True),
    ("LocalHost:8000", True), ("app.localhost:8000", True),
    (None, True),  # HTTP/1.0 without Host: no browser sends that
    ("10.0.0.5:8000", True),  # the address the connection was made to (a wildcard bind)
    ("127.0.0.1:8001", False), ("localhost", False), ("127.0.0.1", False),  # not the server's port
    ("rebind.evil.example:8000", False), ("localhost.evil.example:8000", False), ("10.0.0.6:8000", False),
    ("0.0.0.0:8000", False), ("[::1:8000", False), ("", False),
    ("search.example", True), ("search.example:443", True), ("search.example:8000", False),  # an allowed origin
    ("localhost:9000", True), ("localhost:9001", False),
])
def test_host_rule(host, ok):
    assert host_allowed(host, 8000, ORIGINS, "10.0.0.5") is ok


def test_host_rule_on_port_80():
    assert host_allowed("localhost", 80) and host_allowed("localhost:80", 80) and not host_allowed("localhost:81", 80)


@pytest.mark.parametrize("origin, host, ok", [
    (None, "127.0.0.1:8000", True),  # not a browser, or a same-origin GET
    ("http://127.0.0.1:8000", "127.0.0.1:8000", True), ("http://127.0.0.1:8000/", "127.0.0.1:8000", True),
    ("https://search.example", "127.0.0.1:8000", True), ("http://localhost:9000", "x", True),
    ("http://127.0.0.1:3000", "127.0.0.1:8000", False), ("null", "127.0.0.1:8000", False),
    ("http://evil.example", "127.0.0.1:8000", False), ("http://127.0.0.1:8000", None, False),
])
def test_origin_rule(origin, host, ok):
    assert origin_allowed(origin, host, ORIGINS) is ok


@pytest.mark.parametrize("value, ok", [
    ("application/json", True), ("Application/JSON; charset=utf-8", True), ("application/vnd.api+json", True),
    (None, False), ("", False), ("text/plain", False), ("application/x-www-form-urlencoded", False),
    ("multipart/form-data; boundary=x", False), ("text/json", False), ("application/jsonx", False),
])
def test_json_content_type(value, ok):
    assert is_json_content_type(value) is ok


def _call(guard: BrowserGuard, scope_type: str, headers: dict[str, str]) -> list[dict]:
    sent: list[dict] = []
    scope = {"type": scope_type, "server": ("127.0.0.1", 8000),
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(msg):
        sent.append(msg)

    asyncio.run(guard(scope, receive, send))
    return sent


def test_the_middleware_refuses_with_a_json_403_or_a_closed_handshake():
    async def app(scope, receive, send):
        await send({"type": "app"})

    guard = BrowserGuard(app, check_host=True, allowed_origins=["http://localhost:9000"])
    assert _call(guard, "http", {"Host": "127.0.0.1:8000"}) == [{"type": "app"}]
    sent = _call(guard, "http", {"Host": "rebind.evil.example:8000"})
    assert sent[0]["status"] == 403 and "rebind.evil.example" in json.loads(sent[1]["body"])["error"]
    sent = _call(guard, "http", {"Host": "127.0.0.1:8000", "Origin": "http://evil.example"})
    assert sent[0]["status"] == 403 and "Origin" in json.loads(sent[1]["body"])["error"]
    assert _call(guard, "websocket", {"Host": "127.0.0.1:8000", "Origin": "http://evil.example"}) == \
        [{"type": "websocket.close", "code": 1008}]
    assert _call(guard, "http", {"Host": "127.0.0.1:8000", "Origin": "http://localhost:9000"}) == [{"type": "app"}]
    tokened = BrowserGuard(app, check_host=False, error_key="detail")  # with a token: the Origin rule only
    assert _call(tokened, "http", {"Host": "gpu-box.lan:8000"}) == [{"type": "app"}]
    sent = _call(tokened, "http", {"Host": "gpu-box.lan:8000", "Origin": "http://evil.example"})
    assert sent[0]["status"] == 403 and "detail" in json.loads(sent[1]["body"])
