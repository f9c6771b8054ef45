"""One way to open an HTTP request, shared by the clients of model endpoints (OpenAI-compatible policies, the
τ-airline LLM user, SGCD summarizers).

``urllib`` sends every request through the proxy named by ``http_proxy``/``https_proxy`` unless ``no_proxy`` lists the
host, and it has no built-in exception for loopback addresses. A model served on this machine (vLLM, SGLang, a test
server on 127.0.0.1) must never be reached through a proxy, so requests to a loopback host bypass proxies; every other
host keeps the environment's proxy settings.

:func:`bounded_request` is the hardened form the ``openai:`` policy's urllib transport uses against a server it does
not trust: it never follows a redirect (a 3xx comes back as the answer: following it would carry the request's
``Authorization`` header to wherever the server points), ``timeout_s`` is a deadline for the whole exchange (connect,
TLS, headers and body: a server that drips a byte a second is cut off at the deadline, which urllib's own per-read
socket timeout never does), and the body is read in chunks up to ``max_bytes`` (never buffered past it).
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["urlopen", "open_direct", "is_loopback_url", "bounded_request", "BoundedAnswer", "DeadlineExceeded",
           "ResponseTooLarge", "read_capped", "ERROR_BODY_BYTES",
           "MODEL_ANSWER_MAX_BYTES"]

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxies, whatever the environment says


def is_loopback_url(url: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    # the rule of retrieval.browser_guard.is_loopback_host; not imported from there, so that this module (which every
    # HTTP client of agentgym imports) needs no other package, and a script beside a file named retrieval.py runs
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_direct(request: urllib.request.Request | str, timeout: float) -> Any:
    """Open ``request`` (a Request or a URL) directly, never through a proxy, whatever the host."""
    return _DIRECT.open(request, timeout=timeout)


def urlopen(request: urllib.request.Request, timeout: float) -> Any:
    """``urllib.request.urlopen`` that goes direct (never through a proxy) to loopback hosts."""
    if is_loopback_url(request.full_url):
        return _DIRECT.open(request, timeout=timeout)
    return urllib.request.urlopen(request, timeout=timeout)


# -- bounded requests ----------------------------------------------------------------------------------------------

#: The most bytes of a non-2xx answer's body that are read (it only goes into an error message).
ERROR_BODY_BYTES = 64 * 1024
#: The default cap on a model server's answer (a chat completion is a few kB; `openai:` policies, the τ-airline
#: LLM user and the SGCD summarizer).
MODEL_ANSWER_MAX_BYTES = 8 * 1024 * 1024
_CHUNK = 64 * 1024


class DeadlineExceeded(TimeoutError):
    """The whole request took longer than its deadline (connect to last byte, however the bytes trickled in)."""


class ResponseTooLarge(Exception):
    """The answer's body is longer than the cap (told by its Content-Length, or found while reading it)."""

    def __init__(self, limit: int, declared: int | None = None):
        what = f"declares {declared} bytes" if declared is not None else "goes on"
        super().__init__(f"the answer {what}, over the {limit}-byte cap")
        self.limit, self.declared = limit, declared


@dataclass
class BoundedAnswer:
    """What :func:`bounded_request` got: the status, the headers and the body (complete for a 2xx answer; at most
    :data:`ERROR_BODY_BYTES` of any other, with ``truncated`` set when there was more)."""

    status: int
    headers: Any
    body: bytes
    truncated: bool = False


def read_capped(read: Callable[[int], bytes], limit: int, *, strict: bool, expired: Callable[[], bool] = lambda: False
                ) -> tuple[bytes, bool]:
    """Read a body through ``read(n)`` (returns ``b""`` at the end) in chunks, never holding more than ``limit + 1``
    chunk's worth. Past ``limit`` bytes: :class:`ResponseTooLarge` when ``strict``, else the first ``limit`` bytes
    and ``truncated=True``. ``expired()`` is checked between chunks (:class:`DeadlineExceeded`)."""
    buf = bytearray()
    while True:
        if expired():
            raise DeadlineExceeded("the answer was still arriving at the deadline")
        chunk = read(_CHUNK)
        if not chunk:
            return bytes(buf), False
        buf += chunk
        if len(buf) > limit:
            if strict:
                raise ResponseTooLarge(limit)
            return bytes(buf[:limit]), True


class _Deadline:
    """One request's deadline. The sockets it watches are *duplicates* of the request's (``dup``: another descriptor
    of the same connection, owned here), so the watchdog can shut the connection down at the deadline whatever
    the request's own descriptor became meanwhile (wrapped in TLS, closed, reused)."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.when = time.monotonic() + timeout_s
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = False

    def remaining(self) -> float:
        return self.when - time.monotonic()

    def passed(self) -> bool:
        return self.expired or self.remaining() <= 0

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if self._done:
                return
            try:
                self._socks.append(sock.dup())
            except OSError:
                return
        _WATCHDOG.add(self)

    def fire(self) -> None:
        """Called by the watchdog at the deadline: cut the connection (a blocked read returns at once)."""
        with self._lock:
            if self._done:
                return
            self.expired = True
            for s in self._socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._done = True
            socks, self._socks = self._socks, []
        for s in socks:
            s.close()

    def connector(self, create: Callable[..., socket.socket]) -> Callable[..., socket.socket]:
        """``http.client``'s ``_create_connection``, bounded by the time left and watched."""
        def create_watched(address, timeout=None, source_address=None):
            left = self.remaining()
            if left <= 0:
                raise DeadlineExceeded("the deadline passed before the connection was made")
            wait = left if timeout is None or timeout is socket._GLOBAL_DEFAULT_TIMEOUT else min(timeout, left)
            sock = create(address, wait, source_address)
            self.watch(sock)
            return sock
        return create_watched


