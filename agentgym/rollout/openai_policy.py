"""``openai:MODEL``: a text policy backed by any OpenAI-compatible chat-completions server (vLLM, SGLang, TGI,
llama.cpp, the OpenAI API).

Each prompt the env renders (its Appendix J prompt contract: task, observation, history, action formats) becomes one
chat request ``[system?, user=prompt]`` to ``POST {base_url}/chat/completions`` (streaming off). The policy has both
interfaces of :mod:`.policy`: per request, ``await agenerate(prompt, context)`` (what the episode-asynchronous runner
uses), and batched, ``policy(prompts, contexts=...)`` (the lockstep runner; answers in prompt order).

Transport: with ``aiohttp`` installed (the ``openai`` extra: ``pip install -e ".[openai]"`` in a checkout,
``pip install 'agentgym-kit[openai]'`` otherwise), one pooled keep-alive ``aiohttp.ClientSession`` per event loop, at most
``concurrency`` requests in flight (and as many connections, kept open between requests); the batched call runs the
same client on a private event-loop thread. Without it, each request is a stdlib ``urllib`` request on one of
``concurrency`` threads (a new connection per request). Either way a loopback endpoint is reached directly, never
through ``http_proxy`` (:mod:`agentgym.net`); other hosts follow the proxy variables. (Why not httpx: its connection
pool scans every connection for every request; with 256 requests in flight, ``benchmarks/rollouts.py --only async``
measures several ms of client CPU per request for one ``httpx.AsyncClient`` against a few tenths of a ms for
aiohttp, which decides whether one process can drive a server at ~1,300 requests/s.)

Endpoint: ``base_url``, else ``$OPENAI_BASE_URL``, else :data:`DEFAULT_BASE_URL` (the public OpenAI API). The policy's
``endpoint`` (scheme://host[:port], never a user, password, path or query) is what results rows record. An endpoint
that is not on a loopback address needs a key in the variable ``api_key_env`` names (an unset variable is refused
at construction with a :class:`~agentgym.errors.PolicyError` naming it; ``api_key_env=""`` sends no key anywhere).

One retry loop (:meth:`OpenAIPolicy._acomplete`) serves both transports and both interfaces: one attempt is
:meth:`OpenAIPolicy._send` (the pooled aiohttp client, or a blocking urllib request on one of ``concurrency``
threads); the batched call runs the same coroutine on the policy's event-loop thread.

Hostile servers: redirects are never followed (a 3xx is a :class:`PolicyRequestError` naming the status and the
``Location``; following it would carry the ``Authorization`` header to wherever the server points);
``timeout_s`` (``--request-timeout``) is a deadline for the whole attempt, connection to last byte, on both transports
(a server that drips its answer a byte at a time is cut off at it); an answer's body is read in chunks up to
``max_response_bytes`` (``--max-response-bytes``) and never buffered past it, a longer one is a
:class:`PolicyRequestError` naming the cap; compression is not asked for (``Accept-Encoding: identity``) nor undone,
so no small answer inflates; a number of more digits than a token count can have is read as a too-long number and
named by its field (``usage.prompt_tokens`` ...).

Failures: 429, 5xx, timeouts and dropped connections are retried up to ``max_retries`` times with exponential
backoff (``Retry-After`` honoured, capped at ``backoff_max``). Other HTTP errors (400, 401, 404...), unreadable
answers and answers without text (``content: null``, e.g. a refusal or a tool call) are not retried. A 200 answer is
checked field by field (:func:`check_answer_fields`: types and ranges of ``choices``, ``message``, ``content``,
``finish_reason``, ``usage``): a malformed one is a :class:`PolicyRequestError` whose ``field`` names the part. A
prompt whose request still fails comes back as a :class:`PolicyRequestError` *instance* in its slot of the returned
list; the runner turns it into a typed ``policy_error`` on that episode alone (never an empty action, never a
failure of the whole batch), whose ``details`` keep the request's attempts, latency and last HTTP status.

Sampling seed: with ``seed`` set, each request is sent its own seed, a stable digest of ``seed`` and the request's
episode and turn (:func:`~agentgym.rollout.policy.request_seeds`; the runner passes the episodes as ``contexts``),
so the members of a group and the trials of an episode are sampled independently, reproducibly, in any call order.

Every answer is a :class:`~agentgym.rollout.policy.PolicyResponse` (a ``str``) carrying a ``usage`` dict:
prompt/completion tokens as the server reported them, latency, attempts, finish reason. The runner copies it into the
turn record and the results row (``requests``).
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib.util
import json
import logging
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any, Sequence

from ..errors import MissingDependencyError, PolicyError
from ..net import ERROR_BODY_BYTES, MODEL_ANSWER_MAX_BYTES, ResponseTooLarge, bounded_request, is_loopback_url
from .policy import PolicyResponse as _PolicyResponse
from .policy import PromptContext, request_seeds

__all__ = ["OpenAIConfig", "OpenAIPolicy", "PolicyRequestError", "RETRYABLE_STATUS", "DEFAULT_BASE_URL",
           "BASE_URL_ENV", "endpoint_of"]

logger = logging.getLogger(__name__)

#: HTTP statuses that are retried (rate limit, server errors, gateway timeouts).
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

#: Where an ``openai:`` policy sends its requests when neither ``base_url`` nor ``$OPENAI_BASE_URL`` says otherwise.
DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: The environment variable that overrides :data:`DEFAULT_BASE_URL` (as the OpenAI SDK reads it).
BASE_URL_ENV = "OPENAI_BASE_URL"
#: The default cap on one answer's body (``--max-response-bytes``): a long completion with its usage is a few
#: hundred KB; this leaves room for reasoning text and logprobs and still bounds what a hostile server can make a
#: client hold (the cap is per request in flight).
DEFAULT_MAX_RESPONSE_BYTES = MODEL_ANSWER_MAX_BYTES


class PolicyRequestError(PolicyError):
    """A policy request that failed for good (after its retries, or at once for a non-retryable error).

    ``status`` is the last HTTP status (None when no answer came), ``refused`` whether the last attempt found no
    server listening (connection refused), ``field`` the part of a 200 answer that was malformed (``"usage"``,
    ``"choices[0].message.content"``...): the facts :mod:`agentgym.rollout.guard` reads to tell a misconfigured
    endpoint from a bad episode."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1, latency_s: float = 0.0,
                 refused: bool = False, field: str | None = None):
        super().__init__(message)
        self.status, self.attempts, self.latency_s = status, attempts, latency_s
        self.refused, self.field = refused, field

    @property
    def details(self) -> dict:
        """What :func:`~agentgym.errors.error_record` keeps in the episode's error record."""
        d = {"attempts": self.attempts, "latency_s": round(self.latency_s, 6), "status": self.status}
        if self.refused:
            d["refused"] = True
        if self.field is not None:
            d["field"] = self.field
        return d

    def __reduce__(self):
        return (_rebuild_request_error, (str(self), self.status, self.attempts, self.latency_s, self.refused,
                                         self.field))


