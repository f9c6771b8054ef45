"""``agentgym serve`` in a child process on this machine (:class:`LocalServer`), for scripts and tests that want a
real server. Needs no server stack itself: the child process has it."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Sequence

from agentgym.net import open_direct

__all__ = ["LocalServer"]


class LocalServer:
    """``agentgym serve`` in a child process on this machine, for scripts and tests that want a real server::

        with LocalServer("TextCraft-v0", split="gen-depth2") as srv:
            client = GenericEnvClient(base_url=srv.url)   # openenv's client, or any OpenEnv client

    Starts ``python -m agentgym.cli serve ... --port 0`` (a free port), reads the URL it prints and waits until
    ``/health`` answers; every wait is bounded by ``start_timeout_s``. ``close()`` (or leaving the ``with`` block)
    stops it with SIGTERM, then SIGKILL after 10 s. ``auth_token``: the server requires it (handed over in the
    child's environment, not on its command line) and :meth:`get` sends it; :attr:`headers` has the header for other
    clients.
    """

    def __init__(self, env_id: str, split: str | None = None, *, host: str = "127.0.0.1",
                 max_sessions: int | None = None, idle_timeout_s: float | None = None,
                 env_args: dict[str, Any] | None = None, extra_args: Sequence[str] = (),
                 start_timeout_s: float = 120.0, env: dict[str, str] | None = None, auth_token: str | None = None):
        import os
        import subprocess
        import threading
        import queue

        cmd = [sys.executable, "-m", "agentgym.cli", "serve", env_id, "--host", host, "--port", "0"]
        if split:
            cmd += ["--split", split]
        if max_sessions is not None:
            cmd += ["--max-sessions", str(max_sessions)]
        if idle_timeout_s is not None:
            cmd += ["--idle-timeout", str(idle_timeout_s)]
        for k, v in (env_args or {}).items():
            cmd += ["--env-arg", f"{k}={v!r}"]
        cmd += list(extra_args)
        from agentgym.serve import SERVE_TOKEN_ENV

        env = dict(os.environ if env is None else env)
        env.pop(SERVE_TOKEN_ENV, None)  # only the token asked for here
        if auth_token is not None:
            env[SERVE_TOKEN_ENV] = auth_token
        self.headers = {"Authorization": f"Bearer {auth_token}"} if auth_token is not None else {}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        lines: queue.Queue = queue.Queue()
        self._stdout: list[str] = []
        self._stderr: list[str] = []

        def read_stdout() -> None:
            for x in self.proc.stdout:
                lines.put(x)
                self._stdout.append(x)

        # Readers of the child's pipes (the URL line, then its logs), so a chatty server never blocks on a full pipe.
        self._readers = [threading.Thread(target=read_stdout, daemon=True),
                         threading.Thread(target=lambda: self._stderr.extend(self.proc.stderr), daemon=True)]
        for t in self._readers:
            t.start()
        deadline = time.monotonic() + start_timeout_s
        try:
            try:
                line = lines.get(timeout=start_timeout_s)
            except queue.Empty:
                line = ""
            if " on http" not in line:
                raise RuntimeError(f"agentgym serve did not start: {line!r} {self.stderr()}")
            self.url = line.split(" on ")[1].split()[0]
            self._wait_healthy(deadline)
        except BaseException:
            self.close()
            raise

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http"):] + "/ws"

    def stderr(self) -> str:
        return "".join(self._stderr)[-4000:]

    def log_lines(self) -> list[str]:
        """Every line the server has written so far, stdout (uvicorn's access log with ``-v``) and stderr."""
        return [line.rstrip("\n") for line in [*self._stdout, *self._stderr]]

    def get(self, path: str, timeout_s: float = 10.0) -> Any:
        """``GET url + path`` as JSON (loopback: never through a proxy)."""
        import urllib.request

        with open_direct(urllib.request.Request(self.url + path, headers=self.headers), timeout=timeout_s) as r:
            return json.loads(r.read())

    def _wait_healthy(self, deadline: float) -> None:
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agentgym serve exited with {self.proc.returncode}: {self.stderr()}")
            try:
                if self.get("/health", timeout_s=2.0).get("status") == "healthy":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"agentgym serve at {self.url} not healthy in time: {self.stderr()}")
            time.sleep(0.1)

    def close(self) -> None:
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for t in self._readers:
            t.join(timeout=5)

    def __enter__(self) -> "LocalServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
