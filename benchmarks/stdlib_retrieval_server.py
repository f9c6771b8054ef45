"""The stdlib retrieval server as it was before issue 17, kept verbatim as the baseline of benchmarks/retrieval.py.

Only the benchmark uses this module (run it as ``python benchmarks/stdlib_retrieval_server.py --index DIR``); the
library's server is :mod:`retrieval.server` (Starlette on uvicorn). Changes from the original ``retrieval/server.py``
(commit e9c60a5): absolute imports of ``retrieval.errors`` / ``retrieval.types`` and the ``main`` at the end. Its
known faults (issue 17) are kept on purpose: Nagle delays on kept-alive connections, no read timeout, 400 for an
empty ``queries`` list, non-JSON answers to some malformed requests.

Original docstring:

A batched HTTP retrieval server, Search-R1 compatible.

Endpoints (JSON in and out):

* ``POST /retrieve`` with ``{"queries": [str, ...], "topk": int, "return_scores": bool}`` (``topk`` defaults to
  ``ServerConfig.default_topk``, ``return_scores`` to false) answers ``{"result": [...]}`` with one list per query:
  documents ``{"id", "title", "text", "contents"}`` (``contents`` is Search-R1's ``"Title"\\ntext``), or, with
  ``return_scores``, ``{"document": {...}, "score": float}`` items — the shapes Search-R1's retrieval server
  returns, so its clients work unchanged.
* ``GET /health`` answers ``{"status": "ok", ...}`` with the index's kind, size, checksum, encoder and counters.

Bad requests get a 4xx and ``{"error": message}``: invalid JSON or fields (400), a missing or oversized body (411,
413), an unknown path (404) or method (405). An overloaded queue answers 503, an index failure 500. Nothing is
retried or swallowed.

Batching: request threads put their queries on one queue; a single search thread takes everything waiting (up to
``max_batch`` queries, after waiting at most ``batch_wait_ms`` for more to arrive), runs *one* search with the
largest ``topk`` asked for, and hands each request its rows. One search at a time keeps BLAS from oversubscribing
the cores, and batches from several clients share each matrix product.

Binds 127.0.0.1 by default.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, Sequence

if __name__ == "__main__":  # run as a script: the repo root before benchmarks/, whose retrieval.py would shadow it
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from retrieval.errors import BadRequestError, RetrievalError
from retrieval.types import Hit

__all__ = ["ServerConfig", "RetrievalServer", "serve", "validate_request", "hits_to_json"]

logger = logging.getLogger(__name__)


class SupportsSearch(Protocol):
    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]: ...


@dataclass(frozen=True)
class ServerConfig:
    """Server limits and batching.

    Attributes:
        host / port: where to listen (port 0 picks a free port; see ``RetrievalServer.url``).
        default_topk: topk when a request gives none.
        max_topk: largest topk accepted.
        max_queries: most queries in one request.
        max_query_chars: longest query accepted (characters).
        max_body_bytes: largest request body accepted.
        max_batch: most queries in one search call.
        batch_wait_ms: how long the search thread waits for more requests once one is waiting.
        max_pending: requests waiting for the search thread before new ones get 503.
        request_timeout_s: how long a request thread waits for its results before answering 503.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    default_topk: int = 3
    max_topk: int = 100
    max_queries: int = 512
    max_query_chars: int = 4096
    max_body_bytes: int = 8 * 1024 * 1024
    max_batch: int = 512
    batch_wait_ms: float = 2.0
    max_pending: int = 1024
    request_timeout_s: float = 120.0


