"""AppWorld processes: two fork servers per interpreter, and per episode a sandboxed worker and a trusted API process.

* The **trusted server** (``apiserver.py``, started in a network namespace of its own where possible) imports
  AppWorld and every app once and forks, per episode, an :class:`ApiProcess` (the task's world: its databases, its
  apps behind AppWorld's ``TestClient``) and, per evaluation, an evaluator (:func:`run_evaluator`). It never runs
  agent code.
* The **agent zygote** (``worker.py``, in bubblewrap: :func:`.sandbox.zygote_command`) imports AppWorld's code-cell
  machinery (no app) and forks, per episode, a :class:`Worker` that confines itself (namespaces, tmpfs workspace,
  capabilities, Landlock, seccomp: :mod:`.sandbox`) and runs the agent's cells.
* The only link between a worker and its API process is the **API channel**: a ``socketpair`` the parent makes when
  it forks the worker (one end goes to the worker at once, the other to the API process at reset), carrying API
  requests only (``channel.py``).

Forking costs milliseconds, so every episode gets processes of its own and no process ever hosts a second world.
Both kinds of children speak JSON lines over two pipes with the parent. Every request carries a fresh random ``id``
that the reply must repeat, and lines that carry another are skipped: a line that agent code writes into its reply
pipe cannot answer a request it does not know (it can fake its own cell's observation -- nothing the episode's end
or score depends on, which the parent takes from the API process and the evaluator). A line longer than
:data:`MAX_LINE_BYTES`, or one that is not JSON or nests too deep, never raises here: an oversized line ends the
child, any other is skipped. Requests are written with a deadline too: a worker that stopped reading is killed. The
parent trusts nothing a worker says beyond its cell's output: it marks a worker *tainted* itself as soon as it has
sent it a code cell and never reuses a worker for another episode.

Failures are typed errors: a child that exits or closes its pipe raises :class:`~agentgym.errors.EnvCrashError`;
one that does not answer within its wall-clock limit is killed (its whole process group) and raises
:class:`~agentgym.errors.EpisodeTimeoutError`. Whether that is the agent's doing is for the env to decide
(:attr:`Worker.tainted`). The :class:`WorkerPool` keeps ``spares`` forked workers ready and replaces any that died
while waiting. A worker whose sandbox lacks a layer that the env's ``unsafe`` setting does not allow is disposed of
before it ever sees code (:class:`~.sandbox.SandboxUnavailableError`).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import secrets
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import AgentGymError, EnvCrashError, EpisodeTimeoutError
from .in_venv.forkserver import MAX_CONTROL_BYTES
from .sandbox import (LAYERS, SandboxLimits, SandboxUnavailableError, rlimits, scrubbed_env, server_command,
                      zygote_command, zygote_config)

__all__ = ["Worker", "ApiProcess", "WorkerPool", "WorkerSpec", "get_pool", "get_server", "get_zygote",
           "close_servers", "EXPERIMENT", "MAX_LINE_BYTES", "Replies", "ChannelClosed", "kill_child", "make_workspace",
           "log_tail"]

logger = logging.getLogger(__name__)

_HERE = Path(__file__).resolve().parent
APISERVER_SCRIPT = _HERE / "in_venv" / "apiserver.py"
#: AppWorld experiment name of every episode
EXPERIMENT = "agentgym"
#: the longest protocol line a child may write (a cell's output included)
MAX_LINE_BYTES = 32 * 1024**2
_CONTROL_TIMEOUT = 60.0


class ChannelClosed(Exception):
    pass


class Replies:
    """The parent's read end of a child's reply pipe: JSON lines, read with a deadline, matched by ``id``."""

    def __init__(self, fd: int, pid: int):
        self.fd, self.pid = fd, pid
        self._buf = bytearray()
        self.skipped = 0

    def _skip(self, line: bytes) -> None:
        if not self.skipped:  # once per child: a flood of forged lines must not flood the log
            logger.warning("AppWorld child %d wrote a line that answers no request of the parent (forged or stale), "
                           "skipped (and so will be any more): %r", self.pid, line[:200])
        self.skipped += 1

    def read(self, rid: str, timeout: float, what: str) -> dict:
        """The next line that answers ``rid``; raises :class:`EpisodeTimeoutError`, :class:`ChannelClosed` (EOF or
        an oversized line). Lines that are not JSON objects, nest too deep or carry another id are skipped."""
        deadline = time.monotonic() + timeout
        while True:
            start = 0
            try:
                while (end := self._buf.find(b"\n", start)) >= 0:
                    line, start = bytes(self._buf[start:end]), end + 1
                    if not line.strip():
                        continue
                    try:
                        msg = json.loads(line)
                    except (ValueError, RecursionError):
                        msg = None
                    if isinstance(msg, dict) and msg.get("id") == rid:
                        return msg
                    self._skip(line)
            finally:
                del self._buf[:start]
            if len(self._buf) > MAX_LINE_BYTES:
                raise ChannelClosed(f"a protocol line over {MAX_LINE_BYTES} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                raise EpisodeTimeoutError(f"AppWorld child {self.pid} did not answer {what} within {timeout:.0f}s")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    raise ChannelClosed("its reply pipe closed")
                self._buf += chunk

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Server:
    """A fork server (``apiserver.py`` or the zygote of ``worker.py``); see the module docstring."""

    def __init__(self, name: str, argv_for, scratch_dir: str, start_seconds: float):
        self.name = name
        self.home = make_workspace(scratch_dir, f"{name}-")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = argv_for(theirs.fileno(), self.home)
        self._log_path = os.path.join(self.home, ".server.log")
        t0 = time.monotonic()
        with open(self._log_path, "wb") as log:
            # Its own session (close() kills the whole group); no preexec_fn: this process may have threads.
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.home,
                                         env=scrubbed_env(self.home), pass_fds=(theirs.fileno(),),
                                         start_new_session=True)
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        self._seq = 0
        self._api_table: dict | None = None
        try:
            ready = self._recv(start_seconds, "start-up")
        except AgentGymError:
            self.close()
            raise
        if not ready.get("ready"):
            self.close()
            raise EnvCrashError(f"the AppWorld {name} sent {ready!r} instead of ready")
        self.info = ready
        #: seconds from start to ready (importing AppWorld)
        self.ready_seconds = time.monotonic() - t0

    def _recv(self, timeout: float, what: str, seq: int | None = None) -> dict:
        """The next answer (with ``seq``, the one to that message: answers left over from a call that was interrupted
        between its send and its receive are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self._recv_one(max(0.001, deadline - time.monotonic()), what)
            if seq is None or answer.get("seq") == seq:
                return answer
            logger.info("skipped a stale answer of the AppWorld %s: %r", self.name, answer)

    def _recv_one(self, timeout: float, what: str) -> dict:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(MAX_CONTROL_BYTES)
        except socket.timeout:
            self.close()
            raise EpisodeTimeoutError(f"the AppWorld {self.name} did not answer {what} within {timeout:.0f}s") \
                from None
        except OSError:
            data = b""
        if not data:
            code = self.proc.poll()
            self.close()
            raise EnvCrashError(f"the AppWorld {self.name} died during {what} (exit code {code}); log tail:\n"
                                f"{log_tail(self._log_path, 3000)}")
        return json.loads(data)

    def call(self, msg: dict, fds: tuple[int, ...] = (), timeout: float = _CONTROL_TIMEOUT) -> dict:
        with self._lock:
            if not self.alive():
                raise EnvCrashError(f"the AppWorld {self.name} is not running")
            self._seq += 1
            try:
                socket.send_fds(self.sock, [json.dumps({**msg, "seq": self._seq}).encode()], list(fds))
            except OSError as e:
                self.close()
                raise EnvCrashError(f"the AppWorld {self.name} is gone ({e})") from e
            answer = self._recv(timeout, msg["op"], self._seq)
        if "error" in answer:
            raise EnvCrashError(f"the AppWorld {self.name} refused {msg['op']}: {answer['error']}")
        return answer

    def fork(self, msg: dict, stdin: bool, extra_fds: tuple[int, ...] = ()) -> tuple[int, int | None, int]:
        """Fork a child for ``msg``; returns (pid, write end of its request pipe or None, read end of its replies).
        The child gets its reply pipe, its request pipe (``stdin``) and ``extra_fds``, in that order."""
        resp_r, resp_w = os.pipe()
        req_r, req_w = os.pipe() if stdin else (None, None)
        try:
            fds = (resp_w,) + ((req_r,) if req_r is not None else ()) + tuple(extra_fds)
            pid = self.call({"op": "fork", **msg}, fds)["pid"]
        except BaseException:
            for fd in (resp_r, req_w):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in (resp_w, req_r):
                if fd is not None:
                    os.close(fd)
        return pid, req_w, resp_r

    def api_table(self) -> dict:
        """The apps' public APIs (trusted server only; asked once)."""
        if self._api_table is None:
            self._api_table = self.call({"op": "api_table"})["table"]
        return self._api_table

    def kill(self, pid: int) -> str:
        """Kill a child's process group and reap it; how it ended."""
        return str(self.call({"op": "kill", "pid": pid})["status"])

    def poll(self, pid: int) -> tuple[bool, str | None]:
        """Whether a child still runs; when it does not, it is reaped now and how it ended comes back too."""
        answer = self.call({"op": "poll", "pid": pid})
        return bool(answer["alive"]), answer.get("status")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Close the control socket (on EOF the server kills its children and exits), then SIGKILL what is left."""
        self.sock.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.error("the AppWorld %s %d did not exit after SIGKILL", self.name, self.proc.pid)
        shutil.rmtree(self.home, ignore_errors=True)


_SERVERS: dict[tuple, _Server] = {}
_SERVERS_LOCK = threading.Lock()


def _get(key: tuple, name: str, argv_for, scratch_dir: str, start_seconds: float) -> _Server:
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None or not server.alive():
            if server is not None:
                logger.warning("the AppWorld %s died; starting another", name)
                server.close()
            _sweep_orphans(scratch_dir)
            server = _SERVERS[key] = _Server(name, argv_for, scratch_dir, start_seconds)
            logger.info("AppWorld %s ready in %.1fs", name, server.ready_seconds)
        return server


def get_server(python: str, scratch_dir: str, start_seconds: float = 120.0) -> _Server:
    """The process-wide trusted server for this interpreter (started, or restarted after it died, on demand)."""

    def argv_for(fd: int, home: str) -> list[str]:
        return server_command([python, "-I", "-B", str(APISERVER_SCRIPT), json.dumps({"control_fd": fd})])

    return _get(("server", python, scratch_dir), "trusted server", argv_for, scratch_dir, start_seconds)


def get_zygote(python: str, scratch_dir: str, use_bwrap: bool, limits: SandboxLimits = SandboxLimits()) -> _Server:
    """The process-wide agent zygote for this interpreter and sandbox (bubblewrap or not)."""

    def argv_for(fd: int, home: str) -> list[str]:
        os.makedirs(os.path.join(home, "ws"), exist_ok=True)
        return zygote_command(python, zygote_config(fd, use_bwrap, home), limits, use_bwrap)

    key = ("zygote", python, scratch_dir, use_bwrap, limits.tmp_bytes)
    return _get(key, "agent zygote", argv_for, scratch_dir, limits.start_seconds)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything needed to start the processes of one kind of episode.

    Attributes:
        python: the AppWorld venv's interpreter.
        world_data: the ``data`` tree the API process loads a task's world from (never a ``ground_truth`` folder).
        scratch_dir: where per-process workspaces of the trusted side are made.
        limits: the sandbox limits.
        use_bwrap: start the zygote in bubblewrap (:func:`.sandbox.probe` says whether it works here).
        allowed_missing: sandbox layers that may be missing (the env's ``unsafe``); a worker missing another one is
            refused before it sees any code.
    """

    python: str
    world_data: str
    scratch_dir: str
    limits: SandboxLimits = SandboxLimits()
    use_bwrap: bool = True
    allowed_missing: frozenset = field(default_factory=frozenset)


_warned_missing: set[str] = set()


def log_tail(path: str, n: int) -> str:
    """The last ``n`` bytes of a log file, decoded ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def kill_child(server: _Server, pid: int) -> str:
    """Kill a fork-server child's process group and reap it; how it ended. Never raises: when the server is gone,
    so are its children (their pid namespace, or the server's kill on EOF)."""
    try:
        return server.kill(pid)
    except AgentGymError:
        return "killed (its server is gone)"


def make_workspace(scratch_dir: str, prefix: str) -> str:
    os.makedirs(scratch_dir, exist_ok=True)
    ws = tempfile.mkdtemp(prefix=prefix, dir=scratch_dir)
    Path(ws, ".owner").write_text(str(os.getpid()))  # lets a later run sweep orphans
    return ws


class _Child:
    """A fork-server child that speaks JSON lines with the parent (see the module docstring)."""

    kind = "child"

    def _start_child(self, server: _Server, msg: dict, extra_fds: tuple[int, ...]) -> None:
        self.server = server
        self.started_at = time.monotonic()
        self._ready_id = secrets.token_hex(16)
        self.pid, req_w, resp_r = server.fork({**msg, "id": self._ready_id}, stdin=True, extra_fds=extra_fds)
        assert req_w is not None
        os.set_blocking(req_w, False)  # writes wait in select() against the request's deadline (_send)
        self._req_fd = req_w
        self._replies = Replies(resp_r, self.pid)
        self.closed = False
        #: how the process ended (set once it was killed and reaped)
        self.status: str | None = None
        _LIVE.add(self)

    def alive(self) -> bool:
        if self.closed:
            return False
        try:
            alive, status = self.server.poll(self.pid)
        except AgentGymError:
            return False
        if not alive and self.status is None:
            self.status = status  # reaped by the poll: kill() then has nothing left to do
        return alive

    def _log_tail(self) -> str:
        return ""

    def _next(self, rid: str, timeout: float, what: str) -> dict:
        try:
            return self._replies.read(rid, timeout, what)
        except EpisodeTimeoutError:
            self.kill()
            raise EpisodeTimeoutError(f"AppWorld {self.kind} {self.pid} did not answer {what} within {timeout:.0f}s "
                                      "and was killed") from None
        except ChannelClosed as e:
            self._settle()
            self.kill()
            raise EnvCrashError(f"AppWorld {self.kind} {self.pid} ended during {what}: {e} ({self.status}); log "
                                f"tail:\n{self._log_tail()}") from None

    def _settle(self, timeout: float = 5.0) -> None:
        """After its pipe closed: give the child a moment to end by itself (a worker's intermediate process exits
        right after the worker, reporting how it ended), so that :attr:`status` says how, not "killed"."""
        deadline = time.monotonic() + timeout
        while self.status is None and time.monotonic() < deadline and self.alive():
            time.sleep(0.02)

    def request(self, op: str, timeout: float, **fields) -> dict:
        """Send one request; return the reply (``ok`` True) or raise a typed error."""
        if self.closed:
            raise EnvCrashError(f"AppWorld {self.kind} {self.pid} is closed ({self.status})")
        rid = secrets.token_hex(16)
        deadline = time.monotonic() + timeout
        self._send((json.dumps({"id": rid, "op": op, **fields}) + "\n").encode("utf-8"), deadline, op)
        reply = self._next(rid, max(0.0, deadline - time.monotonic()), op)
        if not reply.get("ok"):
            raise EnvCrashError(f"AppWorld {self.kind} {self.pid} failed {op}: {reply.get('error')}")
        return reply

    def _sent(self, op: str) -> None:
        pass

    def _send(self, data: bytes, deadline: float, op: str) -> None:
        """Write a request before ``deadline``: a child that stopped reading (a thread of an earlier cell can SIGSTOP
        a worker) is killed instead of blocking this process once the pipe is full."""
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise EpisodeTimeoutError(f"AppWorld {self.kind} {self.pid} did not take the {op} request within "
                                          "the time limit and was killed")
            try:
                if not select.select([], [self._req_fd], [], left)[1]:
                    continue
                n = os.write(self._req_fd, view)
            except BlockingIOError:
                continue
            except OSError as e:
                self._settle()
                self.kill()
                raise EnvCrashError(f"AppWorld {self.kind} {self.pid} is gone ({e}; {self.status}); log tail:\n"
                                    f"{self._log_tail()}") from None
            self._sent(op)
            view = view[n:]

    def kill(self) -> None:
        """Kill the child's whole process group and reap it (idempotent); its workspace stays."""
        if self.status is None:
            self.status = kill_child(self.server, self.pid)
        self._close_pipes()

    def _close_pipes(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                os.close(self._req_fd)
            except OSError:
                pass
            self._replies.close()

    def dispose(self) -> None:
        self.kill()

    def abandon(self) -> None:
        """Dispose of it later, from a safe place (:func:`_dispose_abandoned`): for finalizers, which may run inside
        a call to a server (its lock is not reentrant), so they must not call it. Closing the pipes already ends a
        child that is waiting for a request."""
        self._close_pipes()
        _ABANDONED.append(self)


class Worker(_Child):
    """One sandboxed worker: one world, one episode of agent code (see the module docstring). It holds the parent's
    end of its API channel (:attr:`api_peer`) until :meth:`take_api_peer` hands it to the episode's API process."""

    kind = "worker"

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.ready_seconds: float | None = None
        zygote = get_zygote(spec.python, spec.scratch_dir, spec.use_bwrap, spec.limits)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        limits = rlimits(spec.limits)
        try:
            self._start_child(zygote, {"workspace_bytes": spec.limits.workspace_bytes, "limits": limits},
                              (theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.api_peer: socket.socket | None = ours
        self._ready = False
        #: a code cell was sent here: from then on everything this process does is the agent's doing
        self.tainted = False
        #: the sandbox layers this worker reports missing ({layer: why})
        self.missing: dict[str, str] = {}

    def _sent(self, op: str) -> None:
        if op == "execute":
            self.tainted = True  # (part of) a code cell reached it

    def take_api_peer(self) -> socket.socket:
        peer, self.api_peer = self.api_peer, None
        if peer is None:
            raise EnvCrashError(f"AppWorld worker {self.pid} has no API channel left to give")
        return peer

    def wait_ready(self) -> None:
        """Wait for the worker to confine itself; refuse it (:class:`SandboxUnavailableError`) when a layer that
        the spec does not allow to be missing is."""
        if self._ready:
            return
        ready = self._next(self._ready_id, self.spec.limits.start_seconds, "start-up")
        layers = dict(ready.get("layers") or {})
        missing = {k: str(v) for k, v in layers.items() if v and k in LAYERS}
        uid = ready.get("uid")
        if not isinstance(uid, int) or uid == 0:
            missing["unprivileged_uid"] = f"agent code runs as uid {uid}"
        if not self.spec.use_bwrap:
            missing["bwrap"] = "the zygote runs without bubblewrap"
        self.missing = missing
        refused = {k: v for k, v in missing.items() if k not in self.spec.allowed_missing}
        if refused:
            self.dispose()
            raise SandboxUnavailableError(f"an AppWorld worker lacks sandbox layers that unsafe= does not allow: "
                                          f"{refused}; it was stopped before running any code")
        for k, v in missing.items():
            if k not in _warned_missing:
                _warned_missing.add(k)
                logger.warning("AppWorld workers run without the %s layer (%s): %s", k, LAYERS[k], v)
        self._ready = True
        self.ready_seconds = time.monotonic() - self.started_at

    def request(self, op: str, timeout: float | None = None, **fields) -> dict:
        self.wait_ready()
        return super().request(op, self.spec.limits.wall_seconds_per_request if timeout is None else timeout,
                               **fields)

    def tree(self) -> dict[str, str]:
        """The state letters of the worker's processes, as the zygote sees them (for tests)."""
        return dict(self.server.call({"op": "tree", "pid": self.pid})["states"])

    def _close_pipes(self) -> None:
        super()._close_pipes()
        if self.api_peer is not None:
            self.api_peer.close()
            self.api_peer = None


class ApiProcess(_Child):
    """One trusted API process: the task's world, served to one worker over its API channel (see
    ``apiserver.py``)."""

    kind = "API process"

    def __init__(self, spec: WorkerSpec, task_id: str, api_peer: socket.socket):
        self.spec = spec
        self.task_id = task_id
        self.workspace = make_workspace(spec.scratch_dir, "apis-")
        #: where the API process saves the world's state for the evaluator (built here, never asked of anyone)
        self.state_dir = os.path.join(self.workspace, "state", "dbs")
        server = get_server(spec.python, spec.scratch_dir, spec.limits.start_seconds)
        limits = rlimits(spec.limits, nproc=False)
        msg = {"role": "apis", "task_id": task_id, "experiment": EXPERIMENT, "world_data": spec.world_data,
               "workspace": self.workspace, "state_dir": self.state_dir, "limits": limits,
               "max_requests": spec.limits.max_api_requests, "max_request_bytes": spec.limits.max_api_request_bytes}
        try:
            self._start_child(server, msg, (api_peer.fileno(),))
        except BaseException:
            shutil.rmtree(self.workspace, ignore_errors=True)
            raise
        finally:
            api_peer.close()

    def _log_tail(self) -> str:
        return log_tail(os.path.join(self.workspace, ".apis-stderr.log"), 2000)

    def start(self) -> dict:
        """Wait for the world to load; its instruction, supervisor and datetime."""
        reply = self._next(self._ready_id, self.spec.limits.start_seconds, "start-up")
        if not reply.get("ok"):
            raise EnvCrashError(f"the AppWorld API process could not load task {self.task_id}: {reply.get('error')}")
        return reply

    def dispose(self) -> None:
        """Kill it and delete its workspace (the saved state with it)."""
        self.kill()
        shutil.rmtree(self.workspace, ignore_errors=True)


class WorkerPool:
    """Keeps ``spares`` forked workers ready; every episode takes a fresh one (one world per process)."""

    def __init__(self, spec: WorkerSpec, spares: int = 1):
        self.spec = spec
        self.spares = max(0, int(spares))
        self._idle: list[Worker] = []
        self._lock = threading.Lock()
        self.replaced = 0

    def acquire(self) -> Worker:
        """A live worker, confined and ready for ``reset``; dead spares are discarded and replaced."""
        _dispose_abandoned()
        with self._lock:
            worker = None
            while self._idle:
                w = self._idle.pop(0)
                if w.alive():
                    worker = w
                    break
                logger.warning("AppWorld worker %d died while idle; replacing it", w.pid)
                self.replaced += 1
                w.dispose()
            if worker is None:
                worker = Worker(self.spec)
            try:
                while len(self._idle) < self.spares:
                    self._idle.append(Worker(self.spec))
            except BaseException:
                worker.dispose()
                raise
        try:
            worker.wait_ready()
        except SandboxUnavailableError:
            raise
        except BaseException as e:
            worker.dispose()
            if not isinstance(e, AgentGymError):
                raise
            self.replaced += 1
            logger.warning("AppWorld worker failed to start (%s); starting another", e)
            worker = Worker(self.spec)
            try:
                worker.wait_ready()
            except BaseException:
                worker.dispose()
                raise
        return worker

    def close(self) -> None:
        with self._lock:
            for w in self._idle:
                w.dispose()
            self._idle.clear()


def _sweep_orphans(scratch_dir: str) -> None:
    """Delete workspaces left by processes that died without cleaning up (their owner pid is gone)."""
    root = Path(scratch_dir)
    if not root.is_dir():
        return
    for ws in root.glob("*-*"):
        try:
            owner = int((ws / ".owner").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(ws, ignore_errors=True)
        except PermissionError:
            continue


_POOLS: dict[WorkerSpec, WorkerPool] = {}
_POOLS_LOCK = threading.Lock()
#: every started child, so that none outlives this process (envs that were never closed included)
_LIVE: "weakref.WeakSet[_Child]" = weakref.WeakSet()
#: children a finalizer gave up (:meth:`_Child.abandon`), disposed of at the next acquire or at exit
_ABANDONED: list[_Child] = []
#: the process that owns the servers and children above (a raw ``os.fork()`` child inherits them, not their ownership)
_OWNER = os.getpid()


def _dispose_abandoned() -> None:
    while _ABANDONED:
        try:
            child = _ABANDONED.pop()
        except IndexError:  # another thread took the last one
            break
        child.dispose()


def _forget_inherited() -> None:
    """In a forked child: the servers, pools and children are the parent's -- forget them, never kill them."""
    global _SERVERS_LOCK, _POOLS_LOCK, _OWNER
    _SERVERS.clear()
    _POOLS.clear()
    _LIVE.clear()
    _ABANDONED.clear()
    _SERVERS_LOCK, _POOLS_LOCK = threading.Lock(), threading.Lock()  # another thread may have held them
    _OWNER = os.getpid()


os.register_at_fork(after_in_child=_forget_inherited)


def get_pool(spec: WorkerSpec, spares: int = 1) -> WorkerPool:
    """The process-wide pool for ``spec`` (shared by every env with the same spec)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(spec)
        if pool is None:
            pool = _POOLS[spec] = WorkerPool(spec, spares=spares)
        return pool


def close_servers() -> None:
    """Stop every server of this process (the next worker or evaluation starts fresh ones)."""
    with _POOLS_LOCK:
        for pool in _POOLS.values():
            pool.close()
        _POOLS.clear()
    with _SERVERS_LOCK:
        for server in _SERVERS.values():
            server.close()
        _SERVERS.clear()


@atexit.register
def _close_all() -> None:
    if os.getpid() != _OWNER:
        return  # belt and braces with _forget_inherited: never stop the parent's servers
    _dispose_abandoned()
    for pool in list(_POOLS.values()):
        pool.close()
    for child in list(_LIVE):
        child.dispose()
    close_servers()
