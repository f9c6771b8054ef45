"""The HTTP limits layer of both servers, :mod:`retrieval.server` and ``agentgym serve`` (:mod:`agentgym.serve.app`):
uvicorn's h11 protocol plus the guards uvicorn does not have. (It lives in ``retrieval``, the leaf package, so that
``agentgym`` may use it and ``retrieval`` depends on nothing above it.)

uvicorn (with h11) parses requests, bounds header size (``h11_max_incomplete_event_size``), keeps connections
alive and shuts down gracefully. :class:`GuardedH11Protocol` adds, per connection:

* ``TCP_NODELAY`` (set explicitly: a kept-alive client must never wait for Nagle's algorithm), and the writes of
  one loop iteration coalesced into one ``send`` (uvicorn writes a response's head and body separately: without
  Nagle each write would be a syscall and a TCP segment of its own);
* a read deadline: a request must arrive whole (headers and body) within ``request_timeout_s`` of its first byte,
  else the client gets a JSON 408 and the connection closes -- uvicorn has no such timeout, so one client
  trickling bytes (slow-loris) could hold a connection forever;
* an idle deadline from the moment a connection opens, at most ``request_timeout_s`` (uvicorn arms its keep-alive
  timer only after a response, so a connection that never sends anything was never closed); after each answer the
  connection may stay idle for ``idle_timeout_s`` (uvicorn's keep-alive timeout);
* a bound on request-body bytes read and dropped after the app answered early (a 413 for a body over the limit is
  sent at once; the rest of the body is read and dropped so that the client, still sending, does not get a reset
  before it reads the 413 -- up to ``max_discard_bytes``, then the connection closes);
* a write deadline: an answer that sits in a full send buffer (the client reads nothing) for ``write_timeout_s``
  gets its connection aborted, which frees what was buffered for it (uvicorn has no write timeout, so a client that
  never reads held its answer in memory for as long as it kept the socket open);
* half-closed connections: a client that sends its request and then shuts its side down (EOF) still gets its
  answer, and the connection then closes (asyncio would otherwise close the transport at EOF and drop the answer);
* a bound on the request line + headers (``max_header_bytes``; h11's own bound only applies while they are
  incomplete) answered with a JSON 431;
* a JSON body for what the parser rejects before the app runs (a garbage request line, a bad Content-Length:
  ``{"error": "invalid HTTP request: ..."}`` with h11's status) and for connections over
  ``max_connections`` (503 with ``Retry-After``), instead of uvicorn's plain-text pages (``error_key`` names the
  field: ``error`` for the retrieval server, FastAPI's ``detail`` for ``agentgym serve``).

Only open connections count against ``max_connections``; the requests in flight are each server's own bound (the
retrieval server's queue, ``agentgym serve``'s sessions and stateless slots), and uvicorn's ``limit_concurrency``
(which counts idle connections too, so that idle sockets could deny service) is off. A WebSocket upgrade hands its
connection to uvicorn's WebSocket protocol, which these guards no longer watch (the app bounds its sessions).

Only this module imports uvicorn and h11 (``pip install 'agentgym-kit[retrieval]'`` or ``'agentgym-kit[serve]'``).
"""

from __future__ import annotations

import http
import json
import socket
import struct
import sys
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HttpLimits", "GuardedH11Protocol", "protocol_class", "json_response_bytes", "uvicorn_config",
           "is_loopback_host", "check_bind", "bearer_token_ok", "BearerAuth"]


@dataclass(frozen=True)
class HttpLimits:
    """Per-connection limits of :class:`GuardedH11Protocol` (see the module docstring).

    Attributes:
        request_timeout_s: a request (headers and body) must arrive whole within this of its first byte (408), and a
            fresh connection must start one within this (or ``idle_timeout_s`` if shorter), else it is closed.
        idle_timeout_s: how long a kept-alive connection may wait between requests.
        write_timeout_s: how long an answer may sit in a full send buffer (the client takes nothing) before the
            connection is dropped (aborted: what was buffered for it is freed).
        max_header_bytes: the request line + headers (431 beyond).
        max_connections: open connections beyond which a new one is answered 503 and closed.
        max_discard_bytes: body bytes read and dropped after an early answer before the connection closes.
        retry_after_s: the ``Retry-After`` of the 503.
        error_key: the JSON field of the layer's own error answers.
    """

    request_timeout_s: float = 30.0
    idle_timeout_s: float = 60.0
    write_timeout_s: float = 30.0
    max_header_bytes: int = 16 * 1024
    max_connections: int = 4096
    max_discard_bytes: int = 16 * 1024 * 1024
    retry_after_s: int = 1
    error_key: str = "error"

    def __post_init__(self):
        if self.request_timeout_s <= 0 or self.idle_timeout_s <= 0 or self.write_timeout_s <= 0:
            raise ValueError("request_timeout_s, idle_timeout_s and write_timeout_s must be > 0")
        if self.max_connections < 1 or self.max_header_bytes < 1024:
            raise ValueError("max_connections must be >= 1 and max_header_bytes >= 1024")


