"""Sandboxed AppWorld worker processes and the pool that keeps warm ones ready.

A :class:`Worker` is one process of ``worker.py`` in the AppWorld venv (one world, one episode), confined as
:mod:`.sandbox` describes, spoken to over JSON lines. Its failures become typed errors: a worker that exits or
closes its pipe raises :class:`~agentgym.errors.EnvCrashError`; one that does not answer within the wall-clock
limit is killed (its whole process group) and raises :class:`~agentgym.errors.EpisodeTimeoutError`. The
:class:`WorkerPool` starts workers ahead of need (start-up imports AppWorld, about a second or two), hands out
live ones, and replaces any that died while waiting. :func:`run_evaluator` runs ``evaluator.py`` in a fresh
process.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from ...errors import AgentGymError, EnvCrashError, EpisodeTimeoutError
from .sandbox import SandboxLimits, limit_setter, sandbox_command, scrubbed_env

__all__ = ["Worker", "WorkerPool", "WorkerSpec", "run_evaluator", "get_pool", "EvaluationError"]

logger = logging.getLogger(__name__)

_HERE = Path(__file__).resolve().parent
WORKER_SCRIPT = _HERE / "worker.py"
EVALUATOR_SCRIPT = _HERE / "evaluator.py"


class EvaluationError(AgentGymError, RuntimeError):
    """The evaluation process failed (not the agent's fault)."""

    kind = "env_crash"


@dataclass(frozen=True)
class WorkerSpec:
    """Everything needed to start workers of one kind.

    Attributes:
        python: the AppWorld venv's interpreter.
        world_data: the ``data`` tree a worker may see (no ground truth).
        scratch_dir: where per-worker workspaces are made.
        limits: the sandbox limits.
    """

    python: str
    world_data: str
    scratch_dir: str
    limits: SandboxLimits = SandboxLimits()
    max_interactions: int = 1000


class Worker:
    """One sandboxed worker process; see the module docstring."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        os.makedirs(spec.scratch_dir, exist_ok=True)
        self.workspace = tempfile.mkdtemp(prefix="worker-", dir=spec.scratch_dir)
        Path(self.workspace, ".owner").write_text(str(os.getpid()))  # lets a later run sweep orphans
        self.started_at = time.monotonic()
        self.ready_seconds: float | None = None
        config = {"workspace": self.workspace, "world_data": spec.world_data,
                  "timeout_seconds": spec.limits.cell_timeout_seconds, "max_interactions": spec.max_interactions}
        argv = sandbox_command([spec.python, "-I", str(WORKER_SCRIPT), json.dumps(config)], spec.limits)
        self._stderr_path = os.path.join(self.workspace, ".worker-stderr.log")
        self._stderr = open(self._stderr_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     cwd=self.workspace, env=scrubbed_env(self.workspace),
                                     preexec_fn=limit_setter(spec.limits), close_fds=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._ready = False
        self.closed = False
        #: agent code has run here: the worker can never host another world
        self.tainted = False
        _LIVE.add(self)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._lines.put(raw.decode("utf-8", "replace"))
        self._lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    def _stderr_tail(self, n: int = 1500) -> str:
        try:
            with open(self._stderr_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self._stderr_path) - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _next(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise EpisodeTimeoutError(f"AppWorld worker {self.pid} did not answer {what} within {timeout:.0f}s "
                                          "and was killed")
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                code = self.proc.wait()
                self.closed = True
                raise EnvCrashError(f"AppWorld worker {self.pid} died during {what} (exit code {code}); stderr "
                                    f"tail:\n{self._stderr_tail()}")
            line = line.strip()
            if not line:
                continue
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                # Something other than a reply reached the channel (agent code writing to the fd): skip it.
                logger.warning("AppWorld worker %d wrote a non-protocol line: %r", self.pid, line[:200])

    def wait_ready(self) -> None:
        if self._ready:
            return
        msg = self._next(self.spec.limits.start_seconds, "start-up")
        if not msg.get("ready"):
            self.kill()
            raise EnvCrashError(f"AppWorld worker {self.pid} sent {msg!r} instead of ready")
        self._ready = True
        self.ready_seconds = time.monotonic() - self.started_at

    def request(self, op: str, timeout: float | None = None, **fields) -> dict:
        """Send one request; return the reply (``ok`` True) or raise a typed error."""
        if self.closed:
            raise EnvCrashError(f"AppWorld worker {self.pid} is closed")
        self.wait_ready()
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps({"op": op, **fields}) + "\n").encode("utf-8"))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            self.kill()
            raise EnvCrashError(f"AppWorld worker {self.pid} is gone ({e}); stderr tail:\n{self._stderr_tail()}")
        if op == "execute":
            self.tainted = True  # until the worker says otherwise (a cell that does not parse never runs)
        reply = self._next(self.spec.limits.wall_seconds_per_request if timeout is None else timeout, op)
        if op == "execute" and reply.get("ok"):
            self.tainted = bool(reply.get("tainted", True))
        if not reply.get("ok"):
            raise EnvCrashError(f"AppWorld worker {self.pid} failed {op}: {reply.get('error')}")
        return reply

    def kill(self) -> None:
        """Kill the worker's whole process group (it may have forked despite the guard)."""
        self.closed = True
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                try:
                    self.proc.kill()
                except ProcessLookupError:
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.error("AppWorld worker %d did not exit after SIGKILL", self.proc.pid)
        self._stderr.close()

    def dispose(self) -> None:
        """Kill it and delete its workspace."""
        self.kill()
        shutil.rmtree(self.workspace, ignore_errors=True)


class WorkerPool:
    """Keeps ``spares`` started workers ready; every episode takes a fresh one (one world per process)."""

    def __init__(self, spec: WorkerSpec, spares: int = 1):
        self.spec = spec
        _sweep_orphans(spec.scratch_dir)
        self.spares = max(0, int(spares))
        self._idle: list[Worker] = []
        self._lock = threading.Lock()
        self.replaced = 0

    def _fill(self) -> None:
        while len(self._idle) < self.spares:
            self._idle.append(Worker(self.spec))

    def acquire(self) -> Worker:
        """A live worker, ready for ``reset``; dead spares are discarded and replaced."""
        with self._lock:
            while self._idle:
                w = self._idle.pop(0)
                if w.alive():
                    break
                logger.warning("AppWorld worker %d died while idle; replacing it", w.pid)
                self.replaced += 1
                w.dispose()
            else:
                w = Worker(self.spec)
            self._fill()
        try:
            w.wait_ready()
        except AgentGymError:
            w.dispose()
            self.replaced += 1
            logger.warning("AppWorld worker failed to start; starting another")
            w = Worker(self.spec)
            w.wait_ready()
        return w

    def release(self, worker: Worker) -> None:
        """Take back a worker whose episode ended: kept for the next reset if no agent code ever ran in it,
        otherwise disposed of."""
        if worker.alive() and not worker.tainted and worker.spec == self.spec:
            with self._lock:
                if len(self._idle) < self.spares + 4:
                    self._idle.insert(0, worker)
                    return
        worker.dispose()

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
    for ws in root.glob("worker-*"):
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
#: every started worker, so that none outlives this process (envs that were never closed included)
_LIVE: "weakref.WeakSet[Worker]" = weakref.WeakSet()


def get_pool(spec: WorkerSpec, spares: int = 1) -> WorkerPool:
    """The process-wide pool for ``spec`` (shared by every env with the same spec)."""
    pool = _POOLS.get(spec)
    if pool is None:
        pool = _POOLS[spec] = WorkerPool(spec, spares=spares)
    return pool


@atexit.register
def _close_pools() -> None:
    for pool in _POOLS.values():
        pool.close()
    for worker in list(_LIVE):
        worker.dispose()


class _Evaluator:
    """One evaluator process, started ahead of need; it answers exactly one job."""

    def __init__(self, python: str):
        limits = SandboxLimits()
        self.scratch_env = tempfile.mkdtemp(prefix="evalproc-")
        self.proc = subprocess.Popen([python, "-I", str(EVALUATOR_SCRIPT)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.scratch_env,
                                     env=scrubbed_env(self.scratch_env), preexec_fn=limit_setter(limits))
        self.python = python
        _LIVE_EVALUATORS.add(self)

    def run(self, job: dict, timeout: float) -> tuple[list[str], str, int | None]:
        try:
            out, err = self.proc.communicate((json.dumps(job) + "\n").encode("utf-8"), timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        finally:
            shutil.rmtree(self.scratch_env, ignore_errors=True)
        lines = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
        return lines, err.decode("utf-8", "replace"), self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.error("AppWorld evaluator %d did not exit after SIGKILL", self.proc.pid)
        shutil.rmtree(self.scratch_env, ignore_errors=True)


_SPARE_EVALUATORS: dict[str, _Evaluator] = {}
_LIVE_EVALUATORS: "weakref.WeakSet[_Evaluator]" = weakref.WeakSet()


@atexit.register
def _close_evaluators() -> None:
    for ev in list(_LIVE_EVALUATORS):
        ev.kill()


def run_evaluator(python: str, full_data: str, manifest: str | None, task_id: str, output_dbs: str,
                  scratch_dir: str, timeout: float = 180.0) -> dict:
    """Evaluate in a process of its own (started ahead of need); returns its result or raises
    :class:`EvaluationError`. A spare evaluator for the next call is started before this one returns."""
    os.makedirs(scratch_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="eval-", dir=scratch_dir)
    job = {"full_data": full_data, "manifest": manifest, "task_id": task_id, "output_dbs": output_dbs,
           "scratch": scratch}
    ev = _SPARE_EVALUATORS.pop(python, None)
    if ev is None or ev.proc.poll() is not None:
        ev = _Evaluator(python)
    _SPARE_EVALUATORS[python] = _Evaluator(python)
    try:
        lines, err, code = ev.run(job, timeout)
    except subprocess.TimeoutExpired as e:
        raise EvaluationError(f"AppWorld evaluation of {task_id} took over {timeout:.0f}s") from e
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results = []
    for ln in lines:
        try:
            results.append(json.loads(ln))
        except json.JSONDecodeError:
            continue
    result = next((r for r in results if "ready" not in r), None)
    if result is None:
        raise EvaluationError(f"AppWorld evaluation of {task_id} gave no result (exit {code}): {err[-1500:]}")
    if not result.get("ok"):
        raise EvaluationError(f"AppWorld evaluation of {task_id} failed: {result.get('error')}")
    return result