def validate_request(body: Any, config: ServerConfig) -> tuple[list[str], int, bool]:
    """(queries, topk, return_scores) of a ``/retrieve`` body, or :class:`BadRequestError` saying what is wrong."""
    if not isinstance(body, dict):
        raise BadRequestError("the body must be a JSON object with 'queries'")
    queries = body.get("queries")
    if not isinstance(queries, list):
        raise BadRequestError("'queries' must be a list of strings")
    if not queries:
        raise BadRequestError("'queries' is empty")
    if len(queries) > config.max_queries:
        raise BadRequestError(f"too many queries: {len(queries)} > {config.max_queries} per request")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise BadRequestError(f"queries[{i}] is not a string")
        if not q.strip():
            raise BadRequestError(f"queries[{i}] is empty")
        if len(q) > config.max_query_chars:
            raise BadRequestError(f"queries[{i}] is too long: {len(q)} > {config.max_query_chars} characters")
    topk = body.get("topk")
    if topk is None:
        topk = config.default_topk
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise BadRequestError("'topk' must be an integer")
    if not 1 <= topk <= config.max_topk:
        raise BadRequestError(f"'topk' must be in [1, {config.max_topk}], got {topk}")
    rs = body.get("return_scores", False)
    if not isinstance(rs, bool):
        raise BadRequestError("'return_scores' must be true or false")
    return queries, topk, rs


def hits_to_json(rows: list[list[Hit]], return_scores: bool) -> list:
    if return_scores:
        return [[{"document": h.to_document(), "score": h.score} for h in row] for row in rows]
    return [[h.to_document() for h in row] for row in rows]


@dataclass
class _Pending:
    queries: list[str]
    topk: int
    done: threading.Event = field(default_factory=threading.Event)
    result: list[list[Hit]] | None = None
    error: BaseException | None = None


class _Batcher:
    """The single search thread (see the module docstring)."""

    def __init__(self, retriever: SupportsSearch, config: ServerConfig):
        self.retriever, self.config = retriever, config
        self.queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=config.max_pending)
        self.batches = 0
        self.queries = 0
        self.max_batch_seen = 0
        self._thread = threading.Thread(target=self._run, name="retrieval-batcher", daemon=True)
        self._thread.start()

    def submit(self, item: _Pending) -> None:
        self.queue.put_nowait(item)  # queue.Full -> 503

    def stop(self) -> None:
        self.queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        carry: _Pending | None = None
        while True:
            first = carry if carry is not None else self.queue.get()
            carry = None
            if first is None:
                return
            batch, n = [first], len(first.queries)
            deadline = time.monotonic() + self.config.batch_wait_ms / 1000.0
            stop = False
            while n < self.config.max_batch:
                timeout = deadline - time.monotonic()
                try:
                    item = self.queue.get(timeout=timeout) if timeout > 0 else self.queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                if n + len(item.queries) > self.config.max_batch:
                    carry = item  # starts the next batch
                    break
                batch.append(item)
                n += len(item.queries)
            self._search(batch)
            if stop:
                return

    def _search(self, batch: list[_Pending]) -> None:
        queries = [q for item in batch for q in item.queries]
        topk = max(item.topk for item in batch)
        try:
            rows = self.retriever.search(queries, topk)
            if len(rows) != len(queries):
                raise RetrievalError(f"the index returned {len(rows)} result lists for {len(queries)} queries")
        except BaseException as e:  # handed to every waiting request, which answers 500
            logger.exception("search of a batch of %d queries failed", len(queries))
            for item in batch:
                item.error = e
                item.done.set()
            return
        self.batches += 1
        self.queries += len(queries)
        self.max_batch_seen = max(self.max_batch_seen, len(queries))
        pos = 0
        for item in batch:
            item.result = [row[:item.topk] for row in rows[pos:pos + len(item.queries)]]
            pos += len(item.queries)
            item.done.set()


