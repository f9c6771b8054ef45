"""The sessions of ``agentgym serve``: one env per WebSocket session, made at the session's first ``reset``, and the
handling of the OpenEnv messages (see :mod:`agentgym.serve`). No HTTP here: :mod:`agentgym.serve.app` routes to this.

A session is *pending* from the WebSocket's accept to its first ``reset``: it holds no env and no slot of
``max_sessions``, only its socket; at most ``max_sessions`` may be pending (the one pending longest makes room for a
new one) and each must reset within ``first_reset_timeout_s``. Its first ``reset`` takes a slot and makes its env
(``CAPACITY_REACHED`` / ``FACTORY_ERROR`` when it cannot), so sockets that connect and never send hold nothing
another client needs. An env whose steps are fast (not marked ``slow_steps``: a TextCraft step costs ~20 µs) is
called inline on the event loop, as the async rollout runner does; a slow one (AppWorld, τ-airline, WikiSearch,
ALFWorld), or every env with ``offload``, in a thread of the session's own, bounded by ``step_timeout_s``."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from agentgym.core import TASK_OPTIONS
from agentgym.errors import TaskError, error_record
from retrieval.protocol import ProtocolError, decode_json_body

from .protocol import (CAPACITY_REACHED, EXECUTION_ERROR, FACTORY_ERROR, INVALID_JSON, UNKNOWN_TYPE,
                       VALIDATION_ERROR, AgentGymAction,
                       AgentGymObservation, AgentGymState, ResetRequest, error_frame, jsonable, mcp_error,
                       validation_errors)

from pydantic import ValidationError  # after .protocol, which names the extra when pydantic is missing

__all__ = ["ServeConfig", "AgentGymServer", "CapacityError", "EnvCallError", "SessionRefused"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeConfig:
    """What to serve and the server's bounds.

    Attributes:
        env_id: the agentgym env id (``TextCraft-v0``).
        split: the split every session plays (None: the env's default split).
        env_kwargs: further keyword arguments of the env (``max_turns``...), the same for every session.
        host, port: where to listen (port 0: any free port).
        max_sessions: concurrent WebSocket sessions with an env (one each, made at the session's first reset); also
            bounds the sessions pending their first reset and the stateless HTTP requests in flight. The default, 512,
            fits a GRPO batch of 64 tasks x 8 samples (TextCraft: ~0.1 MB per session, benchmarks/RESULTS_serve.md).
        idle_timeout_s: a session with an env and no message for this long is closed and its env freed.
        first_reset_timeout_s: a new session that sends no reset within this is closed (it never held an env).
        step_timeout_s: wall-clock limit of one env call run on a thread (make, and the reset and step of slow envs or
            with ``offload``); past it the session is closed. Fast envs' calls run inline and are not timed.
        offload: call every env on its session's own thread, not only the envs marked ``slow_steps``.
        ws_compression: offer WebSocket per-message compression (permessage-deflate). Off by default: on loopback
            and a LAN it costs more CPU per step than the step (for clients far away on thin links, turn it on).
        max_message_bytes: the largest WebSocket message or HTTP request body accepted.
        max_json_depth: the deepest JSON nesting of a message or body (a message needs about 6).
        request_timeout_s: an HTTP request must arrive whole (headers and body) within this of its first byte (a JSON
            408 beyond), and a new connection must start one within this; WebSocket upgrades included.
        keep_alive_timeout_s: how long an HTTP connection may stay open, idle, between requests.
        max_connections: open TCP connections (WebSockets included) beyond which a new one first closes the
            longest-idle HTTP connection (else the slowest request still arriving), and gets a JSON 503 only when
            every connection is busy; idle connections never count against the sessions or the requests in flight.
        max_header_bytes: the largest request line + headers (a JSON 431 beyond).
        auth_token: when set, every HTTP request and WebSocket upgrade must carry ``Authorization: Bearer <token>``
            (compared in constant time); 401 otherwise.
        allow_remote: bind a non-loopback host without ``auth_token`` (refused otherwise; logged as a warning).
        allowed_origins: the ``Origin`` values a request or WebSocket upgrade may carry besides none and the
            server's own (``scheme://host[:port]``), and, without a token, the hosts a ``Host`` header may name
            besides the loopback names; others get 403, so a web page cannot drive the server from a browser.
    """

    env_id: str
    split: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8000
    max_sessions: int = 512
    idle_timeout_s: float = 120.0
    first_reset_timeout_s: float = 30.0
    step_timeout_s: float = 300.0
    offload: bool = False
    ws_compression: bool = False
    max_message_bytes: int = 1 << 20
    max_json_depth: int = 64
    request_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0
    max_connections: int = 2048
    max_header_bytes: int = 16 * 1024
    auth_token: str | None = field(default=None, repr=False)
    allow_remote: bool = False
    allowed_origins: tuple[str, ...] = ()

    def __post_init__(self):
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if self.idle_timeout_s <= 0 or self.step_timeout_s <= 0 or self.first_reset_timeout_s <= 0:
            raise ValueError("idle_timeout_s, first_reset_timeout_s and step_timeout_s must be > 0")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")
        if self.max_json_depth < 8:
            raise ValueError(f"max_json_depth must be >= 8, got {self.max_json_depth}")
        if self.request_timeout_s <= 0 or self.keep_alive_timeout_s <= 0:
            raise ValueError("request_timeout_s and keep_alive_timeout_s must be > 0")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {self.max_connections}")
        if self.max_header_bytes < 1024:
            raise ValueError(f"max_header_bytes must be >= 1024, got {self.max_header_bytes}")
        if self.auth_token is not None and not self.auth_token.strip():
            raise ValueError("auth_token must not be empty")


class CapacityError(RuntimeError):
    """All ``max_sessions`` session slots are taken."""


class SessionRefused(Exception):
    """A session's first reset could not open it (no slot, or its env could not be made): ``frame`` is the error
    frame to send before the session is closed."""

    def __init__(self, frame: dict[str, Any]):
        super().__init__(frame["data"]["message"])
        self.frame = frame


class EnvCallError(RuntimeError):
    """The env raised (``record``: its typed error record) or ran past the step timeout (``timed_out``).
    ``client_error``: the request named a task that does not exist or reset options the env refused (a
    :class:`~agentgym.errors.TaskError`: HTTP 422, not a server fault)."""

    def __init__(self, stage: str, exc: BaseException | None, timeout_s: float | None = None):
        if exc is None:
            from agentgym.errors import EpisodeTimeoutError

            exc = EpisodeTimeoutError(f"the env's {stage} ran past the server's step timeout ({timeout_s:g} s)")
        self.timed_out = timeout_s is not None
        self.client_error = isinstance(exc, TaskError)
        rec = error_record(exc, stage).to_dict()
        rec.pop("traceback", None)  # logged server-side; clients get the typed record
        self.record = rec
        super().__init__(f"{stage} failed: {rec['exception']}: {rec['message']}")


@dataclass(eq=False)
class _Session:
    """One WebSocket session: its env (None while pending: before its first reset), the thread that runs it (None
    for an env called inline), and its episode. ``displace``: how the app closes it when it must make room (set by
    the app: the sessions know no sockets)."""

    session_id: str
    created_at: float
    executor: ThreadPoolExecutor | None = None
    env: Any = None
    displace: Callable[[], Any] | None = None
    last_activity_at: float = 0.0
    step_count: int = 0
    episode_id: str | None = None
    in_episode: bool = False
    stuck: bool = False  # an env call ran past the step timeout and may still be running
    busy: bool = False  # a message of its own is being handled (the session clock waits)

    def info(self) -> dict[str, Any]:  # OpenEnv's SessionInfo
        return {"session_id": self.session_id, "created_at": self.created_at,
                "last_activity_at": self.last_activity_at, "step_count": self.step_count,
                "environment_type": type(self.env).__name__ if self.env is not None else "pending"}


# ---- env calls (they run in the session's own thread) -------------------------------------------------------------
#: What an env's reset raises for reset options it cannot use (a task index out of range, a task id of the wrong
#: type): the client's mistake when the client sent the options.
_BAD_OPTIONS = (ValueError, TypeError, KeyError, IndexError, OverflowError)

#: The longest number literal a message may hold (a 64-bit seed has 20 digits; a float's repr at most 24 characters).
MAX_NUMBER_CHARS = 100


def _reset_call(env, seed: int | None, options: dict | None) -> dict[str, Any]:
    # A reset the env refuses (an unknown task) raises before it touches the episode (agentgym.core selects the task
    # first); gymnasium has reseeded np_random by then, which is put back, so the episode in progress plays on as if
    # the reset had never been sent.
    base = getattr(env, "unwrapped", env)
    task_before, rng_before = getattr(env, "task", None), getattr(base, "_np_random", None)
    seed_before = getattr(base, "_np_random_seed", None)
    try:
        obs, info = env.reset(seed=seed, options=options)
    except _BAD_OPTIONS as e:
        if getattr(env, "task", None) is task_before and hasattr(base, "_np_random"):
            base._np_random, base._np_random_seed = rng_before, seed_before
        if options is None or isinstance(e, TaskError):
            raise
        raise TaskError(f"the env cannot reset with these options ({', '.join(sorted(map(str, options)))}): "
                        f"{type(e).__name__}: {e}") from e
    return {"observation": _observation(obs, env.prompt(), info), "reward": None, "done": False}


def _step_call(env, action) -> dict[str, Any]:
    obs, reward, terminated, truncated, info = env.step(action)
    return {"observation": _observation(obs, env.prompt(), info, bool(terminated), bool(truncated)),
            "reward": float(reward), "done": bool(terminated or truncated)}


def _observation(text: Any, prompt: Any, info: Any, terminated: bool = False, truncated: bool = False) -> dict:
    """``AgentGymObservation(...).model_dump(exclude={"reward", "done"})``, built directly: the same keys in the same
    order (tests/adapters/test_adapters_serve.py checks it), without a model's validation and dump on every step
    (a fifth of the server's own CPU per TextCraft step)."""
    if not isinstance(text, str) or not isinstance(prompt, str):
        raise TypeError(f"the env returned a {type(text).__name__} observation / {type(prompt).__name__} prompt; "
                        "both must be text")
    return {"metadata": {}, "text": text, "prompt": prompt, "info": jsonable(info), "terminated": terminated,
            "truncated": truncated}


def task_field(req: ResetRequest) -> str:
    """The request field that selected the task (for a client error that names it)."""
    if req.task_id is not None:
        return "task_id"
    for key in (req.options or {}):
        if key in TASK_OPTIONS:
            return f"options.{key}"
    return "options"


#: A JSON escape of a UTF-16 surrogate: where a lone one may hide in a decoded text (raw UTF-8 cannot hold one).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF][0-9a-fA-F]{2}")


def lone_surrogate_path(value: Any, path: str = "$") -> str | None:
    """Where in a decoded JSON value a string (or an object key) holds a lone UTF-16 surrogate, which is not Unicode
    text (``json`` decodes ``"\\ud800"`` to one, and no UTF-8 answer, log or transcript can carry it): a path such as
    ``$.data.action``, or None. Bounded by the value's depth (the decoder has bounded it)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            key = lone_surrogate_path(k, path)
            if key is not None:
                return f"{path} (an object key)"
            found = lone_surrogate_path(v, f"{path}.{k}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = lone_surrogate_path(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _reset_options(req: ResetRequest) -> dict | None:
    options = dict(req.options or {})
    if req.task_id is not None:
        if "task_id" in options and options["task_id"] != req.task_id:
            raise ValueError("task_id and options['task_id'] disagree")
        options["task_id"] = req.task_id
    return options or None


class AgentGymServer:
    """The sessions of one served env split and the handling of the OpenEnv messages (see the module doc)."""

    def __init__(self, config: ServeConfig, make_env: Callable[[], Any] | None = None):
        from agentgym.registration import get_entry

        self.config = config
        self.entry = get_entry(config.env_id)
        self.split = config.split or self.entry.default_split
        if make_env is None:
            import agentgym

            kwargs = {"split": self.split, **config.env_kwargs}

            def make_env():
                return agentgym.make(config.env_id, **kwargs)

        self.make_env = make_env
        self.sessions: dict[str, _Session] = {}  # sessions with an env (or being made one): they hold the slots
        self.pending: dict[str, _Session] = {}  # accepted, no reset yet: oldest first
        self._lock = asyncio.Lock()
        self._reserved = 0  # slots taken by sessions whose env is still being made
        # Stateless HTTP requests (a fresh env each) and the making of inline sessions' envs share one bounded pool,
        # apart from the sessions' threads.
        self._stateless = ThreadPoolExecutor(max_workers=min(config.max_sessions, 8), thread_name_prefix="stateless")
        self._stateless_slots = asyncio.Semaphore(config.max_sessions)
        self._probe: dict[str, Any] | None = None
        self._logged_faults: set[tuple[str, str]] = set()

    # ---- facts about the served env (one throwaway env, made once) --------------------------------------------------
    def probe(self) -> dict[str, Any]:
        """Make one env: its identity, the split's task ids (None for an unbounded generated split) and whether its
        steps are slow (``slow_steps``: called on a thread). Raises what making the env raises, so a server that
        cannot make its env fails at start, not per session."""
        if self._probe is None:
            from agentgym.errors import TaskError

            env = self.make_env()
            try:
                try:
                    task_ids = list(env.task_ids()) if hasattr(env, "task_ids") else None
                except TaskError:
                    task_ids = None  # unbounded
                self._probe = {"identity": jsonable(env.run_identity()), "task_ids": task_ids,
                               "slow_steps": bool(getattr(getattr(env, "unwrapped", env), "slow_steps", False))}
            finally:
                env.close()
        return self._probe

    def metadata(self) -> dict[str, Any]:
        import agentgym

        return {"name": self.config.env_id, "description": self.entry.description or self.entry.env_id,
                "readme_content": None, "version": agentgym.__version__, "author": None,
                "documentation_url": None}

    @staticmethod
    def schema() -> dict[str, Any]:
        return {"action": AgentGymAction.model_json_schema(), "observation": AgentGymObservation.model_json_schema(),
                "state": AgentGymState.model_json_schema()}

    # ---- sessions -------------------------------------------------------------------------------------------------
    def accept_session(self) -> tuple[_Session, _Session | None]:
        """A new session, pending until its first reset (no env, no slot), and the pending session it displaces when
        ``max_sessions`` are already pending: the one pending longest, which the caller closes (``displace``)."""
        now = time.time()
        session = _Session(session_id=str(uuid.uuid4()), created_at=now, last_activity_at=now)
        displaced = None
        if len(self.pending) >= self.config.max_sessions:
            displaced = self.pending.pop(next(iter(self.pending)))
        self.pending[session.session_id] = session
        return session, displaced

    async def _open(self, session: _Session) -> None:
        """A pending session's first reset: take a slot and make its env. :class:`SessionRefused` (with the frame to
        send) when every slot is taken or the env cannot be made; the caller then closes the session."""
        async with self._lock:
            if len(self.sessions) + self._reserved >= self.config.max_sessions:
                raise SessionRefused(error_frame(
                    CAPACITY_REACHED, f"server at capacity: {self.config.max_sessions} sessions are open",
                    active_sessions=len(self.sessions), max_sessions=self.config.max_sessions))
            self._reserved += 1  # the slot is held while the env is made, outside the lock
            self.pending.pop(session.session_id, None)
        if self.config.offload or self.probe()["slow_steps"]:
            session.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="session")
        try:
            # made on a thread either way (making an env may read data files); in the session's own when it has one
            session.env = await self._call(session if session.executor else None, "make", self.make_env)
        except EnvCallError as e:
            raise SessionRefused(error_frame(FACTORY_ERROR, str(e), factory_name=self.config.env_id,
                                             error=e.record)) from None
        finally:
            async with self._lock:
                self._reserved -= 1
                if session.env is not None:
                    self.sessions[session.session_id] = session
            if session.env is None and session.executor is not None:
                session.executor.shutdown(wait=False)
        logger.info("session %s opened (%d open)", session.session_id, len(self.sessions))

    async def close_session(self, session: _Session) -> None:
        self.pending.pop(session.session_id, None)
        async with self._lock:
            if self.sessions.pop(session.session_id, None) is None:
                return
        if session.executor is None:  # a fast env, called inline
            try:
                session.env.close()
            except Exception as e:  # noqa: BLE001 - a failing close must not keep the slot
                logger.warning("session %s: env.close() failed: %r", session.session_id, e)
        else:
            # Queued behind any env call still running in the session's thread (a step past its time limit), so
            # the env is closed in the thread that made it, whenever that call returns.
            fut = session.executor.submit(session.env.close)
            if not session.stuck:
                try:
                    await asyncio.wait_for(asyncio.wrap_future(fut), timeout=5.0)
                except Exception as e:  # noqa: BLE001 - a failing close must not keep the slot
                    logger.warning("session %s: env.close() failed or timed out: %r", session.session_id, e)
            session.executor.shutdown(wait=False)
        logger.info("session %s closed (%d open)", session.session_id, len(self.sessions))

    async def close_all(self) -> None:
        for session in list(self.sessions.values()):
            await self.close_session(session)
        self.pending.clear()
        self._stateless.shutdown(wait=False)

    async def _call(self, session: _Session | None, stage: str, fn: Callable, *args) -> Any:
        """Run an env call in the session's thread (or the shared pool when ``session`` is None), bounded by the
        step timeout."""
        loop = asyncio.get_running_loop()
        executor = session.executor if session is not None else self._stateless
        fut = loop.run_in_executor(executor, fn, *args)
        done, _ = await asyncio.wait({fut}, timeout=self.config.step_timeout_s)
        if not done:  # the thread cannot be stopped: the caller ends the session, closing the env after the call
            raise EnvCallError(stage, None, timeout_s=self.config.step_timeout_s)
        try:
            return fut.result()
        except Exception as e:  # noqa: BLE001 - any env exception is an env failure, typed for the client
            self._log_fault(stage, e)
            raise EnvCallError(stage, e) from e

    async def _session_call(self, session: _Session, stage: str, fn: Callable, *args) -> Any:
        """An env call of a session: on its thread when it has one, else inline (a fast env: no thread hop)."""
        if session.executor is not None:
            return await self._call(session, stage, fn, *args)
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - any env exception is an env failure, typed for the client
            self._log_fault(stage, e)
            raise EnvCallError(stage, e) from e

    def _log_fault(self, stage: str, exc: Exception) -> None:
        """A bad task id is the client's mistake: a debug line. An env fault is logged with its traceback once per
        stage and exception type, then as one line, so a failing env does not flood the log frame after frame."""
        if isinstance(exc, TaskError):
            logger.debug("%s %s refused: %r", self.config.env_id, stage, exc)
            return
        key = (stage, type(exc).__name__)
        first = key not in self._logged_faults
        self._logged_faults.add(key)
        logger.warning("%s %s failed: %r%s", self.config.env_id, stage, exc,
                       "" if first else " (traceback logged at its first occurrence)", exc_info=first)

    # ---- the session protocol ---------------------------------------------------------------------------------------
    def decode(self, raw: str | bytes, what: str = "the frame") -> Any:
        """A message or body as JSON, within the server's depth and number bounds, whose strings are all Unicode
        text (no lone surrogate, escaped or not); :class:`ProtocolError` says why not, naming where (it never
        recurses on the input's nesting beyond the depth bound, so no nesting can crash it)."""
        data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
        value = decode_json_body(data, self.config.max_json_depth, max_number_chars=MAX_NUMBER_CHARS, what=what,
                                 finite=True)
        # Raw UTF-8 cannot hold a surrogate (the decoder above refuses it): only an escape can make one, so the walk
        # runs only for a message that has one (a valid pair is an escape too, and passes the walk).
        if _SURROGATE_ESCAPE.search(data):
            where = lone_surrogate_path(value)
            if where is not None:
                raise ProtocolError(f"{what} holds a lone UTF-16 surrogate at {where}: not Unicode text (a surrogate "
                                    "escape such as \\ud800 must be one of a pair)", 400)
        return value

    async def handle(self, session: _Session, raw: str | bytes) -> dict[str, Any] | None:
        """Answer one client frame (text, or binary UTF-8); None for ``close``. Raises :class:`EnvCallError` only
        for a timed-out call, and :class:`SessionRefused` when a first reset cannot open the session (the session
        must end); every other problem is an error frame and the session stays."""
        session.last_activity_at = time.time()
        try:
            message = self.decode(raw)
        except ProtocolError as e:
            return error_frame(INVALID_JSON, f"Invalid JSON: {e}")
        if not isinstance(message, dict):
            return error_frame(VALIDATION_ERROR, "a message is a JSON object with a 'type'")
        kind = message.get("type")
        extra = set(message) - {"type", "data"}
        if extra:
            return error_frame(VALIDATION_ERROR, f"unknown message fields {sorted(extra)}")
        data = message.get("data", {})
        if not isinstance(data, dict):
            return error_frame(VALIDATION_ERROR, "'data' must be a JSON object")
        try:
            if kind == "reset":
                request = ResetRequest.model_validate(data)
                return await self._reset(session, request)
            if kind == "step":
                return await self._step(session, AgentGymAction.model_validate(data))
            if kind == "state":
                return {"type": "state", "data": self.state(session)}
            if kind == "close":
                return None
            if kind == "mcp":
                return {"type": "mcp", "data": mcp_error(data.get("id"))}
        except ValidationError as e:
            return error_frame(VALIDATION_ERROR, "Invalid message", errors=validation_errors(e))
        except ValueError as e:
            return error_frame(VALIDATION_ERROR, str(e))
        except EnvCallError as e:
            if e.timed_out:
                raise
            if e.client_error and kind == "reset":
                return error_frame(EXECUTION_ERROR, str(e), error=e.record, field=task_field(request))
            return error_frame(EXECUTION_ERROR, str(e), error=e.record)
        return error_frame(UNKNOWN_TYPE, f"Unknown message type: {kind!r} (reset, step, state, close)")

    async def _reset(self, session: _Session, req: ResetRequest) -> dict[str, Any]:
        options = _reset_options(req)
        if session.env is None:
            await self._open(session)
        in_episode, task = session.in_episode, getattr(session.env, "task", None)
        session.in_episode = False
        try:
            data = await self._session_call(session, "reset", _reset_call, session.env, req.seed, options)
        except EnvCallError as e:
            # a reset the env refused before touching its episode (an unknown task): that episode plays on
            if e.client_error and getattr(session.env, "task", None) is task:
                session.in_episode = in_episode
            raise
        session.episode_id = req.episode_id or str(uuid.uuid4())
        session.step_count = 0
        session.in_episode = True
        return {"type": "observation", "data": data}

    async def _step(self, session: _Session, action: AgentGymAction) -> dict[str, Any]:
        if not session.in_episode:
            why = "no episode in progress" if session.episode_id is None else "the episode has ended"
            return error_frame(EXECUTION_ERROR, f"{why}: send a reset first")
        try:
            data = await self._session_call(session, "step", _step_call, session.env, action.action)
        except EnvCallError:
            session.in_episode = False  # an env that raised mid-step is not stepped again before a reset
            raise
        session.step_count += 1
        session.in_episode = not data["done"]
        return {"type": "observation", "data": data}

    def state(self, session: _Session | None) -> dict[str, Any]:
        env = session.env if session is not None else None
        task_id = None
        task: dict[str, Any] = {}
        started = session is not None and session.episode_id is not None
        if started and env is not None and getattr(env, "task", None) is not None:
            try:
                task_id = env.current_task_id()
                task = jsonable(env.task_metadata())
            except Exception:  # noqa: BLE001 - a state query never fails the session
                logger.debug("state: task facts unavailable", exc_info=True)
        st = AgentGymState(episode_id=session.episode_id if session else None,
                           step_count=session.step_count if session else 0, env_id=self.config.env_id,
                           split=self.split, task_id=task_id, done=not (session is not None and session.in_episode),
                           identity=self.probe()["identity"], task=task)
        return st.model_dump()

    # ---- stateless HTTP -------------------------------------------------------------------------------------------
    async def stateless(self, req: ResetRequest, action: Any = None) -> dict[str, Any]:
        """``POST /reset`` (``action`` None) or ``POST /step``: a fresh env, reset, stepped at most once, closed.
        Raises :class:`CapacityError` when ``max_sessions`` requests are already in flight."""
        if self._stateless_slots.locked():
            raise CapacityError(f"server at capacity ({self.config.max_sessions} requests in flight)")
        options = _reset_options(req)
        async with self._stateless_slots:
            env = await self._call(None, "make", self.make_env)
            try:
                data = await self._call(None, "reset", _reset_call, env, req.seed, options)
                if action is not None:
                    data = await self._call(None, "step", _step_call, env, action)
            finally:
                self._stateless.submit(env.close)
        return data
