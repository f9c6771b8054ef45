"""The HTTP and WebSocket routes of ``agentgym serve`` (FastAPI on uvicorn), the listening socket and :func:`serve`.
See :mod:`agentgym.serve` for the protocol; the sessions live in :mod:`agentgym.serve.sessions`."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from typing import Any, Callable

from agentgym.errors import MissingDependencyError

try:
    import uvicorn
    from fastapi import Body, FastAPI, HTTPException, WebSocket
    from fastapi.responses import JSONResponse
    from pydantic import ValidationError
    from starlette.websockets import WebSocketDisconnect
except ModuleNotFoundError as e:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(e.name or "fastapi", "serve", "agentgym serve (the OpenEnv server)") from e

from .protocol import (EXECUTION_ERROR, SESSION_ERROR, AgentGymAction, ResetRequest, StepRequest, TaskQuery,
                       error_frame, mcp_error, validation_errors)
from .sessions import AgentGymServer, CapacityError, EnvCallError, ServeConfig, SessionRefused, task_field
from retrieval.browser_guard import BrowserGuard, is_loopback_host
from retrieval.http_limits import (BearerAuth, HttpLimits, check_bind, connection_totals, limit_repeated_logs,
                                   uvicorn_config)
from retrieval.protocol import ProtocolError

__all__ = ["create_app", "serve", "bind", "http_limits", "uvicorn_settings"]

logger = logging.getLogger(__name__)


class _RequestGuard:
    """ASGI middleware in front of the HTTP routes: a request body over ``limit`` bytes (declared or streamed) gets a
    JSON 413, and a body that is not JSON within the server's bounds (depth, number length, UTF-8, lone surrogates)
    a JSON 422 in FastAPI's shape, naming the problem, before the app parses it. An error no route expected is a
    JSON 500 on a connection that stays open, logged with its traceback a few times a minute at most (the
    connection layer's :class:`~retrieval.http_limits.RepeatedLogLimit`), never once per request."""

    def __init__(self, app, server: AgentGymServer):
        self.app, self.server = app, server
        self.limit = server.config.max_message_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        try:
            declared = int(headers.get(b"content-length", b"0"))
        except ValueError:
            return await _send_json(send, 400, {"detail": "bad Content-Length"})
        if declared > self.limit:
            return await _send_json(send, 413, {"detail": f"request body over {self.limit} bytes"})
        body = bytearray()
        more = True
        while more:  # the connection layer's request timeout bounds how long this waits (a JSON 408)
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > self.limit:
                return await _send_json(send, 413, {"detail": f"request body over {self.limit} bytes"})
        if body.strip():
            try:
                self.server.decode(bytes(body), what="the body")
            except ProtocolError as e:
                return await _send_json(send, 422, {"detail": [{"type": "json_invalid", "loc": ["body"],
                                                                "msg": str(e)}]})
        sent = started = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        async def tracked(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, replay, tracked)
        except Exception as e:  # noqa: BLE001 - a JSON 500, and the connection stays usable
            logger.error("unhandled error on %s %s", scope.get("method"), scope.get("path"), exc_info=True)
            if not started:
                await _send_json(send, 500, {"detail": f"internal error: {type(e).__name__}: {str(e)[:200]}"})


async def _send_json(send, status: int, payload: dict) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def _protocol_summary() -> str | None:
    import agentgym.serve as package

    return package.__doc__.split("\n\n")[1] if package.__doc__ else None


def create_app(server: AgentGymServer) -> FastAPI:
    """The FastAPI app of ``server`` (see the module doc for the routes)."""
    from contextlib import asynccontextmanager

    cfg = server.config

    @asynccontextmanager
    async def lifespan(app):
        yield
        await server.close_all()

    app = FastAPI(title=f"agentgym {cfg.env_id} ({server.split}): OpenEnv server", lifespan=lifespan,
                  description=_protocol_summary())

    @app.exception_handler(Exception)
    async def _internal(request, exc):  # JSON, never an HTML page or a dropped connection
        logger.exception("unhandled error on %s", request.url.path)
        return JSONResponse({"detail": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)

    @app.get("/health", tags=["Health"])
    async def health() -> dict[str, Any]:
        return {"status": "healthy"}

    @app.get("/metadata", tags=["Environment Info"])
    async def metadata() -> dict[str, Any]:
        return server.metadata()

    @app.get("/schema", tags=["Schema"])
    async def schema() -> dict[str, Any]:
        return server.schema()

    @app.get("/state", tags=["State Management"])
    async def state() -> dict[str, Any]:
        return server.state(None)

    @app.get("/sessions", tags=["State Management"])
    async def sessions() -> dict[str, Any]:
        return {"active_sessions": len(server.sessions), "max_sessions": cfg.max_sessions,
                "pending_sessions": len(server.pending), "connections": connection_totals(),
                "sessions": [s.info() for s in list(server.sessions.values())]}

    async def _stateless(request: ResetRequest, action: Any = None) -> dict[str, Any]:
        try:
            data = await server.stateless(request, action)
        except CapacityError as e:
            raise HTTPException(503, str(e), headers={"Retry-After": "1"}) from None
        except EnvCallError as e:
            if e.client_error:  # an unknown task, an index out of range: the client's mistake, named
                raise HTTPException(422, {"message": str(e), "code": EXECUTION_ERROR, "field": task_field(request),
                                          "error": e.record}) from None
            raise HTTPException(504 if e.timed_out else 500, {"message": str(e), "code": EXECUTION_ERROR,
                                                              "error": e.record}) from None
        except ValueError as e:  # task_id and options['task_id'] disagree
            raise HTTPException(422, {"message": str(e), "field": "task_id"}) from None
        return {**data, "metadata": None}  # OpenEnv's ResetResponse / StepResponse

    @app.post("/reset", tags=["Environment Control"])
    async def reset(request: ResetRequest = Body(default_factory=ResetRequest)) -> dict[str, Any]:
        return await _stateless(request)

    @app.post("/step", tags=["Environment Control"])
    async def step(request: StepRequest) -> dict[str, Any]:
        try:
            action = AgentGymAction.model_validate(request.action)
        except ValidationError as e:
            raise HTTPException(422, [{**err, "loc": ["body", "action", *err["loc"]]}
                                      for err in validation_errors(e)]) from None
        return await _stateless(request, action.action)

    @app.post("/mcp", tags=["MCP"])
    async def mcp(payload: Any = Body(None)) -> dict[str, Any]:
        return mcp_error(payload.get("id") if isinstance(payload, dict) else None)

    # The ORS-style task API of OpenEnv, for the served split.
    def _check(env_name: str, split: str | None = None) -> list[str]:
        if env_name.lower() != cfg.env_id.lower():
            raise HTTPException(404, f"unknown environment {env_name!r}; this server serves {cfg.env_id!r}")
        if split is not None and split != server.split:
            raise HTTPException(404, f"this server serves split {server.split!r}, not {split!r} "
                                     f"(start another with --split {split})")
        ids = server.probe()["task_ids"]
        if split is not None and ids is None:
            raise HTTPException(400, f"split {server.split!r} is generated and unbounded: reset with any "
                                     "task_id of the env's generated form, or a seed")
        return ids or []

    @app.get("/list_environments", tags=["Task API"])
    async def list_environments() -> list[str]:
        return [cfg.env_id]

    @app.get("/{env_name}/splits", tags=["Task API"])
    async def splits(env_name: str) -> list[dict[str, Any]]:
        _check(env_name)
        kind = "train" if server.split.startswith("train") else "test"
        return [{"name": server.split, "type": kind}]

    def _task(task_id: str) -> dict[str, Any]:
        return {"task_id": task_id, "reset": {"task_id": task_id}}

    @app.post("/{env_name}/tasks", tags=["Task API"])
    async def tasks(env_name: str, q: TaskQuery) -> dict[str, Any]:
        return {"tasks": [_task(t) for t in _check(env_name, q.split)], "env_name": cfg.env_id}

    @app.post("/{env_name}/num_tasks", tags=["Task API"])
    async def num_tasks(env_name: str, q: TaskQuery) -> dict[str, Any]:
        return {"num_tasks": len(_check(env_name, q.split))}

    @app.post("/{env_name}/task", tags=["Task API"])
    async def task(env_name: str, q: TaskQuery) -> dict[str, Any]:
        ids = _check(env_name, q.split)
        if q.index is None or not 0 <= q.index < len(ids):
            raise HTTPException(400, f"Invalid task index {q.index!r}: the split has {len(ids)} tasks")
        return {"task": _task(ids[q.index])}

    @app.post("/{env_name}/task_range", tags=["Task API"])
    async def task_range(env_name: str, q: TaskQuery) -> dict[str, Any]:
        return {"tasks": [_task(t) for t in _check(env_name, q.split)[q.start:q.stop]]}

    @app.websocket("/ws")
    async def ws(websocket: WebSocket):
        await websocket.accept()
        session, displaced = server.accept_session()  # pending: its env is made at its first reset
        if displaced is not None and displaced.displace is not None:
            displaced.displace()
        ended = False

        def end(frame: dict) -> None:  # by a clock or to make room: tell the client why, then close the socket
            nonlocal ended
            if not ended:
                ended = True
                asyncio.ensure_future(_end_session(websocket, frame))

        session.displace = lambda: end(error_frame(
            SESSION_ERROR, f"closed to make room: {cfg.max_sessions} sessions were waiting for their first reset and "
                           "this one had waited longest"))
        clock = _SessionClock(session, cfg, end)
        try:
            while True:
                msg = await websocket.receive()  # the session clock ends a session that sends nothing
                if msg["type"] == "websocket.disconnect" or ended:
                    break
                raw = msg.get("text")
                if raw is None:
                    raw = msg.get("bytes") or b""  # a binary frame: UTF-8 JSON too, else INVALID_JSON
                session.busy = True
                try:
                    response = await server.handle(session, raw)
                except EnvCallError as e:  # a call past the step timeout: its thread is stuck, the session ends
                    session.stuck = True
                    await _send_ws(websocket, error_frame(SESSION_ERROR, f"{e}; session closed", error=e.record))
                    break
                except SessionRefused as e:  # its first reset found no slot, or its env could not be made
                    await _send_ws(websocket, e.frame)
                    break
                finally:
                    session.busy = False
                if response is None:
                    break
                await _send_ws(websocket, response)
                session.last_activity_at = time.time()
        except WebSocketDisconnect:
            pass
        except Exception:  # noqa: BLE001 - one session's failure never takes the server down
            logger.exception("session %s failed", session.session_id)
            await _send_ws(websocket, error_frame(SESSION_ERROR, "internal error; session closed"))
        finally:
            clock.cancel()
            await server.close_session(session)
            await _close_ws(websocket)

    app.add_middleware(_RequestGuard, server=server)
    if cfg.auth_token:
        app.add_middleware(BearerAuth, auth_token=cfg.auth_token, error_key="detail")
    # outermost: first to run. Without a token a loopback server answers only loopback Host names (DNS rebinding);
    # with one, or bound wider with --allow-remote, any Host (the token, or the operator's choice, decides)
    app.add_middleware(BrowserGuard, check_host=not cfg.auth_token and is_loopback_host(cfg.host),
                       allowed_origins=cfg.allowed_origins, error_key="detail")
    return app


class _SessionClock:
    """Ends a session that sends nothing: a pending one ``first_reset_timeout_s`` after its accept, an open one
    ``idle_timeout_s`` after its last message (never while a message of its own is being handled). One timer per
    session, re-armed only when it fires early (no timer per message).

    While a session is pending, the timer never waits longer than ``idle_timeout_s``: its first reset moves its
    deadline to ``last_activity_at + idle_timeout_s``, which may come before the first-reset deadline (an idle
    timeout of 1.5 s under the default 30 s first-reset timeout), and the next check must not sleep past it."""

    def __init__(self, session, cfg: ServeConfig, end: Callable[[dict], None]):
        self.session, self.cfg, self.end = session, cfg, end
        self.loop = asyncio.get_running_loop()
        self.timer = self.loop.call_later(min(cfg.first_reset_timeout_s, cfg.idle_timeout_s), self._check)

    def _check(self) -> None:
        s, cfg, now = self.session, self.cfg, time.time()
        if s.env is None:
            deadline = s.created_at + cfg.first_reset_timeout_s
            why = f"no reset within {cfg.first_reset_timeout_s:g} s of connecting: session closed"
        else:
            deadline = s.last_activity_at + cfg.idle_timeout_s
            why = f"session idle for {cfg.idle_timeout_s:g} s: closed, its env freed"
        if s.busy or now < deadline:
            wait = 1.0 if s.busy else max(deadline - now, 0.05)
            if s.env is None:  # still pending: wake in time for the idle deadline a first reset would set
                wait = min(wait, cfg.idle_timeout_s)
            self.timer = self.loop.call_later(wait, self._check)
            return
        self.timer = None
        self.end(error_frame(SESSION_ERROR, why))

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


async def _end_session(websocket: WebSocket, frame: dict) -> None:
    await _send_ws(websocket, frame)
    await _close_ws(websocket, code=1001)  # going away: the client's receive ends, and the handler's too


async def _send_ws(websocket: WebSocket, payload: dict) -> None:
    try:
        await websocket.send_text(json.dumps(payload))
    except Exception:  # noqa: BLE001 - the peer is gone; nothing to tell it
        logger.debug("send to a closed socket dropped", exc_info=True)


async def _close_ws(websocket: WebSocket, code: int = 1000) -> None:
    try:
        await websocket.close(code)
    except Exception:  # noqa: BLE001 - already closed by the peer or by uvicorn
        pass


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and the accepted
    # sockets inherit it. Without it, Nagle's algorithm holds the body of every HTTP answer (uvicorn writes the
    # head and the body separately) until the client's delayed ACK, ~40 ms on Linux per keep-alive request.
    # TCP_NODELAY on the listener as well: Linux copies it to accepted sockets whatever loop serves them.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # a training batch's sessions connect at once (Linux caps it at net.core.somaxconn)
    sock.set_inheritable(True)
    return sock


def http_limits(config: ServeConfig) -> HttpLimits:
    """The connection limits of ``config`` (the layer shared with the retrieval server: :mod:`retrieval.http_limits`)."""
    return HttpLimits(request_timeout_s=config.request_timeout_s, idle_timeout_s=config.keep_alive_timeout_s,
                      max_header_bytes=config.max_header_bytes, max_connections=config.max_connections,
                      max_discard_bytes=2 * config.max_message_bytes, error_key="detail")


def uvicorn_settings(server: AgentGymServer, log_level: str = "warning") -> "uvicorn.Config":
    """The ``uvicorn.Config`` that serves ``server``: its app behind the connection limits, WebSocket pings (a peer
    that vanished is found within ~40 s), per-message compression only with ``ws_compression`` (deflating an
    observation costs more CPU than the env's step: ~0.36 ms for TextCraft's 8 KB, benchmarks/RESULTS_serve.md) and a
    graceful shutdown."""
    cfg = server.config
    return uvicorn_config(create_app(server), http_limits(cfg), log_level=log_level, ws_max_size=cfg.max_message_bytes,
                          ws_ping_interval=20.0, ws_ping_timeout=20.0, ws_per_message_deflate=cfg.ws_compression,
                          timeout_graceful_shutdown=5, lifespan="on")


def serve(config: ServeConfig, ready: Callable[[str], None] | None = None, log_level: str = "warning") -> None:
    """Serve ``config`` until interrupted (SIGINT/SIGTERM). Refuses a non-loopback host without a token (unless
    ``allow_remote``); makes one env first, so a missing dependency or data set fails here rather than in every
    session; ``ready(url)`` is called once the socket listens."""
    check_bind(config.host, config.auth_token, config.allow_remote, "agentgym serve")
    limit_repeated_logs(__name__, "agentgym.serve.sessions")  # uvicorn's own logger: uvicorn_config
    server = AgentGymServer(config)
    server.probe()
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    uv_config = uvicorn_settings(server, log_level)
    if ready is not None:
        ready(url)
    uvicorn.Server(uv_config).run(sockets=[sock])
