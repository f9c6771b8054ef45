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

**At the connection limit, make room before refusing.** A new connection over ``max_connections`` first closes the
connection that has been idle longest (a fresh one that never sent a byte, or a kept-alive one between requests),
else the incomplete request that started longest ago (a slow-loris, a trickled body: it gets a JSON 503), and is
served; only when every open connection is busy (a request in the app, a WebSocket) is the new one answered 503.
The limit is counted before anything is authenticated, so this is what keeps sockets that never send a whole
request -- no token needed to open them -- from locking everyone else out: they are what gets closed first.
(:class:`_ConnectionPool` keeps both orders as insertion-ordered dicts: O(1) per event.)

And around the app (:func:`uvicorn_config`):

* a request with both ``Content-Length`` and ``Transfer-Encoding`` is refused (400, and the connection closes), as
  RFC 9112 section 6.3 allows: h11 would let chunked win and keep the connection, the framing a request smuggler
  relies on when a proxy reads the other header;
* log records that repeat are bounded (:class:`RepeatedLogLimit`: a few per message kind a minute, then a count of
  what was dropped), and what a client can cause (uvicorn's "Invalid HTTP request received", a WebSocket text
  frame that is not UTF-8, closed with 1007 as RFC 6455 says) is one line without a traceback;
* the soft limit on open files is raised towards ``max_connections`` (:func:`raise_open_files_limit`).

