"""A batched HTTP retrieval server that Search-R1-style trainers talk to unchanged: Starlette on uvicorn.

Endpoints (JSON in and out; the request and answer shapes are in :mod:`retrieval.protocol`):

* ``POST /retrieve`` -- Search-R1's ``{"queries": [...], "topk": k, "return_scores": bool}``, or verl-agent's
  ``{"query": "...", ...}``; answers ``{"result": [...]}`` (plus ``"errors"`` for queries that cannot be searched).
* ``GET /health`` -- ``{"status": "ok", ...}`` with the index's kind, size, checksum, encoder, counters and limits.

Every error is JSON ``{"error": message}``: 400 (not JSON we accept), 403 (a browser's request: a foreign
``Origin``, or, without a token, a ``Host`` that is not a loopback name: see :mod:`retrieval.browser_guard`), 404
(unknown path), 405 (wrong method, with ``Allow``), 408 (the request did not arrive within ``request_timeout_s``),
413 (a body over ``max_body_bytes`` or with more JSON tokens than a request of ``max_queries`` needs, or an answer
over ``max_answer_bytes``), 415 (no ``Content-Type``, or one other than JSON), 422 (JSON that is not a request, or
more than ``max_results`` results asked for), 500 (the index failed on every query), 503 with ``Retry-After`` (too
many searches pending, a search took longer than ``search_timeout_s``, or too many connections are open). What the
HTTP parser rejects before the app runs -- a garbage request line, headers over ``max_header_bytes`` -- also gets a
short JSON error (400 / 431) and a closed connection; see :mod:`retrieval.http_limits` for the connection-level
guards (read, write and idle deadlines, half-closed clients).

Batching: the app puts each request's searchable queries on one queue; a single search thread runs one search at a
time, of up to ``max_batch`` queries with the largest ``topk`` asked for, and hands each request its rows, so
batches from many clients share each matrix product. Each search is shared fairly among the requests waiting (each
gets an even share; a bigger request is split over several searches, a small one goes in whole), so one big batch
never holds the others up for more than one search. Once a request is waiting the thread waits at most
``batch_wait_ms`` for more. The search thread applies the index's thread limits
(:attr:`retrieval.index.IndexParams.omp_threads`) in itself, so torch and FAISS never run more threads than that. A
batch that fails is searched again query by query: a query that fails alone gets an empty row and an ``errors``
entry; only when a plain probe query fails too (the index is broken) do the requests get a 500.

Memory: bodies over 64 KiB wait for a share of ``max_buffered_body_bytes`` before they are read, and are scanned in
place (nesting, token count) before they are decoded; an answer over 1 MiB is measured, then encoded again a piece
at a time as the client reads it, so a client that reads slowly or never holds one send buffer's worth, until the
connection layer drops it after ``write_timeout_s``.

Shutdown (``stop()``, SIGINT/SIGTERM under ``serve_forever``) stops accepting connections, lets the requests in
flight get their batches, then stops the search thread. Binds 127.0.0.1 by default.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from .browser_guard import BrowserGuard, is_json_content_type, is_loopback_host, normalize_origins
from .errors import MissingDependencyError
from .protocol import ProtocolError, decode_json_body, hits_to_json, parse_search_request
from .types import Hit

__all__ = ["ServerConfig", "RetrievalServer", "serve", "SEARCH_PROBE"]

logger = logging.getLogger(__name__)

#: The query searched alone when a batch fails, to tell a query the index cannot take from a broken index.
SEARCH_PROBE = "test"


class SupportsSearch(Protocol):
    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]: ...


@dataclass(frozen=True)
class ServerConfig:
    """Server limits and batching.

    Attributes:
        host / port: where to listen (port 0 picks a free port; see ``RetrievalServer.url``).
        default_topk: topk when a request gives none (Search-R1's default, 3).
        max_topk: largest topk accepted.
        max_queries: most queries in one request (Search-R1's training config sends up to 2,560).
        max_results: most results one request may ask for, queries x topk (422 beyond): 4,096 queries at topk 8,
            or 2,560 (Search-R1's batch) at topk 12.
        max_answer_bytes: largest answer (413 beyond, after the search: the size depends on the passages found).
        max_query_chars: longest query searched (a longer one gets an empty row and an ``errors`` entry).
        max_body_bytes: largest request body (413 beyond).
        max_buffered_body_bytes: request-body bytes held at once, buffered or being parsed; a body over 64 KiB waits
            for its share (see ``_BodyBudget``). At least ``max_body_bytes``.
        max_header_bytes: largest request line + headers (431 beyond).
        max_json_depth: deepest JSON nesting accepted (a request needs 2).
        max_batch: most queries in one search call. A bigger request is split over several searches, and every
            search is shared fairly among the requests waiting (each gets an even share, a small request all of
            its queries), so a big request never holds the others up for more than one search.
        batch_wait_ms: how long the search thread waits for more requests once one is waiting (0: it takes what is
            already waiting; under load, requests pile up while the previous search runs).
        max_pending: requests waiting for the search thread (with queries not yet in a search) before new ones get
            503.
        search_timeout_s: how long a request waits for its search before a 503.
        request_timeout_s: the time a client has to send a whole request, from its first byte (408 beyond).
        write_timeout_s: how long a client may leave its answer unread (the send buffer full, nothing taken) before
            the connection is dropped.
        idle_timeout_s: how long a connection may stay open with no request in progress.
        max_connections: open connections beyond which new ones get 503.
        shutdown_timeout_s: how long a shutdown waits for the requests in flight.
        backlog: the listen backlog.
        auth_token: when set, every request must carry ``Authorization: Bearer <token>`` (compared in constant time;
            401 otherwise). Not blank, no surrounding whitespace (a header could never carry it).
        allow_remote: bind a non-loopback host without ``auth_token`` (refused otherwise; logged as a warning).
        allowed_origins: ``scheme://host[:port]`` values a browser page may call the server from (and, without a
            token, Host values it answers besides loopback ones); see :mod:`retrieval.browser_guard`.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    default_topk: int = 3
    max_topk: int = 100
    max_queries: int = 4096
    max_results: int = 32768
    max_answer_bytes: int = 64 * 1024 * 1024
    max_query_chars: int = 4096
    max_body_bytes: int = 8 * 1024 * 1024
    max_buffered_body_bytes: int = 32 * 1024 * 1024
    max_header_bytes: int = 16 * 1024
    max_json_depth: int = 16
    max_batch: int = 512
    batch_wait_ms: float = 0.0
    max_pending: int = 1024
    search_timeout_s: float = 120.0
    request_timeout_s: float = 30.0
    write_timeout_s: float = 30.0
    idle_timeout_s: float = 60.0
    max_connections: int = 4096
    shutdown_timeout_s: float = 30.0
    backlog: int = 2048
    auth_token: str | None = field(default=None, repr=False)
    allow_remote: bool = False
    allowed_origins: tuple[str, ...] = ()

    def __post_init__(self):
        if self.auth_token is not None and (not self.auth_token.strip() or self.auth_token != self.auth_token.strip()):
            raise ValueError("the auth token must not be empty, blank or surrounded by whitespace")
        for name in ("default_topk", "max_topk", "max_queries", "max_results", "max_answer_bytes", "max_query_chars",
                     "max_body_bytes", "max_json_depth", "max_batch", "max_pending", "max_connections"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("search_timeout_s", "request_timeout_s", "write_timeout_s", "idle_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_buffered_body_bytes < self.max_body_bytes:
            raise ValueError(f"max_buffered_body_bytes ({self.max_buffered_body_bytes}) must be at least "
                             f"max_body_bytes ({self.max_body_bytes})")
        normalize_origins(self.allowed_origins)  # ValueError naming a malformed one

    @property
    def max_json_tokens(self) -> int:
        """The most JSON tokens a body may hold (see :class:`~retrieval.protocol.JsonShape`): two per query, plus
        room for the other fields; a body with more gets 413 before it is parsed."""
        return 2 * self.max_queries + 1024


# ---------------------------------------------------------------------------------------------- the search thread
@dataclass(eq=False)  # compared by identity: the search thread keeps them in a list
class _Pending:
    """One request's queries, from the app to the search thread and back; resolved on the request's event loop.
    ``taken``: how many of its queries have gone into searches; ``rows`` / ``errors``: what they found."""

    queries: list[str]
    topk: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    taken: int = 0
    rows: list[list[Hit]] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)

    @property
    def untaken(self) -> int:
        return len(self.queries) - self.taken

    def gone(self) -> bool:
        """The request stopped waiting (its search timeout passed). Read from the search thread: a flag read, and
        at worst one more chunk is searched for nobody."""
        return self.future.done()

    def resolve(self, failure: BaseException | None = None) -> None:
        rows, errors = self.rows, self.errors

        def _set() -> None:
            if self.future.done():  # the request gave up (timeout) or the client went away
                return
            if failure is not None:
                self.future.set_exception(failure)
            else:
                self.future.set_result((rows, errors))

        try:
            self.loop.call_soon_threadsafe(_set)
        except RuntimeError:  # the server's event loop is gone (shutdown): nobody is waiting
            pass


class _Batcher:
    """The single search thread (see the module docstring): requests wait in ``queue``; the thread keeps those it has
    taken in a round-robin list and fills each search with a fair share of every one's remaining queries."""

    def __init__(self, retriever: SupportsSearch, config: ServerConfig):
        self.retriever, self.config = retriever, config
        self.queue: queue.Queue[_Pending | None] = queue.Queue()  # bounded by `waiting`, below
        self._lock = threading.Lock()
        self.waiting = 0  # requests with queries not yet in a search (at most max_pending)
        self.batches = 0
        self.queries = 0
        self.max_batch_seen = 0
        self.failed_queries = 0
        self._thread = threading.Thread(target=self._run, name="retrieval-search", daemon=True)
        self._thread.start()

    def submit(self, item: _Pending) -> None:
        """Queue ``item``; queue.Full (-> 503) when ``max_pending`` requests are already waiting."""
        with self._lock:
            if self.waiting >= self.config.max_pending:
                raise queue.Full
            self.waiting += 1
        self.queue.put_nowait(item)

    def _taken_whole(self) -> None:
        with self._lock:
            self.waiting -= 1

    def stop(self, timeout: float = 30.0) -> None:
        if self._thread.is_alive():
            self.queue.put(None)  # after everything already queued: those searches still run
            self._thread.join(timeout)

    def _run(self) -> None:
        prepare = getattr(self.retriever, "prepare_search_thread", None)
        if callable(prepare):
            prepare()  # thread limits are per thread in OpenMP: set them where the searches run
        active: deque[_Pending] = deque()
        stopping = False
        while True:
            if not active:
                if stopping:
                    return
                first = self.queue.get()
                if first is None:
                    return
                active.append(first)
                stopping = self._gather(active, time.monotonic() + self.config.batch_wait_ms / 1000.0)
            else:  # a backlog: whatever arrived meanwhile joins the round at once
                stopping = self._gather(active, 0.0) or stopping
            for item in [it for it in active if it.gone()]:
                active.remove(item)
                if item.untaken:
                    self._taken_whole()
            parts = self._fill(active)
            if parts:
                self._search(parts)
            # the next round starts with the requests this one left out; those it served, and not finished, go last
            served = {id(item) for item, _, _ in parts}
            active = deque([it for it in active if id(it) not in served]
                           + [it for it in active if id(it) in served and it.untaken])

    def _gather(self, active: deque[_Pending], deadline: float) -> bool:
        """Move every request waiting in the queue into ``active``; until ``deadline``, wait for more while the
        queries at hand do not fill a search. True when the stop marker came."""
        while True:
            timeout = deadline - time.monotonic()
            try:
                if timeout > 0 and sum(it.untaken for it in active) < self.config.max_batch:
                    item = self.queue.get(timeout=timeout)
                else:
                    item = self.queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            active.append(item)

    def _fill(self, active: deque[_Pending]) -> list[tuple[_Pending, int, int]]:
        """The next search: up to ``max_batch`` queries, shared evenly among the requests in ``active`` (each gets
        ``room // requests`` per pass, a small request all of its queries), as (request, start, end) slices."""
        room = self.config.max_batch
        start = {id(it): it.taken for it in active}
        live = [it for it in active if it.untaken]
        while room and live:
            quantum = max(1, room // len(live))
            still = []
            for it in live:
                take = min(it.untaken, quantum, room)
                it.taken += take
                room -= take
                if it.untaken:
                    still.append(it)
                else:
                    self._taken_whole()
                if not room:
                    break
            live = still
        return [(it, start[id(it)], it.taken) for it in active if it.taken > start[id(it)]]

    def _call(self, queries: list[str], topk: int) -> list[list[Hit]]:
        rows = self.retriever.search(queries, topk)
        if len(rows) != len(queries):
            raise RuntimeError(f"the index returned {len(rows)} result lists for {len(queries)} queries")
        return rows

    def _search(self, parts: list[tuple[_Pending, int, int]]) -> None:
        queries = [q for item, a, b in parts for q in item.queries[a:b]]
        topk = max(item.topk for item, _, _ in parts)
        try:
            rows = self._call(queries, topk)
        except Exception as e:  # noqa: BLE001 - isolated below, query by query
            logger.warning("a batch of %d queries failed (%s: %s); searching its queries one by one", len(queries),
                           type(e).__name__, e)
            self._isolate(parts, e)
            return
        self._count(len(queries))
        pos = 0
        for item, a, b in parts:
            item.rows.extend(row[:item.topk] for row in rows[pos:pos + b - a])
            pos += b - a
            if len(item.rows) == len(item.queries):
                item.resolve()

    def _isolate(self, parts: list[tuple[_Pending, int, int]], batch_error: Exception) -> None:
        try:
            self._call([SEARCH_PROBE], 1)
        except Exception:  # noqa: BLE001 - the index is broken: every request gets a 500
            logger.exception("the index fails on a plain probe query too")
            for item, _, _ in parts:
                if item.untaken:
                    self._taken_whole()
                item.taken = len(item.queries)  # done with: the thread drops it
                item.resolve(failure=batch_error)
            return
        for item, a, b in parts:
            for i in range(a, b):
                try:
                    item.rows.append(self._call([item.queries[i]], item.topk)[0])
                except Exception as e:  # noqa: BLE001 - this query alone fails: it gets an empty row
                    item.rows.append([])
                    item.errors[i] = f"the index failed on this query: {type(e).__name__}: {e}"
                    self.failed_queries += 1
            self._count(b - a)
            if len(item.rows) == len(item.queries):
                item.resolve()

    def _count(self, n: int) -> None:
        self.batches += 1
        self.queries += n
        self.max_batch_seen = max(self.max_batch_seen, n)


# ---------------------------------------------------------------------------------------------- the app
def _dumps(payload: Any) -> bytes:
    try:
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate somewhere (a corpus text?): JSON escapes are always valid
        return json.dumps(payload).encode("ascii")


def _json(status: int, payload: Any, headers: dict[str, str] | None = None):
    from starlette.responses import Response

    return Response(_dumps(payload), status_code=status, headers=headers, media_type="application/json")


def _error(status: int, message: str, headers: dict[str, str] | None = None):
    return _json(status, {"error": message}, headers)


#: Bodies up to this size are parsed on the event loop; larger ones in a worker thread.
_INLINE_PARSE_BYTES = 256 * 1024
#: Bodies declared up to this size are read without a share of ``max_buffered_body_bytes`` (one query, or a few
#: hundred: they never wait behind big bodies).
_SMALL_BODY_BYTES = 64 * 1024
#: Answers up to this size are encoded once and written whole; larger ones are measured, then encoded again piece
#: by piece as the client reads them.
_WHOLE_ANSWER_BYTES = 1 << 20
#: How much of a streamed answer is written at a time, and how much of an answer is encoded between two turns of
#: the event loop (a few milliseconds of work: encoding a big answer never holds up the other clients for long).
_ANSWER_WRITE_BYTES = 64 * 1024
_BYTES_PER_TURN = 64 * 1024


class _SearchTimeout(Exception):
    """A request waited longer than ``search_timeout_s`` for its search."""


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_exception(_SearchTimeout())


class _BodyBudget:
    """The request-body bytes the app holds at once (buffered, decoded, parsed), at most ``limit``: a request takes
    its share (its declared length; ``max_body_bytes`` when chunked) before reading its body and gives it back once
    the body is parsed, in arrival order. Decoding and parsing hold about three times the body, so this bounds
    the memory of big bodies arriving together (the thread pool alone would let 40 be parsed at once)."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0
        self._waiters: deque[tuple[int, asyncio.Future]] = deque()

    async def acquire(self, n: int) -> int:
        if not self._waiters and self.used + n <= self.limit:
            self.used += n
            return n
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((n, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted just as it was cancelled: give it back
                self.release(n)
            elif (n, waiter) in self._waiters:
                self._waiters.remove((n, waiter))
                self.release(0)  # the next in line may fit now
            raise
        return n

    def release(self, n: int) -> None:
        self.used -= n
        while self._waiters:
            size, waiter = self._waiters[0]
            if waiter.cancelled():  # its request was cancelled while it waited
                self._waiters.popleft()
                continue
            if self.used + size > self.limit:
                return
            self._waiters.popleft()
            self.used += size
            waiter.set_result(None)


class _Answer:
    """The 200 answer of one request, as pieces of JSON made one row at a time: ``{"result": [row, ...]`` (Search-R1's
    shapes, :func:`~retrieval.protocol.hits_to_json`), then ``"errors"`` when there are any, then ``}``. Nothing
    holds the whole answer unless it is small (see :meth:`measure`)."""

    def __init__(self, rows: list[list[Hit]], return_scores: bool, errors: dict[int, str]):
        self.rows, self.return_scores, self.errors = rows, return_scores, errors

    def pieces(self):
        yield b'{"result": ['
        for i, row in enumerate(self.rows):
            piece = _dumps(hits_to_json([row], self.return_scores)[0])
            yield b", " + piece if i else piece
        yield b"]"
        if self.errors:
            yield b', "errors": ' + _dumps([{"index": i, "error": self.errors[i]} for i in sorted(self.errors)])
        yield b"}"

    async def measure(self, limit: int) -> tuple[int, bytes | None]:
        """(the answer's size in bytes, counted no further than just past ``limit``; the whole answer when it is at
        most :data:`_WHOLE_ANSWER_BYTES`, else None). Encodes on the event loop, giving it back every few rows."""
        size, turn, kept = 0, 0, []
        for piece in self.pieces():
            size += len(piece)
            turn += len(piece)
            if size > limit:
                return size, None
            if kept is not None:
                kept.append(piece)
                if size > _WHOLE_ANSWER_BYTES:
                    kept = None
            if turn >= _BYTES_PER_TURN:
                turn = 0
                await asyncio.sleep(0)
        return size, (b"".join(kept) if kept is not None else None)


class _StreamedAnswer:
    """An ASGI response that writes an :class:`_Answer` of known ``length`` as the client reads it: a piece is
    encoded only when the connection's send buffer has room (the server's ``send`` waits while the transport is
    paused), so a client that reads slowly, or never, holds one write's worth of the answer, not all of it; the
    connection layer drops one that has not read for ``write_timeout_s``. It stops encoding once the client is
    gone."""

    def __init__(self, answer: _Answer, length: int):
        self.answer, self.length = answer, length

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(self.length).encode())]})
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.ensure_future(watch())
        try:
            buf = bytearray()
            for piece in self.answer.pieces():
                buf += piece
                if len(buf) >= _ANSWER_WRITE_BYTES:
                    await send({"type": "http.response.body", "body": bytes(buf), "more_body": True})
                    buf.clear()
                    await asyncio.sleep(0)  # the write reaches the socket; a full buffer pauses the next send
                if gone.is_set():
                    return
            await send({"type": "http.response.body", "body": bytes(buf), "more_body": False})
        finally:
            watcher.cancel()


def build_app(server: "RetrievalServer", retry_after_s: int):
    """The Starlette app of ``server`` (routes, JSON errors); see the module docstring. ``retry_after_s``: the
    ``Retry-After`` of its 503 answers (the connection layer's :attr:`HttpLimits.retry_after_s`)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect, Request
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import Response
    from starlette.routing import Route

    cfg = server.config
    retry = {"Retry-After": str(retry_after_s)}
    budget = _BodyBudget(cfg.max_buffered_body_bytes)
    max_tokens = cfg.max_json_tokens
    tokens_hint = f" (about 2 per query; up to {cfg.max_queries} queries per request)"

    async def read_body(request: Request, declared: int | None) -> bytearray:
        if declared is not None and declared > cfg.max_body_bytes:
            raise ProtocolError(f"the body is {declared} bytes; the limit is {cfg.max_body_bytes}", 413)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > cfg.max_body_bytes:
                raise ProtocolError(f"the body is over the limit of {cfg.max_body_bytes} bytes", 413)
        return body

    def decode(raw: bytearray):
        return decode_json_body(raw, cfg.max_json_depth, max_tokens=max_tokens, tokens_hint=tokens_hint)

    async def read_request(request: Request):
        length = request.headers.get("content-length")
        declared = int(length) if length is not None else None  # h11 has checked it is a number
        share = 0
        if declared is None or _SMALL_BODY_BYTES < declared <= cfg.max_body_bytes:
            share = await budget.acquire(declared if declared is not None else cfg.max_body_bytes)
        try:
            raw = await read_body(request, declared)
            # a big body is scanned and parsed off the event loop (the scan gives the GIL back every slice)
            body = await run_in_threadpool(decode, raw) if len(raw) > _INLINE_PARSE_BYTES else decode(raw)
            del raw
            return parse_search_request(body, cfg)
        finally:
            if share:
                budget.release(share)

    async def retrieve(request: Request):
        content_type = request.headers.get("content-type")
        if not is_json_content_type(content_type):
            what = f"Content-Type {content_type!r} is not JSON" if content_type else "no Content-Type"
            return _error(415, f"{what}; send the body as application/json")
        try:
            req = await read_request(request)
        except ProtocolError as e:
            return _error(e.status, str(e))
        except ClientDisconnect:
            return _error(400, "the client went away")  # nobody reads this
        todo = req.searchable()
        rows: list[list[Hit]] = [[] for _ in req.queries]
        errors = dict(req.errors)
        if todo:
            loop = asyncio.get_running_loop()
            item = _Pending([req.queries[i] for i in todo], req.topk, loop, loop.create_future())
            try:
                server.batcher.submit(item)
            except queue.Full:
                return _error(503, "the server is overloaded (too many pending searches); try again later", retry)
            # a timer, not wait_for(shield(...)): no extra task or future per request
            timer = loop.call_later(cfg.search_timeout_s, _expire, item.future)
            try:
                found, failed = await item.future
            except _SearchTimeout:
                return _error(503, f"the search did not finish within {cfg.search_timeout_s:g} s", retry)
            except Exception as e:  # noqa: BLE001 - the index failed on every query (see _Batcher._isolate)
                return _error(500, f"the search failed: {type(e).__name__}: {e}")
            finally:
                timer.cancel()
            for j, i in enumerate(todo):
                rows[i] = found[j]
                if j in failed:
                    errors[i] = failed[j]
        answer = _Answer(rows, req.return_scores, errors)
        size, whole = await answer.measure(cfg.max_answer_bytes)
        if size > cfg.max_answer_bytes:
            return _error(413, f"the answer would be over max_answer_bytes ({cfg.max_answer_bytes} bytes; "
                               "--max-answer-bytes): ask for fewer queries or a smaller topk")
        if whole is not None:
            return Response(whole, media_type="application/json")
        return _StreamedAnswer(answer, size)

    async def health(request: Request):
        return _json(200, server.health())

    async def http_error(request: Request, exc: HTTPException):
        message = {404: f"no such endpoint {request.url.path}; use POST /retrieve or GET /health",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, exc.detail)
        return _error(exc.status_code, message, dict(exc.headers or {}))

    async def server_error(request: Request, exc: Exception):
        logger.exception("error while answering %s %s", request.method, request.url.path)
        return _error(500, f"internal error: {type(exc).__name__}")

    routes = [Route("/retrieve", retrieve, methods=["POST"]), Route("/health", health, methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})


# ---------------------------------------------------------------------------------------------- lifecycle
def _http_stack():
    try:
        import starlette  # noqa: F401 - checked here, imported where used
        import uvicorn
    except ImportError as e:
        raise MissingDependencyError(e.name or "uvicorn", "the retrieval HTTP server") from e
    from . import http_limits

    return uvicorn, http_limits


class RetrievalServer:
    """Serves a retriever (anything with ``search(queries, topk)``) over HTTP; see the module docstring.

    The listening socket is bound in the constructor (``port`` / ``url`` are known at once). Use as a context
    manager or call ``start()`` (a background thread) / ``stop()``, or ``serve_forever()`` (this thread; SIGINT
    and SIGTERM stop it gracefully).
    """

    def __init__(self, retriever: SupportsSearch, config: ServerConfig | None = None):
        uvicorn, http_layer = _http_stack()
        self.retriever = retriever
        self.config = cfg = config or ServerConfig()
        http_layer.check_bind(cfg.host, cfg.auth_token, cfg.allow_remote, "the retrieval server")
        self.started = time.time()
        family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
        self._sock = socket.create_server((cfg.host, cfg.port), family=family, backlog=cfg.backlog,
                                          reuse_port=False)
        self.batcher = _Batcher(retriever, cfg)
        limits = http_layer.HttpLimits(request_timeout_s=cfg.request_timeout_s, idle_timeout_s=cfg.idle_timeout_s,
                                       write_timeout_s=cfg.write_timeout_s, max_header_bytes=cfg.max_header_bytes,
                                       max_connections=cfg.max_connections, max_discard_bytes=2 * cfg.max_body_bytes)
        # bound to loopback without a token, only loopback Host names are answered (DNS rebinding); with a token, or
        # bound wider with --allow-remote, any Host (the token, or the operator's choice, decides); a foreign Origin never
        app = BrowserGuard(build_app(self, limits.retry_after_s),
                           check_host=not cfg.auth_token and is_loopback_host(cfg.host),
                           allowed_origins=cfg.allowed_origins)
        if cfg.auth_token:
            app = http_layer.BearerAuth(app, cfg.auth_token)  # outermost: a request without the token gets a 401
        self._uvicorn = uvicorn.Server(http_layer.uvicorn_config(
            app, limits, loop="asyncio", lifespan="off", log_config=None,
            access_log=False, backlog=cfg.backlog,
            timeout_graceful_shutdown=int(max(1, round(cfg.shutdown_timeout_s)))))
        self._thread: threading.Thread | None = None
        self._serving = False

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def url(self) -> str:
        """``http://`` + the address the socket is bound to (``0.0.0.0`` when it listens on every interface)."""
        host = self._sock.getsockname()[0]
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def health(self) -> dict:
        r, b = self.retriever, self.batcher
        meta = r.metadata() if hasattr(r, "metadata") else {}
        threads = getattr(r, "search_threads", None)
        return {"status": "ok", "kind": meta.get("kind"), "n_passages": meta.get("n_passages"),
                "corpus_checksum": meta.get("corpus_checksum"), "encoder": meta.get("encoder"),
                "batches": b.batches, "queries_served": b.queries, "max_batch_seen": b.max_batch_seen,
                "failed_queries": b.failed_queries, "pending": b.waiting,
                "open_connections": len(self._uvicorn.server_state.connections),
                "search_threads": threads() if callable(threads) else None,
                "uptime_s": round(time.time() - self.started, 3),
                "limits": {"max_topk": self.config.max_topk, "max_queries": self.config.max_queries,
                           "max_results": self.config.max_results, "max_query_chars": self.config.max_query_chars,
                           "max_body_bytes": self.config.max_body_bytes,
                           "max_answer_bytes": self.config.max_answer_bytes}}

    def _run(self) -> None:
        self._serving = True
        try:
            self._uvicorn.run(sockets=[self._sock])
        finally:  # the requests in flight have had their answers: the search thread can go
            self.batcher.stop(self.config.shutdown_timeout_s)
            self._sock.close()

    def start(self, timeout: float = 30.0) -> "RetrievalServer":
        """Serve in a background thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self._run, name="retrieval-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the retrieval server did not start within {timeout} s")
            time.sleep(0.01)
        logger.info("retrieval server listening on %s", self.url)
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until SIGINT/SIGTERM (main thread) or ``stop()`` from another thread."""
        logger.info("retrieval server listening on %s", self.url)
        self._run()

    def stop(self) -> None:
        """Graceful: stop accepting, finish the requests in flight (their batches), stop the search thread."""
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(self.config.shutdown_timeout_s + 10)
            self._thread = None
        elif not self._serving:  # never served: nothing else will stop the search thread
            self.batcher.stop(self.config.shutdown_timeout_s)
            self._sock.close()

    def __enter__(self) -> "RetrievalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(retriever: SupportsSearch, config: ServerConfig | None = None) -> None:
    """Serve ``retriever`` until interrupted (blocking)."""
    RetrievalServer(retriever, config).serve_forever()