class _Handler(BaseHTTPRequestHandler):
    server: "_HTTPServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # route the stdlib's stderr logging to logging
        logger.debug("%s - %s", self.address_string(), format % args)

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        # An error may leave an unread body on the connection: close it rather than misparse the next request.
        self.close_connection = True
        self._send(status, {"error": message})

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/health":
            self._error(404 if self.path.split("?")[0] != "/retrieve" else 405,
                        f"no GET {self.path}; use GET /health or POST /retrieve")
            return
        self._send(200, self.server.owner.health())

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/retrieve":
            self._error(404 if self.path.split("?")[0] != "/health" else 405,
                        f"no POST {self.path}; use POST /retrieve")
            return
        cfg = self.server.owner.config
        length = self.headers.get("Content-Length")
        if length is None:
            self._error(411, "a Content-Length header is required")
            return
        try:
            n = int(length)
        except ValueError:
            self._error(400, "invalid Content-Length")
            return
        if n < 0 or n > cfg.max_body_bytes:
            self._error(413, f"the body is {n} bytes; the limit is {cfg.max_body_bytes}")
            return
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw.decode("utf-8"))
            queries, topk, return_scores = validate_request(body, cfg)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self._error(400, f"the body is not valid JSON: {e}")
            return
        except BadRequestError as e:
            self._error(400, str(e))
            return
        item = _Pending(queries, topk)
        try:
            self.server.owner.batcher.submit(item)
        except queue.Full:
            self._error(503, "the server is overloaded (too many pending requests); try again later")
            return
        if not item.done.wait(cfg.request_timeout_s):
            self._error(503, f"the search did not finish within {cfg.request_timeout_s}s")
            return
        if item.error is not None:
            self._error(500, f"the search failed: {type(item.error).__name__}: {item.error}")
            return
        self._send(200, {"result": hits_to_json(item.result, return_scores)})


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen backlog: many clients may connect at once
    owner: "RetrievalServer"

    def handle_error(self, request, client_address) -> None:
        # socketserver prints tracebacks to stderr; log instead. A client that hung up (e.g. after its own
        # timeout) is routine, anything else is a server bug worth a full traceback.
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            logger.debug("client %s hung up before its answer was sent", client_address)
        else:
            logger.exception("error while serving %s", client_address)


class RetrievalServer:
    """Serves a retriever (anything with ``search(queries, topk)``) over HTTP; see the module docstring.

    Use as a context manager or call ``start()`` (background thread) / ``stop()``, or ``serve_forever()``.
    """

    def __init__(self, retriever: SupportsSearch, config: ServerConfig | None = None):
        self.retriever = retriever
        self.config = config or ServerConfig()
        self.batcher = _Batcher(retriever, self.config)
        self.httpd = _HTTPServer((self.config.host, self.config.port), _Handler)
        self.httpd.owner = self
        self._thread: threading.Thread | None = None
        self.started = time.time()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.config.host if self.config.host not in ("0.0.0.0", "") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    def health(self) -> dict:
        r = self.retriever
        meta = r.metadata() if hasattr(r, "metadata") else {}
        return {"status": "ok", "kind": meta.get("kind"), "n_passages": meta.get("n_passages"),
                "corpus_checksum": meta.get("corpus_checksum"), "encoder": meta.get("encoder"),
                "batches": self.batcher.batches, "queries_served": self.batcher.queries,
                "max_batch_seen": self.batcher.max_batch_seen, "uptime_s": round(time.time() - self.started, 3),
                "limits": {"max_topk": self.config.max_topk, "max_queries": self.config.max_queries,
                           "max_query_chars": self.config.max_query_chars}}

    def start(self) -> "RetrievalServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="retrieval-http", daemon=True)
        self._thread.start()
        logger.info("retrieval server listening on %s", self.url)
        return self

    def serve_forever(self) -> None:
        logger.info("retrieval server listening on %s", self.url)
        try:
            self.httpd.serve_forever()
        finally:
            self.stop()

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self.httpd.server_close()
        self.batcher.stop()

    def __enter__(self) -> "RetrievalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(retriever: SupportsSearch, config: ServerConfig | None = None) -> None:
    """Serve ``retriever`` until interrupted (blocking)."""
    RetrievalServer(retriever, config).serve_forever()


def main(argv=None) -> None:
    """``python benchmarks/stdlib_retrieval_server.py --index DIR [--port 0] [--omp-threads N]``: load an index and
    serve it as ``agentgym retrieval serve`` did before issue 17 (faiss and torch thread pools at their library
    defaults unless ``--omp-threads`` is given). Prints ``serving ... on URL`` once listening."""
    import argparse

    from retrieval.index import load_index

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--index", required=True)
    ap.add_argument("--port", type=int, default=0)
    # 0: faiss's and torch's own thread defaults (every core), as load_index left them before issue 17
    ap.add_argument("--omp-threads", type=int, default=0)
    args = ap.parse_args(argv)
    index = load_index(args.index, omp_threads=args.omp_threads)
    server = RetrievalServer(index, ServerConfig(port=args.port))
    print(f"serving {index.kind} index of {len(index)} passages on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
