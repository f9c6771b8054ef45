"""An OpenEnv server for every agentgym environment: ``agentgym serve ENV_ID``.

`OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ (PyPI ``openenv``, formerly ``openenv-core``) serves an
environment over FastAPI; its clients (``openenv.EnvClient`` / ``GenericEnvClient``, TRL's examples, verifiers'
``OpenEnvTaskset``) play an episode over a WebSocket session. This package speaks that wire protocol, written here
on FastAPI + uvicorn (the ``[serve]`` extra) so that serving needs neither ``openenv`` itself nor the gradio and
fastmcp it depends on. It is tested against the clients of openenv 0.4.1 (what ``verifiers[openenv]`` 0.4 resolves
to) and openenv 0.10.

**The session socket** (``/ws``; one env per connection, sessions never share state). The client sends JSON text
frames ``{"type": "reset", "data": {...}}``, ``{"type": "step", "data": {"action": "<raw model response>"}}``,
``{"type": "state"}``, ``{"type": "close"}``; the server answers each (but ``close``) with one frame:

* ``{"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}`` after ``reset`` (reward
  ``None``) and ``step``. The observation (:class:`AgentGymObservation`) carries ``text`` (the env's observation),
  ``prompt`` (the model-facing prompt of the new state, the env's prompt contract with its history window),
  ``info`` (the env's typed ``info`` dict, every key of :class:`agentgym.core.StepInfo` plus the env's own: its
  own field because openenv-core <= 0.2's serializer drops ``metadata``), ``terminated``, ``truncated`` and
  ``metadata`` (empty); ``done`` is ``terminated or truncated``.
* ``{"type": "state", "data": {...}}`` (:class:`AgentGymState`).
* ``{"type": "error", "data": {"message": ..., "code": ...}}`` with OpenEnv's codes: ``INVALID_JSON``,
  ``UNKNOWN_TYPE``, ``VALIDATION_ERROR`` (a malformed message, reset field or action), ``EXECUTION_ERROR`` (the
  env failed, or a step without an episode in progress), ``CAPACITY_REACHED``, ``FACTORY_ERROR`` (the env could
  not be made), ``SESSION_ERROR`` (the session was closed: idle too long, a step past its time limit). When the env
  itself raised, ``data["error"]`` is its typed :class:`agentgym.errors.ErrorRecord` (kind, stage, message,
  exception) — an environment failure, never an observation with reward 0.

``reset`` takes ``seed`` (the env's ``np_random``: the same seed and task give the same episode as in-process
``env.reset``), ``task_id`` (or ``options``, the env's reset options) and ``episode_id``; unknown fields are a
``VALIDATION_ERROR``. The action is the raw model response (text; TauAirline also takes an OpenAI assistant
message dict), parsed by the env exactly as in-process: a malformed one is an invalid action, not an error.

**HTTP** (stateless, as in OpenEnv): ``GET /health``, ``/metadata``, ``/schema`` (JSON schemas of action,
observation and state), ``/state`` (of a fresh env), ``/sessions`` (the live sessions), ``POST /reset`` (a fresh
env per request), ``POST /step`` (a fresh env, reset with the request's reset fields, then one step: multi-turn
play needs the socket), the task API (``GET /list_environments``, ``GET /{env}/splits``, ``POST
/{env}/tasks|num_tasks|task|task_range``: the served split's task ids) and ``POST /mcp`` (a JSON-RPC error: agentgym
envs are played through ``step``, not MCP tools). Every bad request gets a JSON error.

**Bounds.** A session gets its env at its first ``reset``, not at accept: until then it holds no env and no slot, it
must reset within ``first_reset_timeout_s``, and at most ``max_sessions`` may wait (the one waiting longest is closed
to make room). At most ``max_sessions`` sessions hold an env (the next first reset gets ``CAPACITY_REACHED``); a
session with no message for ``idle_timeout_s`` is closed and its env freed; a client that disconnects or is killed
frees its session at once (uvicorn's keepalive pings find a peer that vanished without closing its socket); a
message or request body over ``max_message_bytes`` is refused. A fast env (not ``slow_steps``) is called inline on
the event loop; a slow one, or any with ``offload``, on a thread of its session's own, where a call past
``step_timeout_s`` ends its session, so one slow env never holds up another session.

**Connections, errors, exposure.** Under the app sits the HTTP limits layer shared with the retrieval server
(:mod:`retrieval.http_limits`): a request must arrive whole within ``request_timeout_s`` (a JSON 408), idle
keep-alive connections close after ``keep_alive_timeout_s``, and at ``max_connections`` open the longest-idle
connection (else the slowest request still arriving) is closed to make room before anyone is refused; only
requests in flight (sessions, stateless requests) count against capacity, so idle or stalled sockets never make
another client's request fail. Every client error is a 4xx JSON body naming the field or id (lone surrogates and
non-integer seeds or indexes included); a reset the env refuses leaves the episode in progress alone; a WebSocket
frame that fails to parse (depth, number size, a lone surrogate, a binary frame that is not UTF-8) gets
``INVALID_JSON`` and the session stays, while a *text* frame that is not UTF-8 closes the connection with 1007 (RFC
6455). The server binds loopback by default; a non-loopback host needs ``auth_token`` (a bearer token on every
request and WebSocket upgrade) or ``allow_remote``; requests and upgrades from a foreign ``Origin`` are refused, and
without a token only loopback ``Host`` names are answered (DNS rebinding). WebSocket compression is off unless
``ws_compression``.

The package, one module per job: :mod:`~agentgym.serve.protocol` (the wire models and error codes),
:mod:`~agentgym.serve.sessions` (:class:`ServeConfig`, the sessions and message handling), :mod:`~agentgym.serve.app`
(the routes, the socket, :func:`serve`) and :mod:`~agentgym.serve.harness` (:class:`LocalServer`, a server in a child
process for scripts and tests). The command line is ``agentgym serve`` (:mod:`agentgym.cli`). Importing this package
is light: the server stack (the ``[serve]`` extra) is imported with the first name that needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ServeConfig", "AgentGymAction", "AgentGymObservation", "AgentGymState", "ResetRequest", "StepRequest",
           "TaskQuery", "AgentGymServer", "create_app", "serve", "LocalServer", "SUPPORTED_OPENENV",
           "SERVE_TOKEN_ENV"]

#: the environment variable ``agentgym serve`` reads its bearer token from when ``--auth-token`` is not given
SERVE_TOKEN_ENV = "AGENTGYM_SERVE_TOKEN"

_WHERE = {"ServeConfig": "sessions", "AgentGymServer": "sessions", "AgentGymAction": "protocol",
          "AgentGymObservation": "protocol", "AgentGymState": "protocol", "ResetRequest": "protocol",
          "StepRequest": "protocol", "TaskQuery": "protocol", "SUPPORTED_OPENENV": "protocol", "create_app": "app",
          "serve": "app", "LocalServer": "harness"}


def __getattr__(name: str) -> Any:  # lazy: `import agentgym.serve` does not import FastAPI
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
