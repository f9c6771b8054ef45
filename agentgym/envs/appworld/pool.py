"""AppWorld worker processes: a fork server per interpreter, one sandboxed child per episode, and the evaluator.

A :class:`_Server` is one process of ``worker.py`` in the AppWorld venv, started in the network namespace of
:mod:`.sandbox` with a scrubbed environment. It imports AppWorld once (seconds) and then forks, on request, a
:class:`Worker` (one world, one episode; its own session, workspace, stderr log and rlimits) or an evaluator child
(:func:`run_evaluator`, a fresh process that never ran agent code). Forking costs milliseconds, so every episode
gets a process of its own and no process ever hosts a second world.

A worker child forbids itself every new process at the kernel level (a seccomp filter) and confines its file access
(Landlock); a warning is logged once for each where the kernel does not allow it. It speaks JSON lines over two
pipes. Every request carries a fresh random ``id`` that the reply must repeat, and lines that carry another are
skipped: a line that agent code writes into the reply pipe (``os.write`` is not audited) cannot answer a request it
does not know. Agent code *can* learn the id of the request running it (frame introspection through
``object.__getattribute__`` is not refused), and so fake the observation and ``process_ok`` of its own episode --
nothing more: the evaluation reads only the saved state, in a fresh process. A line longer than
:data:`MAX_LINE_BYTES` ends the worker. Requests are written with a deadline too: a worker that stopped reading is
killed. The parent trusts nothing else a worker says: it marks a worker *tainted* itself as soon as it has sent it a
code cell, never reuses a worker for another episode, and builds the path of the saved state itself
(:meth:`Worker.output_dbs`).

Failures are typed errors: a worker that exits or closes its pipe raises :class:`~agentgym.errors.EnvCrashError`;
one that does not answer within its wall-clock limit is killed (its whole process group) and raises
:class:`~agentgym.errors.EpisodeTimeoutError`. Whether that is the agent's doing is for the env to decide
(:attr:`Worker.tainted`). The :class:`WorkerPool` keeps ``spares`` forked children ready and replaces any that died
while waiting.
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
from dataclasses import dataclass
from pathlib import Path

from ...errors import AgentGymError, EnvCrashError, EpisodeTimeoutError
from .sandbox import SandboxLimits, rlimits, sandbox_command, scrubbed_env

__all__ = ["Worker", "WorkerPool", "WorkerSpec", "run_evaluator", "get_pool", "get_server", "close_servers",
           "EvaluationError", "EXPERIMENT", "MAX_LINE_BYTES"]

logger = logging.getLogger(__name__)

_HERE = Path(__file__).resolve().parent
WORKER_SCRIPT = _HERE / "worker.py"
#: AppWorld experiment name of every episode (the saved state lives under it in the worker's workspace)
EXPERIMENT = "agentgym"
#: the longest protocol line a worker may write (a cell's output included)
MAX_LINE_BYTES = 32 * 1024**2
_CONTROL_TIMEOUT = 60.0


class EvaluationError(AgentGymError, RuntimeError):
    """The evaluation process failed (not the agent's fault)."""

    kind = "env_crash"


class _ChannelClosed(Exception):
    pass


class _Channel:
    """The parent's read end of a child's reply pipe: JSON lines, read with a deadline, matched by ``id``."""

    def __init__(self, fd: int, pid: int):
        self.fd, self.pid = fd, pid
        self._buf = bytearray()
        self.skipped = 0

    def _skip(self, line: bytes) -> None:
        if not self.skipped:  # once per worker: a flood of forged lines must not flood the log
            logger.warning("AppWorld worker %d wrote a line that answers no request of the parent (forged or "
                           "stale), skipped (and so will be any more): %r", self.pid, line[:200])
        self.skipped += 1

    def read(self, rid: str, timeout: float, what: str) -> dict:
        """The next line that answers ``rid``; raises :class:`EpisodeTimeoutError`, :class:`_ChannelClosed` (EOF or
        an oversized line). Lines that are not JSON or carry another id are skipped."""
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
                    except ValueError:
                        msg = None
                    if isinstance(msg, dict) and msg.get("id") == rid:
                        return msg
                    self._skip(line)
            finally:
                del self._buf[:start]
            if len(self._buf) > MAX_LINE_BYTES:
                raise _ChannelClosed(f"a protocol line over {MAX_LINE_BYTES} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                raise EpisodeTimeoutError(f"AppWorld worker {self.pid} did not answer {what} within {timeout:.0f}s")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    raise _ChannelClosed("its reply pipe closed")
                self._buf += chunk

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Server:
    """The fork server (``worker.py``) of one interpreter; see the module docstring."""

    def __init__(self, python: str, network: bool, scratch_dir: str, start_seconds: float):
        self.python, self.network = python, network
        self.home = _workspace(scratch_dir, "server-")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = sandbox_command([python, "-I", str(WORKER_SCRIPT), json.dumps({"control_fd": theirs.fileno()})],
                               SandboxLimits(network=network))
        self._log_path = os.path.join(self.home, ".server.log")
        t0 = time.monotonic()
        with open(self._log_path, "wb") as log:
            # Its own session (close() kills the whole group); no preexec_fn: this process may have threads, and
            # the server sets its own rlimits.
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.home,
                                         env=scrubbed_env(self.home), pass_fds=(theirs.fileno(),),
                                         start_new_session=True)
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        self._seq = 0
        try:
            ready = self._recv(start_seconds, "start-up")
        except AgentGymError:
            self.close()
            raise
        if not ready.get("ready"):
            self.close()
            raise EnvCrashError(f"the AppWorld fork server sent {ready!r} instead of ready")
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
            logger.info("skipped a stale answer of the AppWorld fork server: %r", answer)

    def _recv_one(self, timeout: float, what: str) -> dict:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except socket.timeout:
            self.close()
            raise EpisodeTimeoutError(f"the AppWorld fork server did not answer {what} within {timeout:.0f}s") \
                from None
        except OSError:
            data = b""
        if not data:
            code = self.proc.poll()
            self.close()
            raise EnvCrashError(f"the AppWorld fork server died during {what} (exit code {code}); log tail:\n"
                                f"{_tail(self._log_path, 2000)}")
        return json.loads(data)

    def call(self, msg: dict, fds: tuple[int, ...] = (), timeout: float = _CONTROL_TIMEOUT) -> dict:
        with self._lock:
            if not self.alive():
                raise EnvCrashError("the AppWorld fork server is not running")
            self._seq += 1
            try:
                socket.send_fds(self.sock, [json.dumps({**msg, "seq": self._seq}).encode()], list(fds))
            except OSError as e:
                self.close()
                raise EnvCrashError(f"the AppWorld fork server is gone ({e})") from e
            answer = self._recv(timeout, msg["op"], self._seq)
        if "error" in answer:
            raise EnvCrashError(f"the AppWorld fork server refused {msg['op']}: {answer['error']}")
        return answer

    def fork(self, msg: dict, stdin: bool) -> tuple[int, int | None, int]:
        """Fork a child for ``msg``; returns (pid, write end of its request pipe or None, read end of its replies)."""
        resp_r, resp_w = os.pipe()
        req_r, req_w = os.pipe() if stdin else (None, None)
        try:
            pid = self.call({"op": "fork", **msg}, (resp_w,) + ((req_r,) if req_r is not None else ()))["pid"]
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
            logger.error("the AppWorld fork server %d did not exit after SIGKILL", self.proc.pid)
        shutil.rmtree(self.home, ignore_errors=True)


_SERVERS: dict[tuple[str, bool, str], _Server] = {}
_SERVERS_LOCK = threading.Lock()


def get_server(python: str, network: bool, scratch_dir: str, start_seconds: float = 120.0) -> _Server:
    """The process-wide fork server for this interpreter (started, or restarted after it died, on demand)."""
    key = (python, network, scratch_dir)
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None or not server.alive():
            if server is not None:
                logger.warning("the AppWorld fork server died; starting another")
                server.close()
            _sweep_orphans(scratch_dir)
            server = _SERVERS[key] = _Server(python, network, scratch_dir, start_seconds)
            logger.info("AppWorld fork server ready in %.1fs", server.ready_seconds)
        return server


@dataclass(frozen=True)
class WorkerSpec:
    """Everything needed to start workers of one kind.

    Attributes:
        python: the AppWorld venv's interpreter.
        world_data: the ``data`` tree a worker's world is loaded from (the guard lets it read only its own task's
            inputs there, never a ``ground_truth`` folder).
        scratch_dir: where per-worker workspaces are made.
        limits: the sandbox limits.
        max_interactions: AppWorld's own cap on the cells a world executes.
    """

    python: str
    world_data: str
    scratch_dir: str
    limits: SandboxLimits = SandboxLimits()
    max_interactions: int = 1000


_warned_unconfined = False
_warned_files = False


def _tail(path: str, n: int) -> str:
    """The last ``n`` bytes of a log file, decoded ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill_child(server: _Server, pid: int) -> str:
    """Kill a fork-server child's process group and reap it; how it ended. Never raises: when the server is gone
    (and with it the reaping) the child is init's, so its group is killed directly."""
    try:
        return server.kill(pid)
    except AgentGymError:
        try:
            os.killpg(pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        return "killed (fork server gone)"


def _workspace(scratch_dir: str, prefix: str) -> str:
    os.makedirs(scratch_dir, exist_ok=True)
    ws = tempfile.mkdtemp(prefix=prefix, dir=scratch_dir)
    Path(ws, ".owner").write_text(str(os.getpid()))  # lets a later run sweep orphans
    return ws


class Worker:
    """One sandboxed worker child of the fork server: one world, one episode; see the module docstring."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.workspace = _workspace(spec.scratch_dir, "worker-")
        self.started_at = time.monotonic()
        self.ready_seconds: float | None = None
        self.server = get_server(spec.python, spec.limits.network, spec.scratch_dir, spec.limits.start_seconds)
        self._ready_id = secrets.token_hex(16)
        msg = {"role": "worker", "id": self._ready_id, "workspace": self.workspace, "world_data": spec.world_data,
               "timeout_seconds": spec.limits.cell_timeout_seconds, "max_interactions": spec.max_interactions,
               "limits": rlimits(spec.limits)}
        try:
            self.pid, req_w, resp_r = self.server.fork(msg, stdin=True)
        except BaseException:
            shutil.rmtree(self.workspace, ignore_errors=True)
            raise
        assert req_w is not None
        os.set_blocking(req_w, False)  # writes wait in select() against the request's deadline (_send)
        self._req_fd = req_w
        self._replies = _Channel(resp_r, self.pid)
        self._ready = False
        self.closed = False
        #: how the process ended (set once it was killed and reaped)
        self.status: str | None = None
        #: a code cell was sent here: from then on everything this process does is the agent's doing
        self.tainted = False
        #: why the kernel does not forbid this worker to create processes (None: it does; see worker.py)
        self.unconfined: str | None = None
        #: why the kernel does not confine this worker's file access (None: Landlock does; see worker.py)
        self.files_unconfined: str | None = None
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

    def _stderr_tail(self) -> str:
        return _tail(os.path.join(self.workspace, ".worker-stderr.log"), 1500)

    def _next(self, rid: str, timeout: float, what: str) -> dict:
        try:
            return self._replies.read(rid, timeout, what)
        except EpisodeTimeoutError:
            self.kill()
            raise EpisodeTimeoutError(f"AppWorld worker {self.pid} did not answer {what} within {timeout:.0f}s "
                                      "and was killed") from None
        except _ChannelClosed as e:
            self.kill()
            raise EnvCrashError(f"AppWorld worker {self.pid} ended during {what}: {e} ({self.status}); stderr "
                                f"tail:\n{self._stderr_tail()}") from None

    def wait_ready(self) -> None:
        if self._ready:
            return
        ready = self._next(self._ready_id, self.spec.limits.start_seconds, "start-up")
        global _warned_unconfined, _warned_files
        self.unconfined = ready.get("unconfined")
        if self.unconfined and not _warned_unconfined:
            logger.warning("AppWorld workers cannot forbid process creation at the kernel level here (%s); only "
                           "their audit hook and RLIMIT_NPROC stand in the way", ready["unconfined"])
            _warned_unconfined = True
        self.files_unconfined = ready.get("files_unconfined")
        if self.files_unconfined and not _warned_files:
            logger.warning("AppWorld workers cannot confine their files at the kernel level here (%s); only their "
                           "audit hook does, which C code reached through AppWorld's venv (cffi) can bypass",
                           self.files_unconfined)
            _warned_files = True
        self._ready = True
        self.ready_seconds = time.monotonic() - self.started_at

    def request(self, op: str, timeout: float | None = None, **fields) -> dict:
        """Send one request; return the reply (``ok`` True) or raise a typed error."""
        if self.closed:
            raise EnvCrashError(f"AppWorld worker {self.pid} is closed ({self.status})")
        self.wait_ready()
        rid = secrets.token_hex(16)
        timeout = self.spec.limits.wall_seconds_per_request if timeout is None else timeout
        deadline = time.monotonic() + timeout
        self._send((json.dumps({"id": rid, "op": op, **fields}) + "\n").encode("utf-8"), deadline, op)
        reply = self._next(rid, max(0.0, deadline - time.monotonic()), op)
        if not reply.get("ok"):
            raise EnvCrashError(f"AppWorld worker {self.pid} failed {op}: {reply.get('error')}")
        return reply

    def _send(self, data: bytes, deadline: float, op: str) -> None:
        """Write a request before ``deadline``: a worker that stopped reading (a thread of an earlier cell can
        SIGSTOP it) is killed instead of blocking this process once the pipe is full."""
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise EpisodeTimeoutError(f"AppWorld worker {self.pid} did not take the {op} request within the "
                                          "time limit and was killed")
            try:
                if not select.select([], [self._req_fd], [], left)[1]:
                    continue
                n = os.write(self._req_fd, view)
            except BlockingIOError:
                continue
            except OSError as e:
                self.kill()
                raise EnvCrashError(f"AppWorld worker {self.pid} is gone ({e}; {self.status}); stderr tail:\n"
                                    f"{self._stderr_tail()}") from None
            if op == "execute":
                self.tainted = True  # (part of) a code cell reached it
            view = view[n:]

    def output_dbs(self, task_id: str) -> str:
        """Where AppWorld saves this worker's world state after every cell (built here, never asked of the worker)."""
        return os.path.join(self.workspace, "experiments", "outputs", EXPERIMENT, "tasks", task_id, "dbs")

    def kill(self) -> None:
        """Kill the worker's whole process group and reap it (idempotent); its workspace stays for evaluation."""
        if self.status is None:
            self.status = _kill_child(self.server, self.pid)
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
        """Kill it and delete its workspace."""
        self.kill()
        shutil.rmtree(self.workspace, ignore_errors=True)

    def abandon(self) -> None:
        """Dispose of it later, from a safe place (:func:`_dispose_abandoned`): for finalizers, which may run inside
        a call to the fork server (its lock is not reentrant), so they must not call it. Closing the pipes already
        ends a worker that is waiting for a request."""
        self._close_pipes()
        _ABANDONED.append(self)


class WorkerPool:
    """Keeps ``spares`` forked workers ready; every episode takes a fresh one (one world per process)."""

    def __init__(self, spec: WorkerSpec, spares: int = 1):
        self.spec = spec
        self.spares = max(0, int(spares))
        self._idle: list[Worker] = []
        self._lock = threading.Lock()
        self.replaced = 0

    def acquire(self) -> Worker:
        """A live worker, ready for ``reset``; dead spares are discarded and replaced."""
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
        except BaseException as e:
            worker.dispose()
            if not isinstance(e, AgentGymError):
                raise
            self.replaced += 1
            logger.warning("AppWorld worker failed to start; starting another")
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
#: every started worker, so that none outlives this process (envs that were never closed included)
_LIVE: "weakref.WeakSet[Worker]" = weakref.WeakSet()
#: workers a finalizer gave up (:meth:`Worker.abandon`), disposed of at the next acquire or at exit
_ABANDONED: list[Worker] = []
#: the process that owns the servers and workers above (a raw ``os.fork()`` child inherits them, not their ownership)
_OWNER = os.getpid()


def _dispose_abandoned() -> None:
    while _ABANDONED:
        try:
            worker = _ABANDONED.pop()
        except IndexError:  # another thread took the last one
            break
        worker.dispose()


def _forget_inherited() -> None:
    """In a forked child: the servers, pools and workers are the parent's -- forget them, never kill them."""
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
    """Stop every fork server of this process (the next worker or evaluation starts a fresh one)."""
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
    for worker in list(_LIVE):
        worker.dispose()
    close_servers()


def run_evaluator(python: str, full_data: str, manifest: str | None, task_id: str, output_dbs: str,
                  scratch_dir: str, timeout: float = 180.0) -> dict:
    """Evaluate in a process of its own (a child of the fork server that never ran agent code); returns its result
    or raises :class:`EvaluationError`."""
    server = get_server(python, True, scratch_dir)
    scratch = _workspace(scratch_dir, "eval-")
    rid = secrets.token_hex(16)
    job = {"full_data": full_data, "manifest": manifest, "task_id": task_id, "output_dbs": output_dbs,
           "scratch": scratch}
    try:
        pid, _, resp_r = server.fork({"role": "evaluate", "id": rid, "workspace": scratch, "job": job,
                                      "limits": rlimits(SandboxLimits())}, stdin=False)
        channel = _Channel(resp_r, pid)
        try:
            result = channel.read(rid, timeout, f"the evaluation of {task_id}")
        except EpisodeTimeoutError as e:
            raise EvaluationError(f"AppWorld evaluation of {task_id} took over {timeout:.0f}s") from e
        except _ChannelClosed:
            result = None
        finally:
            channel.close()
            status = _kill_child(server, pid)  # never raises: the EvaluationError stays the error
        if result is None:
            raise EvaluationError(f"AppWorld evaluation of {task_id} gave no result ({status}):\n"
                                  f"{_tail(os.path.join(scratch, '.worker-stderr.log'), 1500)}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not result.get("ok"):
        raise EvaluationError(f"AppWorld evaluation of {task_id} failed: {result.get('error')}")
    return result
