"""A minimal OpenAI-compatible chat-completions server for tests, on 127.0.0.1 (an ephemeral port).

Replies are scripted: ``replies`` maps a user prompt to the assistant text (``default`` otherwise; ``None`` answers
``"content": null``, as servers do for a refusal or a tool call). Failures are
injected per prompt and attempt: ``faults(prompt, attempt)`` returns ``None`` (answer normally), an HTTP status
(e.g. 429, 500, 400), ``"sleep"`` (stall until the server is closed, at most ``sleep_s``, so the client's timeout
always fires first however slow the machine) or ``"garbage"`` (a non-JSON 200).
``raw(prompt, attempt)`` may return a whole 200 body (bytes, sent as is: malformed answers for the fuzz tests).
``hostile(prompt, attempt)`` may return a writer that takes over the connection (the status line, headers and body
it sends, at its own pace: :func:`redirect`, :func:`drip`, :func:`flood`); each stops when the server is closed.
The server answers at most ``max_requests`` requests (then 503 for ever), so no client loop can run unbounded.
``latency_s`` delays every answer; ``max_active`` records the most requests it was answering at once and each log
entry the client's ``(host, port)``: distinct ports are distinct connections (keep-alive reuses them).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

#: A hostile writer: called with the request handler (``handler.wfile``) and the server (``server.release``).
Writer = Callable[[BaseHTTPRequestHandler, "ScriptedServer"], None]


def redirect(location: str, status: int = 302) -> Writer:
    """A redirect to ``location`` (another origin in the tests: a second server that records who came)."""
    def write(h: BaseHTTPRequestHandler, server: "ScriptedServer") -> None:
        h.send_response(status)
        h.send_header("Location", location)
        h.send_header("Content-Length", "0")
        h.end_headers()
    return write


def drip(body: bytes, interval_s: float = 1.0, *, headers_too: bool = False, max_s: float = 120.0) -> Writer:
    """A 200 answer sent one byte every ``interval_s`` (the headers too with ``headers_too``): a client with only a
    per-read socket timeout waits for ever. Stops at ``max_s`` or when the server closes."""
    def write(h: BaseHTTPRequestHandler, server: "ScriptedServer") -> None:
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                .encode())
        if not headers_too:
            h.wfile.write(head)
            h.wfile.flush()
            head = b""
        end = time.monotonic() + max_s
        for i in range(len(head + body)):
            if server.release.wait(interval_s) or time.monotonic() > end:
                return
            h.wfile.write((head + body)[i:i + 1])
            h.wfile.flush()
    return write


def flood(total_bytes: int = 4 << 30, *, declare: bool = False, max_s: float = 60.0) -> Writer:
    """A 200 answer of ``total_bytes`` (a JSON string that never ends), streamed as fast as the client reads it,
    with its Content-Length when ``declare``, else until the connection closes (no length: HTTP/1.0 style)."""
    def write(h: BaseHTTPRequestHandler, server: "ScriptedServer") -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        if declare:
            h.send_header("Content-Length", str(total_bytes))
        else:
            h.send_header("Connection", "close")
            h.close_connection = True
        h.end_headers()
        chunk = b'{"choices": [{"message": {"content": "' + b"x" * (256 * 1024)
        sent, end = 0, time.monotonic() + max_s
        while sent < total_bytes and not server.release.is_set() and time.monotonic() < end:
            h.wfile.write(chunk)
            sent += len(chunk)
            chunk = b"x" * (256 * 1024)
        server.flooded = max(getattr(server, "flooded", 0), sent)
    return write


class ScriptedServer:
    def __init__(self, replies: dict[str, str | None] | None = None, default: str = "<action>inventory</action>",
                 faults: Callable[[str, int], object] | None = None, sleep_s: float = 60.0, max_requests: int = 5000,
                 latency_s: float = 0.0, raw: Callable[[str, int], bytes | None] | None = None,
                 hostile: Callable[[str, int], Writer | None] | None = None):
        self.replies = dict(replies or {})
        self.default = default
        self.faults = faults or (lambda prompt, attempt: None)
        self.sleep_s = sleep_s
        self.release = threading.Event()  # set on close: frees stalled handlers
        self.max_requests = max_requests
        self.attempts: dict[str, int] = {}
        self.log: list[dict] = []  # one entry per request: prompt, attempt, outcome, headers, body
        self.lock = threading.Lock()
        self.latency_s = latency_s
        self.raw = raw or (lambda prompt, attempt: None)  # bytes: the whole 200 body, sent as is (malformed answers)
        self.hostile = hostile or (lambda prompt, attempt: None)  # a writer that takes over the connection
        self.flooded = 0  # the most bytes a flood() writer sent
        self.active = self.max_active = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms Nagle + delayed-ACK stall per answer

            def log_message(self, *a):  # keep test output clean
                pass

            def _send(self, status: int, payload: bytes, headers: dict | None = None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):  # what a client that follows a POST's 301/302/303 sends (urllib did): logged, answered
                with server.lock:
                    server.log.append({"prompt": None, "method": "GET", "path": self.path, "attempt": 0,
                                       "outcome": "get", "auth": self.headers.get("Authorization"), "body": None,
                                       "peer": self.client_address})
                text = server.default
                payload = {"id": "chatcmpl-test", "object": "chat.completion", "model": "m",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": text}}]}
                return self._send(200, json.dumps(payload).encode())

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n))
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error": "not found"}')
                prompt = body["messages"][-1]["content"]
                with server.lock:
                    attempt = server.attempts.get(prompt, 0)
                    server.attempts[prompt] = attempt + 1
                    over = len(server.log) >= server.max_requests
                    fault = "over" if over else server.faults(prompt, attempt)
                    server.log.append({"prompt": prompt, "attempt": attempt, "outcome": fault,
                                       "auth": self.headers.get("Authorization"), "body": body,
                                       "peer": self.client_address})
                    server.active += 1
                    server.max_active = max(server.max_active, server.active)
                try:
                    return self._answer(body, prompt, fault)
                finally:
                    with server.lock:
                        server.active -= 1

            def _answer(self, body, prompt, fault):
                if fault == "over":
                    return self._send(503, b'{"error": "request budget exhausted"}')
                if isinstance(fault, int):
                    return self._send(fault, json.dumps({"error": {"message": f"injected {fault}"}}).encode(),
                                      {"Retry-After": "0"} if fault == 429 else None)
                if fault == "garbage":
                    return self._send(200, b"<html>not json")
                writer = server.hostile(prompt, server.attempts[prompt] - 1)
                if writer is not None:
                    try:
                        writer(self, server)
                    except (BrokenPipeError, ConnectionResetError):  # the client hung up: what it should do
                        pass
                    self.close_connection = True
                    return None
                raw = server.raw(prompt, server.attempts[prompt] - 1)
                if raw is not None:
                    return self._send(200, raw)
                if fault == "sleep":
                    server.release.wait(server.sleep_s)
                elif server.latency_s:
                    server.release.wait(server.latency_s)
                text = server.replies.get(prompt, server.default)
                payload = {"id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": text}}],
                           "usage": {"prompt_tokens": len(prompt.split()),
                                     "completion_tokens": len((text or "").split()),
                                     "total_tokens": len(prompt.split()) + len((text or "").split())}}
                return self._send(200, json.dumps(payload).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