def _rebuild_request_error(message, status, attempts, latency_s, refused=False, field=None):
    return PolicyRequestError(message, status=status, attempts=attempts, latency_s=latency_s, refused=refused,
                              field=field)


@dataclass
class OpenAIConfig:
    """Where and how to call the server. ``None`` sampling fields are left out of the request (server default)."""

    model: str
    # None: $OPENAI_BASE_URL, else DEFAULT_BASE_URL (the public OpenAI API)
    base_url: str | None = None
    # The *name* of the env var holding the key. Unset variable: no auth header, which only a loopback endpoint
    # accepts (OpenAIPolicy refuses a non-loopback endpoint without a key); "" sends no key to any endpoint.
    api_key_env: str = "OPENAI_API_KEY"
    system_prompt: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: Sequence[str] | None = None
    seed: int | None = None  # base seed: each request gets its own, derived from it (see the module doc)
    extra_body: dict[str, Any] = field(default_factory=dict)  # e.g. {"top_k": 20} for vLLM
    concurrency: int = 64  # requests in flight to the server (and pooled connections)
    timeout_s: float = 120.0  # per attempt: a deadline from connection to last byte, however slowly bytes arrive
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES  # the most bytes of one answer's body
    max_retries: int = 4
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    transport: str = "auto"  # auto (aiohttp when installed, else urllib) | aiohttp | urllib

    def __post_init__(self):
        if self.base_url is None:
            self.base_url = os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
        if not self.model:
            raise PolicyError("openai: policy needs a model name, e.g. openai:Qwen/Qwen2.5-7B-Instruct")
        if self.concurrency < 1:
            raise PolicyError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.max_retries < 0:
            raise PolicyError(f"max_retries must be >= 0, got {self.max_retries}")
        if not self.timeout_s > 0:
            raise PolicyError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.max_response_bytes < 1024:
            raise PolicyError(f"max_response_bytes must be >= 1024, got {self.max_response_bytes}")
        if not self.base_url.startswith(("http://", "https://")):
            raise PolicyError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if self.transport not in ("auto", "aiohttp", "urllib"):
            raise PolicyError(f"transport must be auto, aiohttp or urllib, got {self.transport!r}")
        if self.extra_body.get("stream"):
            raise PolicyError("streaming responses are not supported (extra_body sets stream); the policy needs "
                              "the whole answer and its usage in one JSON body")


