"""OpenEnv's own server (``openenv.core.env_server.create_app``, openenv 0.10) serving agentgym's TextCraft env
class, for ``benchmarks/serve_capacity.py`` to run side by side with ``agentgym serve``::

    PYTHONPATH=. <openenv venv>/bin/python benchmarks/openenv_textcraft_server.py --split adapt-test \\
        --max-sessions 1024 [--async-methods]

Runs in a venv with ``openenv==0.10.0`` (``.ci/run`` stage 5 builds ``.ci-openenv-venv``) and agentgym importable
(``PYTHONPATH``, numpy and gymnasium installed). The wrapper is OpenEnv's documented pattern: an ``Environment``
subclass whose sync ``reset``/``step`` call the env (OpenEnv runs them on a thread of the session's own);
``--async-methods`` overrides ``reset_async``/``step_async`` instead, which OpenEnv awaits on its event loop (the
calling convention ``agentgym serve`` uses for fast envs), to separate the thread hop from the rest. The
observation carries what ``agentgym serve``'s does (text, prompt, the typed info dict). Binds 127.0.0.1, prints
the port, serves until killed.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any, Optional

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_app

import agentgym
from agentgym.jsonvalues import to_json_values


class TextCraftAction(Action):
    action: str


class TextCraftObservation(Observation):
    text: str = ""
    prompt: str = ""
    info: dict[str, Any] = {}
    terminated: bool = False
    truncated: bool = False


def environment_class(split: str, async_methods: bool):
    class TextCraftEnvironment(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self.env = agentgym.make("TextCraft-v0", split=split)
            self._state = State()

        def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
                  task_id: Optional[str] = None, **kwargs: Any) -> TextCraftObservation:
            obs, info = self.env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
            self._state = State(episode_id=episode_id, step_count=0)
            return TextCraftObservation(text=obs, prompt=self.env.prompt(), info=to_json_values(info))

        def step(self, action: TextCraftAction, timeout_s: Optional[float] = None,
                 **kwargs: Any) -> TextCraftObservation:
            obs, reward, terminated, truncated, info = self.env.step(action.action)
            self._state.step_count += 1
            return TextCraftObservation(text=obs, prompt=self.env.prompt(), info=to_json_values(info),
                                        reward=float(reward), done=bool(terminated or truncated),
                                        terminated=bool(terminated), truncated=bool(truncated))

        @property
        def state(self) -> State:
            return self._state

        def close(self) -> None:
            self.env.close()

    if async_methods:
        class AsyncTextCraftEnvironment(TextCraftEnvironment):
            async def reset_async(self, seed=None, episode_id=None, task_id=None, **kwargs):
                return self.reset(seed=seed, episode_id=episode_id, task_id=task_id, **kwargs)

            async def step_async(self, action, timeout_s=None, **kwargs):
                return self.step(action, timeout_s=timeout_s, **kwargs)

        return AsyncTextCraftEnvironment
    return TextCraftEnvironment


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="adapt-test")
    ap.add_argument("--max-sessions", type=int, default=1024)
    ap.add_argument("--async-methods", action="store_true")
    args = ap.parse_args()
    app = create_app(environment_class(args.split, args.async_methods), TextCraftAction, TextCraftObservation,
                     env_name="textcraft", max_concurrent_envs=args.max_sessions)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    print(sock.getsockname()[1], flush=True)
    # uvicorn's defaults, as `openenv serve` / the docs run it; the same WebSocket pings as agentgym serve
    uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_ping_interval=20.0, ws_ping_timeout=20.0)).run(
        sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