def json_response_bytes(status: int, payload: dict, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A complete HTTP/1.1 response with a JSON body and ``Connection: close``, for writing straight to a transport
    that is about to close."""
    body = json.dumps(payload).encode("utf-8")
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}", "content-type: application/json",
             f"content-length: {len(body)}", "connection: close", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _over_capacity_app(retry_after_s: int, error_key: str):
    body = json.dumps({error_key: "too many open connections; try again later"}).encode()

    async def app(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"retry-after", str(retry_after_s).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    return app


class _CoalescingTransport:
    """A transport whose ``write`` calls within one event-loop iteration go out as one ``write`` (at the end of the
    iteration, or before ``close``); everything else is the real transport's."""

    def __init__(self, transport, loop):
        self._transport, self._loop = transport, loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def writelines(self, chunks) -> None:  # through the same queue: a direct write would overtake pending bytes
        for data in chunks:
            self.write(data)

    def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name):
        return getattr(self._transport, name)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the guards of the module docstring. Use :func:`protocol_class` to bind limits."""

    limits: HttpLimits = HttpLimits()

    # ---- connection life ----------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(_CoalescingTransport(transport, self.loop))
        self._read_timer = None
        self._discarded = 0
        self._upgraded = False
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if len(self.connections) > self.limits.max_connections:
            self.app = _over_capacity_app(self.limits.retry_after_s, self.limits.error_key)
        # the idle deadline of a fresh connection (uvicorn's own timer, which any received byte cancels): a connection
        # must start its first request within the request timeout
        first = min(self.timeout_keep_alive, self.limits.request_timeout_s)
        self.timeout_keep_alive_task = self.loop.call_later(first, self.timeout_keep_alive_handler)

    def connection_lost(self, exc) -> None:
        self._cancel_read_timer()
        self._cancel_write_timer()
        super().connection_lost(exc)

    # ---- the write deadline: a client that stops reading its answer is dropped ---------------------------------
    def pause_writing(self) -> None:
        super().pause_writing()
        if getattr(self, "_write_timer", None) is None:
            self._write_timer = self.loop.call_later(self.limits.write_timeout_s, self._on_write_timeout)

    def resume_writing(self) -> None:
        self._cancel_write_timer()
        super().resume_writing()

    def _cancel_write_timer(self) -> None:
        timer = getattr(self, "_write_timer", None)
        if timer is not None:
            timer.cancel()
            self._write_timer = None

    def _on_write_timeout(self) -> None:
        self._write_timer = None
        transport = self.transport
        if isinstance(transport, _CoalescingTransport):
            transport = transport._transport
        sock = transport.get_extra_info("socket")
        try:  # a reset, not a FIN queued behind the unread bytes: the kernel frees its buffer too
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:  # already closed
            pass
        transport.abort()  # not close(): close would wait, forever, for the buffer to drain

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self._head_too_long(data):
            return
        if self._discarding():
            self._discarded += len(data)
            if self._discarded > self.limits.max_discard_bytes:
                self._cancel_read_timer()
                self.transport.close()
                return
        super().data_received(data)
        self._update_read_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is not h11.SEND_BODY:
            self._discarded = 0
        self._update_read_timer()

    def handle_websocket_upgrade(self, event) -> None:
        # The WebSocket protocol that takes this connection over gets the real transport, with what is pending
        # written first: the coalescing wrapper is for HTTP answers, and the WebSocket library writes frames in
        # ways (writelines, direct writes) whose order the wrapper must never change.
        # From here on the connection is the WebSocket protocol's: none of this layer's timers may write to it (the
        # upgrade request's h11 state still reads as a request in progress, which would arm the read deadline and
        # put an HTTP 408 into the WebSocket stream).
        self._upgraded = True
        self._cancel_read_timer()
        if isinstance(self.transport, _CoalescingTransport):
            self.transport._flush()
            self.transport = self.transport._transport
        super().handle_websocket_upgrade(event)

    def eof_received(self):  # type: ignore[override]
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and self.conn.their_state is h11.DONE:
            cycle.keep_alive = False  # answer, then close: the client will send nothing more
            return True  # keep the transport open for writing the answer
        return None  # nothing left to answer (or a request cut short): asyncio closes the transport

    # ---- the read deadline --------------------------------------------------------------------------------
    def _request_in_progress(self) -> bool:
        state = self.conn.their_state
        return state is h11.SEND_BODY or (state is h11.IDLE and bool(self.conn.trailing_data[0]))

    def _head_too_long(self, data: bytes) -> bool:
        """A request line + headers over ``max_header_bytes``: 431 and close. (h11's own bound only applies while
        the head is incomplete; a long head that arrives whole would pass it.)"""
        buf = self.conn.trailing_data[0] + data
        end = buf.find(b"\r\n\r\n")
        size = end + 4 if end >= 0 else len(buf)
        if size <= self.limits.max_header_bytes:
            return False
        self._cancel_read_timer()
        if not self.transport.is_closing():
            self.transport.write(json_response_bytes(
                431, {self.limits.error_key: f"the request line and headers are over {self.limits.max_header_bytes} bytes"}))
            self.transport.close()
        return True

    def _discarding(self) -> bool:
        return (self.cycle is not None and self.cycle.response_complete
                and self.conn.their_state is h11.SEND_BODY)

    def _update_read_timer(self) -> None:
        if self._upgraded or self.transport.is_closing():
            self._cancel_read_timer()
        elif self._request_in_progress():
            if self._read_timer is None:  # the deadline counts from the first byte, not the latest one
                self._read_timer = self.loop.call_later(self.limits.request_timeout_s, self._on_read_timeout)
        else:
            self._cancel_read_timer()

    def _cancel_read_timer(self) -> None:
        timer = getattr(self, "_read_timer", None)
        if timer is not None:
            timer.cancel()
            self._read_timer = None

    def _on_read_timeout(self) -> None:
        self._read_timer = None
        if self._upgraded or self.transport.is_closing():
            return
        cycle = self.cycle
        answered = (cycle is not None and cycle.response_started and self.conn.their_state is h11.SEND_BODY)
        if not answered:
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True  # the app (waiting for the body) sees a disconnect and writes nothing
                cycle.message_event.set()
            self.transport.write(json_response_bytes(
                408, {self.limits.error_key: f"the request did not arrive within {self.limits.request_timeout_s:g} s"}))
        self.transport.close()

    # ---- what the parser rejects --------------------------------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this inside its `except h11.RemoteProtocolError`, so the error is the one being handled
        exc = sys.exc_info()[1]
        status, detail = 400, msg
        if isinstance(exc, h11.RemoteProtocolError):
            status, detail = int(getattr(exc, "error_status_hint", 400) or 400), str(exc) or msg
        self._cancel_read_timer()
        if not self.transport.is_closing():
            self.transport.write(json_response_bytes(status, {self.limits.error_key: f"invalid HTTP request: {detail}"}))
            self.transport.close()


def protocol_class(limits: HttpLimits) -> type[GuardedH11Protocol]:
    """A :class:`GuardedH11Protocol` subclass bound to ``limits`` (uvicorn instantiates the class it is given)."""
    return type("LimitedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


def uvicorn_config(app, limits: HttpLimits, **options):
    """A ``uvicorn.Config`` serving ``app`` through :class:`GuardedH11Protocol` with ``limits``: the keep-alive
    timeout, the header bound and no ``limit_concurrency`` (see the module docstring); ``options`` are further
    ``uvicorn.Config`` arguments (loop, lifespan, WebSocket settings, ...)."""
    import uvicorn

    return uvicorn.Config(app, http=protocol_class(limits), timeout_keep_alive=limits.idle_timeout_s,
                          h11_max_incomplete_event_size=limits.max_header_bytes, limit_concurrency=None, **options)


# ---- who may connect: loopback by default, a bearer token for anything wider ------------------------------------------
def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); False for ``0.0.0.0``, ``::`` and the rest."""
    import ipaddress

    host = host.strip("[]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, auth_token: str | None, allow_remote: bool, server: str) -> None:
    """The bind rule of both servers: a non-loopback ``host`` needs a token, or ``allow_remote`` (then a warning is
    logged: anyone who can reach the port can use the server). Raises ValueError naming the flags."""
    import logging

    if is_loopback_host(host) or auth_token:
        return
    if not allow_remote:
        raise ValueError(f"{server}: refusing to bind {host!r} (not a loopback address) without a token: set "
                         "--auth-token (or its environment variable), or pass --allow-remote to serve without one")
    logging.getLogger(__name__).warning("%s listens on %s with no auth token (--allow-remote): anyone who can reach "
                                        "the port can use it", server, host)


def bearer_token_ok(headers, auth_token: str) -> bool:
    """Whether the ASGI ``headers`` (a list of byte pairs) carry ``Authorization: Bearer <auth_token>``; compared in
    constant time."""
    import hmac

    want = b"bearer " + auth_token.encode("utf-8")
    for name, value in headers:
        if name.lower() == b"authorization":
            got = bytes(value)
            # the scheme is case-insensitive; the token is compared whole, in constant time
            return hmac.compare_digest(got[:7].lower() + got[7:], want)
    return False


class BearerAuth:
    """ASGI middleware: every HTTP request and WebSocket upgrade must carry ``Authorization: Bearer <token>``; an HTTP
    request without it gets a JSON 401 (``WWW-Authenticate: Bearer``), a WebSocket upgrade a 403 (the handshake is
    refused before it is accepted)."""

    def __init__(self, app, auth_token: str, error_key: str = "error"):
        self.app, self.auth_token, self.error_key = app, auth_token, error_key

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or bearer_token_ok(scope.get("headers") or [], self.auth_token):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = json.dumps({self.error_key: "missing or wrong bearer token (Authorization: Bearer <token>)"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})