class _Retryable(Exception):
    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None,
                 refused: bool = False):
        super().__init__(message)
        self.status, self.retry_after, self.refused = status, retry_after, refused


def endpoint_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: what a results row records of an endpoint (never a user, password,
    path or query, which may carry a key)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def _is_refused(exc: BaseException | None) -> bool:
    """Whether a connection error (aiohttp's or urllib's, maybe wrapped) is a refused connection: nothing listens."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, ConnectionRefusedError):
            return True
        exc = getattr(exc, "os_error", None) or getattr(exc, "reason", None) or exc.__cause__
        exc = exc if isinstance(exc, BaseException) else None
        seen += 1
    return False


def aiohttp_available() -> bool:
    return importlib.util.find_spec("aiohttp") is not None


class _LoopClient:
    """The pooled client of one event loop and the semaphore that caps its requests in flight."""

    def __init__(self, client, concurrency: int):
        self.client = client
        self.slots = asyncio.Semaphore(concurrency)


class OpenAIPolicy:
    """Chat-completions policy (per-request async and batched); see the module docstring."""

    def __init__(self, config: OpenAIConfig):
        self.config = config
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.name = f"openai:{config.model}"
        #: scheme://host[:port] of the server (the results rows record it; never a key)
        self.endpoint = endpoint_of(config.base_url)
        if config.api_key_env and not os.environ.get(config.api_key_env) and not is_loopback_url(self.url):
            raise PolicyError(
                f"no API key for {self.endpoint}: set {config.api_key_env} (or name another variable with "
                f"--api-key-env VAR; a server without auth takes any value, e.g. {config.api_key_env}=EMPTY). "
                f"Without --base-url the endpoint is ${BASE_URL_ENV} or {DEFAULT_BASE_URL}")
        if config.transport == "aiohttp" and not aiohttp_available():
            raise MissingDependencyError("aiohttp", "openai", "the pooled openai: client")
        self.transport = "urllib" if config.transport == "urllib" or not aiohttp_available() else "aiohttp"
        self._clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> _LoopClient
        self._bg: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None  # for the batched call

    def __repr__(self) -> str:
        return f"OpenAIPolicy(model={self.config.model!r}, base_url={self.config.base_url!r})"

    # -- the batched Policy protocol -------------------------------------------------------------------------
    def __call__(self, prompts: Sequence[str], contexts: Sequence[PromptContext] | None = None) -> list:
        if not prompts:
            return []
        seeds = request_seeds(self.config.seed, prompts, contexts) if self.config.seed is not None else \
            [None] * len(prompts)
        # The same per-request path as agenerate, on a private event-loop thread (answers in prompt order).
        return asyncio.run_coroutine_threadsafe(self._agather(prompts, seeds), self._background_loop()).result()

    async def _agather(self, prompts: Sequence[str], seeds: Sequence[int | None]) -> list:
        return list(await asyncio.gather(*(self._acomplete(p, s) for p, s in zip(prompts, seeds))))

    # -- the per-request async interface (the episode-asynchronous runner) -----------------------------------
    async def agenerate(self, prompt: str, context: PromptContext | None = None):
        """One prompt -> a :class:`PolicyResponse`, or a :class:`PolicyRequestError` *instance* (never raised) for a
        request that failed for good. The sampling seed derives from ``context`` (episode and turn) as in the batched
        call."""
        seed = None
        if self.config.seed is not None:
            seed = request_seeds(self.config.seed, [prompt], None if context is None else [context])[0]
        return await self._acomplete(prompt, seed)

    async def aclose(self) -> None:
        """Close the connection pool of the running event loop (the async runner awaits this at the end of a run)."""
        state = self._clients.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state.client.close()

    def close(self) -> None:
        """Close the thread pool and the batched call's event loop (and its connections)."""
        if self._bg is not None:
            loop, thread = self._bg
            self._bg = None
            try:
                asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(timeout=10)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            if not thread.is_alive():
                loop.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="openai-policy")
            return self._pool

    def _background_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._bg is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="openai-policy-loop", daemon=True)
                thread.start()
                self._bg = (loop, thread)
            return self._bg[0]

    # -- one prompt ------------------------------------------------------------------------------------------
    def messages(self, prompt: str) -> list[dict]:
        sys_msg = [{"role": "system", "content": self.config.system_prompt}] if self.config.system_prompt else []
        return sys_msg + [{"role": "user", "content": prompt}]

    def request_body(self, prompt: str, seed: int | None = None) -> dict:
        """The JSON body for ``prompt``; ``seed`` is this request's sampling seed (see the module doc)."""
        c = self.config
        body: dict[str, Any] = {"model": c.model, "messages": self.messages(prompt)}
        for key in ("temperature", "top_p", "max_tokens"):
            if getattr(c, key) is not None:
                body[key] = getattr(c, key)
        if seed is not None:
            body["seed"] = int(seed)
        if c.stop:
            body["stop"] = list(c.stop)
        body.update(c.extra_body)
        return body

    def _headers(self) -> dict[str, str]:
        # identity: a compressed answer could inflate far past the size cap, which counts the bytes received
        headers = {"Content-Type": "application/json", "Accept": "application/json", "Accept-Encoding": "identity"}
        key = os.environ.get(self.config.api_key_env) if self.config.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _client(self) -> _LoopClient:
        loop = asyncio.get_running_loop()
        state = self._clients.get(loop)
        if state is None:
            import aiohttp

            c = self.config
            # limit: the most connections open at once (kept alive between requests); the semaphore caps requests in
            # flight at the same number. trust_env: aiohttp reads http_proxy & co. only when asked; a loopback endpoint
            # never goes through a proxy.
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=c.concurrency, limit_per_host=0, keepalive_timeout=60),
                timeout=aiohttp.ClientTimeout(total=c.timeout_s),  # per attempt: connection to last byte
                auto_decompress=False,  # the size cap counts received bytes; compression is not asked for
                trust_env=not is_loopback_url(self.url), headers=self._headers())
            state = self._clients[loop] = _LoopClient(session, c.concurrency)
        return state

    async def _send(self, data: bytes) -> tuple[dict, float]:
        """One attempt over the transport: the decoded answer and the attempt's latency (from the moment it holds a
        request slot). Raises :class:`_Retryable` or :class:`PolicyRequestError` (see :func:`_check_answer`)."""
        if self.transport == "aiohttp":
            state = self._client()
            async with state.slots:
                t0 = time.perf_counter()
                payload = await self._apost(state.client, data)
                return payload, time.perf_counter() - t0
        # urllib: one blocking request on one of ``concurrency`` threads (the pool caps the requests in flight).
        return await asyncio.get_running_loop().run_in_executor(self._threads(), self._timed_post, data)

    def _timed_post(self, data: bytes) -> tuple[dict, float]:
        t0 = time.perf_counter()
        payload = self._post(data)
        return payload, time.perf_counter() - t0

    async def _acomplete(self, prompt: str, seed: int | None = None):
        """The one retry loop of both transports: one prompt -> a :class:`PolicyResponse`, or a
        :class:`PolicyRequestError` instance (never raised)."""
        c = self.config
        data = json.dumps(self.request_body(prompt, seed)).encode("utf-8")
        t_start = time.perf_counter()
        last: _Retryable | None = None
        for attempt in range(1, c.max_retries + 2):
            try:
                payload, latency = await self._send(data)
                return self._parse(payload, latency=latency, attempts=attempt, total=time.perf_counter() - t_start)
            except _Retryable as e:
                last = e
            except PolicyRequestError as e:
                e.attempts, e.latency_s = attempt, time.perf_counter() - t_start
                return e
            except Exception as e:  # noqa: BLE001 - anything else fails this prompt alone, typed
                return PolicyRequestError(f"{self.url}: {type(e).__name__}: {e}", attempts=attempt,
                                          latency_s=time.perf_counter() - t_start)
            if attempt > c.max_retries:
                break
            delay = self._backoff(attempt, last)
            logger.info("openai policy: %s; retry %d/%d in %.2fs", last, attempt, c.max_retries, delay)
            await asyncio.sleep(delay)
        assert last is not None
        return PolicyRequestError(f"{self.url}: {last} (gave up after {c.max_retries + 1} attempts)",
                                  status=last.status, attempts=c.max_retries + 1,
                                  latency_s=time.perf_counter() - t_start, refused=last.refused)

    async def _apost(self, session, data: bytes) -> dict:
        import aiohttp

        cap = self.config.max_response_bytes
        try:
            async with session.post(self.url, data=data, allow_redirects=False) as resp:
                status, headers = resp.status, resp.headers
                if 200 <= status < 300:
                    declared = resp.content_length
                    try:
                        if declared is not None and declared > cap:
                            raise ResponseTooLarge(cap, declared)
                        raw, _ = await _aread_capped(resp.content, cap, strict=True)
                    except ResponseTooLarge:
                        resp.close()  # the rest is never read: the connection is not reused
                        raise
                else:  # only the first bytes go into the error message
                    try:
                        raw, cut = await _aread_capped(resp.content, ERROR_BODY_BYTES, strict=False)
                    except (aiohttp.ClientError, ValueError):
                        raw, cut = b"", True
                    if cut:
                        resp.close()
        except ResponseTooLarge as e:
            raise self._too_large(e) from None
        except (asyncio.TimeoutError, TimeoutError) as e:
            raise _Retryable(f"timed out after {self.config.timeout_s}s ({type(e).__name__})") from None
        except aiohttp.ClientError as e:  # refused, reset, closed mid-answer
            raise _Retryable(f"connection failed: {type(e).__name__}: {e}", refused=_is_refused(e)) from None
        return _check_answer(self.url, status, raw, headers)

    def _too_large(self, e: ResponseTooLarge) -> PolicyRequestError:
        return PolicyRequestError(
            f"{self.url}: {e} (--max-response-bytes {self.config.max_response_bytes}); not read further, not "
            "retried", status=200, field="(body)")

    def _backoff(self, attempt: int, err: "_Retryable") -> float:
        """Exponential backoff with jitter (concurrent retries must not hit a rate limit in lockstep), at least the
        server's ``Retry-After``, at most ``backoff_max_s``."""
        c = self.config
        delay = min(c.backoff_max_s, c.backoff_s * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
        if err.retry_after is not None:
            delay = min(c.backoff_max_s, max(delay, err.retry_after))
        return delay

    def _post(self, data: bytes) -> dict:
        req = urllib.request.Request(self.url, data=data, headers=self._headers(), method="POST")
        try:
            # a deadline for the whole exchange, redirects not followed, the body capped (agentgym.net)
            answer = bounded_request(req, timeout_s=self.config.timeout_s, max_bytes=self.config.max_response_bytes)
            status, raw, headers = answer.status, answer.body, answer.headers
        except ResponseTooLarge as e:
            raise self._too_large(e) from None
        except (TimeoutError, socket.timeout) as e:  # DeadlineExceeded included
            raise _Retryable(f"timed out after {self.config.timeout_s}s ({e})") from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, (TimeoutError, socket.timeout)):
                raise _Retryable(f"timed out after {self.config.timeout_s}s") from None
            raise _Retryable(f"connection failed: {e.reason}", refused=_is_refused(e)) from None
        except (ConnectionError, HTTPException, OSError) as e:
            raise _Retryable(f"connection failed: {type(e).__name__}: {e}", refused=_is_refused(e)) from None
        return _check_answer(self.url, status, raw, headers)

    def _parse(self, payload: Any, *, latency: float, attempts: int, total: float) -> _PolicyResponse:
        """A 200 answer -> its text and usage record, after checking the types and ranges of what is read
        (:func:`check_answer_fields`): a malformed answer raises :class:`PolicyRequestError` naming the field."""
        content, finish_reason, usage = check_answer_fields(self.url, payload)
        return _PolicyResponse(content, {
            "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
            "latency_s": round(latency, 6), "total_s": round(total, 6), "attempts": attempts,
            "finish_reason": finish_reason,
        })