class _Watchdog:
    """One daemon thread for every bounded request of the process: it sleeps until the earliest deadline and cuts
    that request's connection (requests that finished in time are dropped as they come up)."""

    def __init__(self):
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, deadline: _Deadline) -> None:
        with self._cond:
            heapq.heappush(self._heap, (deadline.when, next(self._seq), deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentgym-http-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                when, _, deadline = self._heap[0]
                wait = when - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
            deadline.fire()


_WATCHDOG = _Watchdog()


class _BoundedHandlerMixin:
    """An HTTP(S) handler whose connections honour the request's :class:`_Deadline` (``request.agentgym_deadline``)."""

    def do_open(self, http_class, req, **kwargs):  # noqa: D102 - urllib's hook
        deadline = getattr(req, "agentgym_deadline", None)
        if deadline is None:
            return super().do_open(http_class, req, **kwargs)

        def connection(host, **kw):
            conn = http_class(host, **kw)
            conn._create_connection = deadline.connector(conn._create_connection)
            return conn
        return super().do_open(connection, req, **kwargs)


class _BoundedHTTPHandler(_BoundedHandlerMixin, urllib.request.HTTPHandler):
    pass


class _BoundedHTTPSHandler(_BoundedHandlerMixin, urllib.request.HTTPSHandler):
    pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: the 3xx answer is raised as an ``HTTPError`` like any other non-2xx status."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _bounded_opener(direct: bool) -> urllib.request.OpenerDirector:
    handlers: list[Any] = [_NoRedirect(), _BoundedHTTPHandler(), _BoundedHTTPSHandler()]
    if direct:
        handlers.insert(0, urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


_BOUNDED_DIRECT = _bounded_opener(direct=True)
_BOUNDED_PROXIED: urllib.request.OpenerDirector | None = None  # built on first use: it reads the proxy variables


def bounded_request(request: urllib.request.Request, *, timeout_s: float, max_bytes: int) -> BoundedAnswer:
    """Send ``request`` (direct to a loopback host, else through the environment's proxies, as :func:`urlopen`) and
    read its answer within ``timeout_s`` seconds in all, redirects not followed (see the module doc).

    A 2xx body longer than ``max_bytes`` raises :class:`ResponseTooLarge` (at once when its Content-Length says so);
    a non-2xx answer (3xx included) is returned with at most :data:`ERROR_BODY_BYTES` of its body. The deadline
    raises :class:`DeadlineExceeded`; a failed connection raises ``urllib.error.URLError`` or ``OSError`` as
    ``urlopen`` does."""
    global _BOUNDED_PROXIED
    if is_loopback_url(request.full_url):
        opener = _BOUNDED_DIRECT
    else:
        if _BOUNDED_PROXIED is None:
            _BOUNDED_PROXIED = _bounded_opener(direct=False)
        opener = _BOUNDED_PROXIED
    deadline = _Deadline(timeout_s)
    request.agentgym_deadline = deadline
    try:
        try:
            resp = opener.open(request, timeout=timeout_s)
        except urllib.error.HTTPError as e:  # a non-2xx answer (a 3xx: not followed)
            try:
                body, truncated = read_capped(e.read, ERROR_BODY_BYTES, strict=False, expired=deadline.passed)
            except Exception:  # noqa: BLE001 - the body only goes into a message
                body, truncated = b"", False
            finally:
                e.close()
            return BoundedAnswer(e.code, e.headers, body, truncated)
        with resp:
            declared = _content_length(resp.headers)
            if declared is not None and declared > max_bytes:
                raise ResponseTooLarge(max_bytes, declared)
            body, _ = read_capped(resp.read, max_bytes, strict=True, expired=deadline.passed)
            return BoundedAnswer(resp.status, resp.headers, body)
    except (DeadlineExceeded, ResponseTooLarge):
        raise
    except Exception:
        if deadline.passed():  # whatever the cut connection raised (reset, incomplete read, EOF): the deadline
            raise DeadlineExceeded(f"no complete answer within {timeout_s}s") from None
        raise
    finally:
        deadline.close()


def _content_length(headers: Any) -> int | None:
    v = headers.get("Content-Length") if headers is not None else None
    try:
        n = int(str(v).strip()) if v is not None and len(str(v)) < 20 else None
    except ValueError:
        return None
    return n if n is not None and n >= 0 else None