:class:`retrieval.browser_guard.BrowserGuard` (each app adds it) keeps web pages out of a loopback server: without a
token only ``Host`` names of the loopback address (and an allowed origin's host) are answered, so DNS rebinding finds
nothing, and a request whose ``Origin`` is another site's is refused.

Only this module imports uvicorn and h11 (``pip install 'agentgym-kit[retrieval]'`` or ``'agentgym-kit[serve]'``).
"""

from __future__ import annotations

import http
import json
import logging
import socket
import struct
import sys
import time
import weakref
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .browser_guard import is_loopback_host

__all__ = ["HttpLimits", "GuardedH11Protocol", "protocol_class", "json_response_bytes", "uvicorn_config",
           "check_bind", "bearer_token_ok", "BearerAuth", "RepeatedLogLimit",
           "limit_repeated_logs", "raise_open_files_limit", "connection_counts", "connection_totals"]

logger = logging.getLogger(__name__)


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
        max_connections: open connections beyond which a new one first closes the longest-idle connection (else
            the oldest incomplete request), and is answered 503 and closed only when every connection is busy.
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


class _ConnectionPool:
    """The connections of one server that may be closed to make room at the connection limit, oldest first: the
    idle ones (by when they became idle) and those with a request still arriving (by its first byte). Busy ones (a
    request in the app) and upgraded ones (WebSockets) are in neither. ``closing``: the connections closed to make
    room whose close has not completed yet (they still count in uvicorn's set until then)."""

    def __init__(self):
        self.idle: dict[GuardedH11Protocol, None] = {}
        self.reading: dict[GuardedH11Protocol, None] = {}
        self.closing: set[GuardedH11Protocol] = set()
        self.evicted_idle = 0
        self.evicted_reading = 0
        self.refused = 0

    def forget(self, conn: "GuardedH11Protocol") -> None:
        self.idle.pop(conn, None)
        self.reading.pop(conn, None)

    def make_room(self) -> bool:
        """Close the longest-idle connection, else the oldest incomplete request; False when there is neither."""
        for registry in (self.idle, self.reading):
            while registry:
                victim = next(iter(registry))
                del registry[victim]
                if victim.transport is None or victim.transport.is_closing():
                    continue
                if registry is self.idle:
                    self.evicted_idle += 1
                else:
                    self.evicted_reading += 1
                self.closing.add(victim)
                victim._close_to_make_room()
                return True
        return False


#: One pool per uvicorn server (its ``ServerState``), shared by every connection of that server.
_POOLS: "weakref.WeakKeyDictionary[object, _ConnectionPool]" = weakref.WeakKeyDictionary()


def connection_counts(server_state) -> dict[str, int]:
    """How a server's connections stand (for ``/health``-style reporting and tests): ``open`` (uvicorn's count,
    WebSockets included), ``idle`` and ``reading`` (what the limit may close), and the totals closed to make room
    (``evicted_idle``, ``evicted_reading``) or refused with a 503 (``refused``)."""
    pool = _POOLS.get(server_state) or _ConnectionPool()
    return {"open": len(server_state.connections), "idle": len(pool.idle), "reading": len(pool.reading),
            "evicted_idle": pool.evicted_idle, "evicted_reading": pool.evicted_reading, "refused": pool.refused}


def connection_totals() -> dict[str, int]:
    """:func:`connection_counts` summed over every server of this process (one, for ``agentgym serve``)."""
    totals = dict.fromkeys(("open", "idle", "reading", "evicted_idle", "evicted_reading", "refused"), 0)
    for state in list(_POOLS):
        for key, value in connection_counts(state).items():
            totals[key] += value
    return totals


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the guards of the module docstring. Use :func:`protocol_class` to bind limits."""

    limits: HttpLimits = HttpLimits()

    # ---- connection life ----------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(_CoalescingTransport(transport, self.loop))
        self._read_timer = None
        self._discarded = 0
        self._upgraded = False
        self._pool = _POOLS.get(self.server_state)
        if self._pool is None:
            self._pool = _POOLS[self.server_state] = _ConnectionPool()
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if len(self.connections) - len(self._pool.closing) > self.limits.max_connections:
            if not self._pool.make_room():
                self._pool.refused += 1
                self.app = _over_capacity_app(self.limits.retry_after_s, self.limits.error_key)
        self._pool.idle[self] = None
        # the idle deadline of a fresh connection (uvicorn's own timer, which any received byte cancels): a connection
        # must start its first request within the request timeout
        first = min(self.timeout_keep_alive, self.limits.request_timeout_s)
        self.timeout_keep_alive_task = self.loop.call_later(first, self.timeout_keep_alive_handler)

    def connection_lost(self, exc) -> None:
        self._cancel_read_timer()
        self._cancel_write_timer()
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.forget(self)
            pool.closing.discard(self)
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
                self._pool.forget(self)
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
        # put an HTTP 408 into the WebSocket stream), and the connection limit no longer closes it (the app bounds
        # its sessions).
        self._upgraded = True
        self._cancel_read_timer()
        self._pool.forget(self)
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

    def _close_to_make_room(self) -> None:
        """Closed by the connection limit (see :class:`_ConnectionPool`): an idle connection just closes (a client
        may always find a kept-alive connection closed); a request still arriving gets a JSON 503 first."""
        self._cancel_read_timer()
        self._unset_keepalive_if_required()
        if self._request_in_progress():
            self._abandon_request(json_response_bytes(
                503, {self.limits.error_key: "the server is at its connection limit and this request was the "
                                             "slowest still arriving; send it whole, and try again"},
                (("retry-after", str(self.limits.retry_after_s)),)))
        self.transport.close()

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
        self._pool.forget(self)
        if not self.transport.is_closing():
            self.transport.write(json_response_bytes(
                431, {self.limits.error_key: f"the request line and headers are over {self.limits.max_header_bytes} bytes"}))
            self.transport.close()
        return True

    def _discarding(self) -> bool:
        return (self.cycle is not None and self.cycle.response_complete
                and self.conn.their_state is h11.SEND_BODY)

    def _update_read_timer(self) -> None:
        """Arm or cancel the read deadline, and file the connection where the connection limit looks for room:
        idle, reading (a request still arriving) or neither (busy in the app, upgraded, closing)."""
        pool = self._pool
        if self._upgraded or self.transport.is_closing():
            self._cancel_read_timer()
            pool.forget(self)
        elif self._request_in_progress():
            if self._read_timer is None:  # the deadline counts from the first byte, not the latest one
                self._read_timer = self.loop.call_later(self.limits.request_timeout_s, self._on_read_timeout)
            pool.idle.pop(self, None)
            pool.reading.setdefault(self, None)  # keeps its place: ordered by the request's first byte
        else:
            self._cancel_read_timer()
            pool.reading.pop(self, None)
            if self.cycle is None or self.cycle.response_complete:
                pool.idle.setdefault(self, None)  # a connection already idle keeps its place
            else:
                pool.idle.pop(self, None)  # busy: the app has its request

    def _cancel_read_timer(self) -> None:
        timer = getattr(self, "_read_timer", None)
        if timer is not None:
            timer.cancel()
            self._read_timer = None

    def _on_read_timeout(self) -> None:
        self._read_timer = None
        if self._upgraded or self.transport.is_closing():
            return
        self._abandon_request(json_response_bytes(
            408, {self.limits.error_key: f"the request did not arrive within {self.limits.request_timeout_s:g} s"}))
        self.transport.close()
        self._pool.forget(self)

    def _abandon_request(self, answer: bytes) -> None:
        """A request that will not arrive whole: the app (if it is waiting for the body) sees a disconnect and
        writes nothing, and the client gets ``answer`` unless the app has already answered."""
        cycle = self.cycle
        answered = (cycle is not None and cycle.response_started and self.conn.their_state is h11.SEND_BODY)
        if answered:
            return
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.write(answer)

    # ---- what the parser rejects --------------------------------------------------------------------------
    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this inside its `except h11.RemoteProtocolError`, so the error is the one being handled
        exc = sys.exc_info()[1]
        status, detail = 400, msg
        if isinstance(exc, h11.RemoteProtocolError):
            status, detail = int(getattr(exc, "error_status_hint", 400) or 400), str(exc) or msg
        self._cancel_read_timer()
        self._pool.forget(self)
        if not self.transport.is_closing():
            self.transport.write(json_response_bytes(status, {self.limits.error_key: f"invalid HTTP request: {detail}"}))
            self.transport.close()


def protocol_class(limits: HttpLimits) -> type[GuardedH11Protocol]:
    """A :class:`GuardedH11Protocol` subclass bound to ``limits`` (uvicorn instantiates the class it is given)."""
    return type("LimitedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


class _AmbiguousFraming:
    """ASGI middleware: a request that declares both ``Content-Length`` and ``Transfer-Encoding`` gets a JSON 400
    and the connection closes (RFC 9112 section 6.3: a server may reject it, and must not keep the connection
    if it reads it). The body is never read."""

    def __init__(self, app, error_key: str):
        self.app, self.error_key = app, error_key

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            names = {name.lower() for name, _ in scope.get("headers") or ()}
            if b"content-length" in names and b"transfer-encoding" in names:
                body = json.dumps({self.error_key: "the request has both Content-Length and Transfer-Encoding; "
                                                   "send one (RFC 9112 section 6.3)"}).encode()
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def uvicorn_config(app, limits: HttpLimits, **options):
    """A ``uvicorn.Config`` serving ``app`` through :class:`GuardedH11Protocol` with ``limits``: the keep-alive
    timeout, the header bound, no ``limit_concurrency`` and the framing check (see the module docstring);
    ``options`` are further ``uvicorn.Config`` arguments (loop, lifespan, WebSocket settings, ...). Also bounds the
    repeated log lines of uvicorn's logger (:func:`limit_repeated_logs`) and raises the open-files limit to fit
    ``max_connections`` (:func:`raise_open_files_limit`)."""
    import uvicorn

    config = uvicorn.Config(_AmbiguousFraming(app, limits.error_key), http=protocol_class(limits),
                            timeout_keep_alive=limits.idle_timeout_s,
                            h11_max_incomplete_event_size=limits.max_header_bytes, limit_concurrency=None, **options)
    limit_repeated_logs("uvicorn.error")  # after the Config, which (re)configures uvicorn's loggers
    raise_open_files_limit(limits.max_connections + _SPARE_FILES)
    return config


#: Files a server needs besides its connections (the listener, log files, an index, the env's own files...).
_SPARE_FILES = 256


def raise_open_files_limit(wanted: int) -> int:
    """Raise this process's soft limit on open files (``RLIMIT_NOFILE``) to ``wanted`` where the hard limit allows
    (never lowers it): a server whose soft limit is under its connection limit would fail ``accept`` instead of
    answering. Logs a warning when the hard limit is lower; returns the soft limit now in force."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return wanted if soft == resource.RLIM_INFINITY else soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:  # pragma: no cover - a sandbox that refuses
            logger.warning("could not raise the open-files limit to %d: %s", target, e)
    if soft < wanted:
        logger.warning("the open-files limit is %d (hard limit %s), under the %d this server may need: lower "
                       "--max-connections or raise the limit (ulimit -n)", soft, hard, wanted)
    return soft


# ---- bounded logs -----------------------------------------------------------------------------------------------
#: Messages a client can cause at will, logged without a traceback (a client's error is not the server's).
_CLIENT_CAUSED = {
    "Invalid UTF-8 sequence received from client.":
        "a WebSocket text frame that is not UTF-8 was received: the connection is closed with code 1007 "
        "(RFC 6455 section 8.1)",
    "Invalid HTTP request received.": "an invalid HTTP request was received: answered 400 and closed",
}


class RepeatedLogLimit(logging.Filter):
    """A logging filter that bounds repeated records: at most ``burst`` records of one kind (its logger and its
    message template) per ``window_s``; the first one let through after a window in which some were dropped says how
    many. Messages a client can cause (``_CLIENT_CAUSED``) lose their traceback and become one WARNING line. So a
    client sending the same bad request in a loop adds a few lines a minute to the log, not one per request."""

    def __init__(self, burst: int = 5, window_s: float = 60.0, max_kinds: int = 1024):
        super().__init__()
        self.burst, self.window_s, self.max_kinds = burst, window_s, max_kinds
        self._kinds: dict[tuple[str, str], list] = {}  # kind -> [window start, let through, dropped, dropped before]

    def filter(self, record: logging.LogRecord) -> bool:
        template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
        if template in _CLIENT_CAUSED:
            record.msg, record.args = _CLIENT_CAUSED[template], ()
            record.exc_info, record.exc_text, record.stack_info = None, None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        now = time.monotonic()
        key = (record.name, template)
        state = self._kinds.get(key)
        if state is None or now - state[0] >= self.window_s:
            dropped = state[2] if state is not None else 0
            if state is None and len(self._kinds) >= self.max_kinds:
                self._kinds.pop(next(iter(self._kinds)))  # the oldest kind: the table stays bounded
            state = self._kinds[key] = [now, 0, 0, dropped]
        if state[1] >= self.burst:
            state[2] += 1
            return False
        state[1] += 1
        if state[3]:
            record.msg, record.args = (f"{record.getMessage()} ({state[3]} more like this were dropped in the "
                                       f"previous {self.window_s:g} s)"), ()
            state[3] = 0
        return True


_LOG_LIMIT = RepeatedLogLimit()


def limit_repeated_logs(*logger_names: str) -> None:
    """Put the shared :class:`RepeatedLogLimit` on the named loggers (once each). A filter on a logger applies to
    the records logged on it, not its children: name each logger that logs per request."""
    for name in logger_names:
        log = logging.getLogger(name)
        if _LOG_LIMIT not in log.filters:
            log.addFilter(_LOG_LIMIT)


# ---- who may connect: loopback by default, a bearer token for anything wider ------------------------------------------
def check_bind(host: str, auth_token: str | None, allow_remote: bool, server: str) -> None:
    """The bind rule of both servers: a token, when given, is not blank (a one-space token would be a password
    anyone guesses); a non-loopback ``host`` needs a token, or ``allow_remote`` (then a warning is logged: anyone
    who can reach the port can use the server). Raises ValueError naming the flags."""
    if auth_token is not None and not auth_token.strip():
        raise ValueError(f"{server}: the auth token is empty or blank; give a real token, or none")
    if is_loopback_host(host) or auth_token:
        return
    if not allow_remote:
        raise ValueError(f"{server}: refusing to bind {host!r} (not a loopback address) without a token: set "
                         "--auth-token (or its environment variable), or pass --allow-remote to serve without one")
    logger.warning("%s listens on %s with no auth token (--allow-remote): anyone who can reach the port can use it",
                   server, host)


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
        if not auth_token or not auth_token.strip():
            raise ValueError("the auth token is empty or blank")
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