#: The most tokens one answer may report (a larger count is a server bug, not a measurement).
MAX_TOKEN_COUNT = 1 << 40


def check_answer_fields(url: str, payload: Any) -> tuple[str, str | None, dict]:
    """``(content, finish_reason, usage)`` of a chat-completions answer, each checked for type and range:
    ``choices`` a non-empty list whose first item is an object with a ``message`` object; ``content`` a string
    (``null`` means the model returned no text: a refusal or a tool call); ``finish_reason`` null or a string;
    ``usage`` absent, null or an object whose ``prompt_tokens`` / ``completion_tokens`` / ``total_tokens`` are absent,
    null or integers in ``[0, 2**40)``. Anything else raises :class:`PolicyRequestError` (status 200) with
    ``field`` naming the offending part, so the episode gets a typed ``policy_error``, never a crash of the run."""

    def bad(field: str, what: str) -> PolicyRequestError:
        return PolicyRequestError(f"{url}: malformed answer: {field} {what}", status=200, field=field)

    def kind(v: Any) -> str:
        if isinstance(v, _LongNumber):
            return "a number too long to be a count"
        return "null" if v is None else type(v).__name__

    if not isinstance(payload, dict):
        raise bad("(body)", f"is a JSON {kind(payload)}, not an object: {str(payload)[:200]}")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        what = "is an empty list" if isinstance(choices, list) else f"is {kind(choices)}, not a non-empty list"
        raise bad("choices", f"{what}: {str(payload)[:200]}")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise bad("choices[0]", f"is {kind(choice)}, not an object")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise bad("choices[0].message", f"is {kind(message)}, not an object")
    finish_reason = choice.get("finish_reason")
    if finish_reason is not None and not isinstance(finish_reason, str):
        raise bad("choices[0].finish_reason", f"is {kind(finish_reason)}, not a string or null")
    content = message.get("content")
    if content is None:
        # No text at all (a refusal, a tool call, a server bug): not an answer to score as an empty action.
        raise PolicyRequestError(f"{url}: the answer's message content is null (finish_reason {finish_reason!r}): "
                                 "the model returned no text", status=200, field="choices[0].message.content")
    if not isinstance(content, str):
        raise bad("choices[0].message.content", f"is {kind(content)}, not a string")
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate (JSON "\ud800"): no text a results file can hold
        raise bad("choices[0].message.content", f"is not valid Unicode ({e.reason} at {e.start})") from None
    usage = payload.get("usage")
    if usage is None:
        usage = {}
    if not isinstance(usage, dict):
        raise bad("usage", f"is {kind(usage)}, not an object or null")
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        v = usage.get(key)
        if v is not None and (type(v) is not int or not 0 <= v < MAX_TOKEN_COUNT):
            raise bad(f"usage.{key}", f"is {str(v)[:80]!r} ({kind(v)}), not an integer in [0, 2**40) or null")
    return content, finish_reason, usage


def _retry_after(headers) -> float | None:
    """``Retry-After`` in seconds: a number of seconds or an HTTP date (RFC 9110); None when absent or unreadable."""
    v = headers.get("Retry-After") if headers is not None else None
    if v is None:
        return None
    try:
        return max(0.0, float(v))
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time()) if when is not None else None


async def _aread_capped(content, limit: int, *, strict: bool) -> tuple[bytes, bool]:
    """An aiohttp body (``resp.content``) read in chunks, never buffered past ``limit``: ``(body, truncated)``, as
    :func:`agentgym.net.read_capped` (the session's total timeout bounds the time)."""
    buf = bytearray()
    while True:
        chunk = await content.read(64 * 1024)
        if not chunk:
            return bytes(buf), False
        buf += chunk
        if len(buf) > limit:
            if strict:
                raise ResponseTooLarge(limit)
            return bytes(buf[:limit]), True


def _redirect_error(url: str, status: int, headers) -> PolicyRequestError:
    location = headers.get("Location") if headers is not None else None
    where = f" to {str(location)[:300]!r}" if location else " (no Location)"
    return PolicyRequestError(
        f"{url}: HTTP {status} redirect{where}: not followed (it would carry the API key to wherever the server "
        "points; set --base-url to the address that answers, if you trust it)", status=status)


class _LongNumber:
    """A JSON integer with more digits than any count in an answer can have (Python refuses to read past 4,300
    digits; this stops at :data:`_MAX_INT_DIGITS`): kept as a marker, so the field check names where it was."""

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"<a number of {self.digits} digits>"

    __str__ = __repr__


_MAX_INT_DIGITS = 64


def _parse_int(text: str):
    return int(text) if len(text) <= _MAX_INT_DIGITS else _LongNumber(len(text.lstrip("-")))


def _check_answer(url: str, status: int, raw: bytes, headers) -> dict:
    """One HTTP answer (either transport) -> its decoded JSON body. A non-2xx status raises :class:`_Retryable`
    (``RETRYABLE_STATUS``, with ``Retry-After``) or :class:`PolicyRequestError` (not retried), the message carrying
    the body's first 300 bytes; an unreadable body raises :class:`PolicyRequestError`."""
    if 300 <= status < 400:
        raise _redirect_error(url, status, headers)
    if not 200 <= status < 300:
        body = raw[:300].decode("utf-8", "replace").strip()
        detail = f": {body}" if body else ""
        if status in RETRYABLE_STATUS:
            raise _Retryable(f"HTTP {status}{detail}", status, _retry_after(headers))
        raise PolicyRequestError(f"{url}: HTTP {status}{detail} (not retried)", status=status)
    encoding = headers.get("Content-Encoding") if headers is not None else None
    if encoding and str(encoding).strip().lower() != "identity":
        raise PolicyRequestError(f"{url}: the answer is {str(encoding)[:40]!r}-encoded, though the request asked for "
                                 "identity (compressed answers are not read)", status=status, field="(body)")
    try:
        return json.loads(raw, parse_int=_parse_int)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError; RecursionError: too deep
        raise PolicyRequestError(f"{url}: unreadable JSON answer ({type(e).__name__}: {str(e)[:200]}): "
                                 f"{raw[:200]!r}", status=status, field="(body)") from None
