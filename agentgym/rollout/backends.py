"""Env pools: where the environments of a rollout live.

A pool holds ``n`` env *slots* and answers batched calls; every call returns one :class:`SlotResult` per request,
holding either the value or an :class:`~agentgym.errors.ErrorRecord`: an ``Exception`` never escapes a pool, while
``KeyboardInterrupt`` and ``SystemExit`` do (Ctrl-C stops a run instead of marking its episodes).

* :class:`LocalPool` — every env in this process (``workers=0``).
* :class:`ProcessPool` — slots spread over ``workers`` processes (``spawn`` start method), one pipe each; a batched
  call sends each worker its share and gathers the answers in request order.
* :class:`RayPool` — slots spread over ``workers`` Ray actors, each hosting many envs (not one actor per env:
  verl-agent's one-actor-per-env design runs out of memory at 256+ envs). A batched call sends every actor its
  share in one remote call and gathers the answers in request order; under the lockstep schedule text policies are
  called by the runner once per turn with the prompts from every actor. ``ray`` is imported only when this pool is
  built.

Envs are deterministic given their seed and options, and privileged policies draw from per-slot generators seeded by
the runner, so every pool gives the same results. Slot ``i`` lives in worker ``i % workers`` in both multi-worker
pools.

*Lanes* serve the episode-asynchronous runner (:mod:`.async_runner`): a pool has ``lanes`` independent queues (one per
worker process or Ray actor; one for the in-process pool), :meth:`lane_of` names the lane of a slot and
:meth:`call_lane` sends one lane a batch of requests whose slots all live there, so each worker can be busy with its
own batch while the others answer theirs. The ``run`` op carries a batch of mixed operations (``(slot, op, *args)``).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..context import policy_context
from ..errors import ErrorRecord, UnguardedMainError, error_record

__all__ = ["SlotResult", "EnvFactory", "LocalPool", "ProcessPool", "RayPool", "make_pool", "BACKENDS", "env_is_slow"]

BACKENDS = ("sequential", "process", "ray")


@dataclass(frozen=True)
class EnvFactory:
    """A picklable recipe for an env: ``agentgym.make(env_id, **kwargs)``."""

    env_id: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __call__(self):
        import agentgym

        return agentgym.make(self.env_id, **dict(self.kwargs))


def env_is_slow(factory) -> bool:
    """Whether the env class behind ``factory`` is marked ``slow_steps`` (its steps wait on a sandbox, a server or an
    LLM, or take milliseconds of CPU): the async runner then calls it off the event loop. False when unknown."""
    env_id = getattr(factory, "env_id", None)
    if not env_id:
        return False
    try:
        import gymnasium as gym

        if ":" in env_id:  # gymnasium's "module:EnvId": the module registers the id
            mod, _, env_id = env_id.partition(":")
            importlib.import_module(mod)
        entry = gym.spec(env_id).entry_point
        cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        return bool(getattr(cls, "slow_steps", False))
    except Exception:  # noqa: BLE001 - an env we cannot resolve here is made (and reported) by the pool itself
        return False


@dataclass(slots=True)
class SlotResult:
    value: Any = None
    error: ErrorRecord | None = None


class _Slots:
    """The env slots of one process and the operations on them."""

    def __init__(self, factory: Callable, n: int):
        self.factory = factory
        self.envs: list[Any] = [None] * n
        self.rngs: list[np.random.Generator | None] = [None] * n

    def _env(self, i: int):
        if self.envs[i] is None:
            self.envs[i] = self.factory()
        return self.envs[i]

    def reset(self, i: int, seed: int | None, options: dict | None, rng_seed: Sequence[int]) -> SlotResult:
        try:
            env = self._env(i)
            obs, info = env.reset(seed=seed, options=options)
            self.rngs[i] = np.random.default_rng(list(rng_seed))
            return SlotResult((obs, info, policy_context(env), env.task_metadata()))
        except Exception as e:  # noqa: BLE001 - every failure becomes a typed record; Ctrl-C and exit propagate
            return SlotResult(error=error_record(e, "reset"))

    def _step_value(self, i: int, action: str) -> tuple:
        """``(obs, reward, terminated, truncated, info, next prompt or None)``; raises what the env raises."""
        env = self.envs[i]
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        return obs, float(reward), bool(terminated), bool(truncated), info, None if done else policy_context(env)

    def _response(self, i: int, policy) -> str:
        response = policy.act(self.envs[i], self.rngs[i])
        if not isinstance(response, str):
            raise TypeError(f"{policy!r} returned {type(response).__name__}, not str")
        return response

    def step(self, i: int, action: str) -> SlotResult:
        try:
            return SlotResult(self._step_value(i, action))
        except Exception as e:  # noqa: BLE001
            return SlotResult(error=error_record(e, "step"))

    def act(self, i: int, policy) -> SlotResult:
        try:
            return SlotResult(self._response(i, policy))
        except Exception as e:  # noqa: BLE001
            return SlotResult(error=error_record(e, "policy"))

    def act_step(self, i: int, policy) -> SlotResult:
        """A privileged policy's turn in one call (one round trip): ``(response, *step value)``, as one result object
        (the per-turn call of every privileged-policy rollout: on a cheap env, result objects are a visible share of
        the runner's own cost)."""
        try:
            response = self._response(i, policy)
        except Exception as e:  # noqa: BLE001
            return SlotResult(error=error_record(e, "policy"))
        try:
            return SlotResult((response, *self._step_value(i, response)))
        except Exception as e:  # noqa: BLE001
            return SlotResult(error=error_record(e, "step"))

    def run(self, i: int, op: str, *args) -> SlotResult:
        """One operation of a mixed batch (a lane's batch holds resets, steps and acts of different episodes)."""
        if op not in _OPS:
            return SlotResult(error=error_record(ValueError(f"unknown slot operation {op!r}"), "step"))
        return getattr(self, op)(i, *args)

    def close(self) -> None:
        for env in self.envs:
            if env is not None:
                try:
                    env.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass


_OPS = frozenset({"reset", "step", "act", "act_step"})


class LocalPool:
    """All slots in this process."""

    lanes = 1

    def __init__(self, factory: Callable, n: int):
        self.size = n
        self.factory = factory
        self._slots = _Slots(factory, n)

    def call(self, op: str, requests: Sequence[tuple]) -> list[SlotResult]:
        fn = getattr(self._slots, op)
        return [fn(*req) for req in requests]

    def call_one(self, op: str, i: int, *args) -> SlotResult:
        """One operation on slot ``i``, in the calling thread."""
        return getattr(self._slots, op)(i, *args)

    def lane_of(self, i: int) -> int:
        return 0

    def call_lane(self, lane: int, op: str, requests: Sequence[tuple]) -> list[SlotResult]:
        return self.call(op, requests)

    def close(self) -> None:
        self._slots.close()


#: a worker's first message: it has started (imported the parent's main script and unpickled its arguments)
_READY = "ready"
#: exit code of a worker that found the parent's main script starting a pool at import time (UnguardedMainError)
_UNGUARDED_MAIN_EXIT = 97


def _worker(conn, factory, n: int) -> None:
    # Env and policy exceptions come back as typed records (see _Slots). Ctrl-C reaches the whole process group: the
    # driver raises KeyboardInterrupt itself, so the worker just stops; the driver reads a closed pipe as a dead worker.
    conn.send(_READY)
    slots = _Slots(factory, n)
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                return
            op, requests = msg
            fn = getattr(slots, op)
            conn.send([fn(*req) for req in requests])
    except (KeyboardInterrupt, EOFError):  # Ctrl-C, or the driver has gone
        return
    finally:
        slots.close()
        conn.close()


class ProcessPool:
    """Slots spread round-robin over worker processes (slot i lives in worker i % workers)."""

    def __init__(self, factory: Callable, n: int, workers: int):
        if getattr(mp.current_process(), "_inheriting", False):
            # This process is a spawned worker still importing its parent's main script, and that script starts a
            # pool at import time (no `if __name__ == "__main__":`). multiprocessing's own check would raise a
            # RuntimeError here, in every worker, while the parent recorded each episode as a crash; exit with a
            # code the parent knows instead, so that it raises one UnguardedMainError (multiprocessing tests the
            # same private flag).
            raise SystemExit(_UNGUARDED_MAIN_EXIT)
        ctx = mp.get_context("spawn")
        self.size = n
        self.factory = factory
        self.workers = self.lanes = max(1, min(workers, n))
        self._conns = []
        self._procs = []
        for w in range(self.workers):
            parent, child = ctx.Pipe()
            n_local = len(range(w, n, self.workers))
            p = ctx.Process(target=_worker, args=(child, factory, n_local), daemon=True)
            p.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(p)
        self._wait_started()

    def _wait_started(self) -> None:
        """Wait for every worker's first message; raise :class:`UnguardedMainError` when they could not start
        because the main script starts its rollout at import time. A worker that died otherwise is left to the
        calls, which record its episodes' failures."""
        for conn, p in zip(self._conns, self._procs):
            try:
                if conn.recv() == _READY:
                    continue
            except (EOFError, OSError):  # it exited before its first message
                pass
            p.join(timeout=10)
            if p.exitcode == _UNGUARDED_MAIN_EXIT:
                self.close()
                script = getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"
                raise UnguardedMainError(
                    f"the rollout's worker processes could not start: {script} starts a rollout with workers > 0 when "
                    f"it is imported. Worker processes are spawned, and each imports the main script again; put the "
                    f"script's top-level code under `if __name__ == \"__main__\":` (or use workers=0).")

    def call(self, op: str, requests: Sequence[tuple]) -> list[SlotResult]:
        per_worker = _split(requests, self.workers)
        sent = [False] * self.workers
        for w, items in enumerate(per_worker):
            if items:
                try:
                    self._conns[w].send((op, [r for _, r in items]))
                    sent[w] = True
                except (OSError, BrokenPipeError):
                    pass
        out: list[SlotResult | None] = [None] * len(requests)
        for w, items in enumerate(per_worker):
            if not items:
                continue
            try:
                if not sent[w]:
                    raise EOFError("pipe closed")
                answers = self._conns[w].recv()
            except (EOFError, OSError) as e:
                answers = [SlotResult(error=error_record(RuntimeError(f"worker {w} died: {e!r}"), _stage(op, r)))
                           for _, r in items]
            for (pos, _), ans in zip(items, answers):
                out[pos] = ans
        return out  # type: ignore[return-value]

    def lane_of(self, i: int) -> int:
        return i % self.workers

    def call_lane(self, lane: int, op: str, requests: Sequence[tuple]) -> list[SlotResult]:
        """One worker's batch (every slot in ``requests`` lives in worker ``lane``); the pipe of each worker is used
        by one caller at a time (the async runner keeps one call in flight per lane)."""
        local = [(i // self.workers, *rest) for i, *rest in requests]
        try:
            self._conns[lane].send((op, local))
            return self._conns[lane].recv()
        except (EOFError, OSError) as e:
            return [SlotResult(error=error_record(RuntimeError(f"worker {lane} died: {e!r}"), _stage(op, r)))
                    for r in requests]

    def close(self) -> None:
        for c in self._conns:
            try:
                c.send(None)
            except (OSError, BrokenPipeError):
                pass
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)  # reap it, so it is gone from active_children() when close() returns


def _stage(op: str, request: tuple) -> str:
    """The error stage of a request that never reached its env (a mixed ``run`` batch names its op second)."""
    if op == "run":
        op = request[1] if len(request) > 1 else "step"
    return "step" if op == "act_step" else op


def _split(requests: Sequence[tuple], workers: int) -> list[list[tuple[int, tuple]]]:
    """Per worker: (position in ``requests``, request with the slot index made local to that worker)."""
    per_worker: list[list[tuple[int, tuple]]] = [[] for _ in range(workers)]
    for pos, req in enumerate(requests):
        i = req[0]
        per_worker[i % workers].append((pos, (i // workers, *req[1:])))
    return per_worker


class _RayEnvWorker:
    """The body of one Ray actor: a block of env slots. (Wrapped with ``ray.remote`` when a pool is built.)"""

    def __init__(self, factory: Callable, n: int, sys_path: Sequence[str]):
        import sys

        # Like multiprocessing's spawn, give the actor the driver's import path, so that an env registered by a
        # module next to the driver ("module:EnvId") imports here too.
        for p in reversed(list(sys_path)):
            if p not in sys.path:
                sys.path.insert(0, p)
        self.slots = _Slots(factory, n)

    def call(self, op: str, requests: Sequence[tuple]) -> list[SlotResult]:
        fn = getattr(self.slots, op)
        return [fn(*req) for req in requests]

    def close(self) -> bool:
        self.slots.close()
        return True


_RAY_ACTOR = None


def _ray():
    try:
        import ray
    except ImportError as e:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("ray", "ray", "the Ray rollout backend") from e
    return ray


def init_ray(address: str | None = None, num_cpus: int | None = None):
    """Join ``address`` (a running cluster, e.g. ``"auto"`` or ``"ray://host:10001"``) or start a local Ray instance
    once per process; later pools reuse it. Returns the ``ray`` module."""
    ray = _ray()
    if not ray.is_initialized():
        kw: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
        if address:
            kw["address"] = address
        else:
            kw.update(include_dashboard=False, num_cpus=num_cpus)
        ray.init(**kw)
    return ray


class RayPool:
    """Slots spread round-robin over ``workers`` Ray actors (slot i lives in actor i % workers)."""

    def __init__(self, factory: Callable, n: int, workers: int, address: str | None = None,
                 num_cpus_per_worker: float = 0.0):
        import sys

        global _RAY_ACTOR
        ray = init_ray(address)
        if _RAY_ACTOR is None:
            _RAY_ACTOR = ray.remote(_RayEnvWorker)
        self._ray = ray
        self.size = n
        self.factory = factory
        self.workers = self.lanes = max(1, min(workers, n))
        # No CPU reservation by default (like a process pool, more workers than CPUs must not wait forever for
        # resources); SPREAD places the actors over the nodes of a cluster.
        self._actors = [_RAY_ACTOR.options(num_cpus=num_cpus_per_worker, scheduling_strategy="SPREAD").remote(
            factory, len(range(w, n, self.workers)), list(sys.path)) for w in range(self.workers)]

    def call(self, op: str, requests: Sequence[tuple]) -> list[SlotResult]:
        per_worker = _split(requests, self.workers)
        refs = {w: self._actors[w].call.remote(op, [r for _, r in items])
                for w, items in enumerate(per_worker) if items}
        out: list[SlotResult | None] = [None] * len(requests)
        for w, ref in refs.items():
            items = per_worker[w]
            try:
                answers = self._ray.get(ref)
            except Exception as e:  # noqa: BLE001 - a dead actor marks its episodes, it does not kill the run
                answers = [SlotResult(error=error_record(RuntimeError(f"Ray env worker {w} failed: {e!r}"),
                                                         _stage(op, r))) for _, r in items]
            for (pos, _), ans in zip(items, answers):
                out[pos] = ans
        return out  # type: ignore[return-value]

    def lane_of(self, i: int) -> int:
        return i % self.workers

    def call_lane(self, lane: int, op: str, requests: Sequence[tuple]) -> list[SlotResult]:
        """One actor's batch (every slot in ``requests`` lives in actor ``lane``)."""
        local = [(i // self.workers, *rest) for i, *rest in requests]
        try:
            return self._ray.get(self._actors[lane].call.remote(op, local))
        except Exception as e:  # noqa: BLE001 - a dead actor marks its episodes, it does not kill the run
            return [SlotResult(error=error_record(RuntimeError(f"Ray env worker {lane} failed: {e!r}"),
                                                  _stage(op, r))) for r in requests]

    def close(self) -> None:
        try:
            self._ray.get([a.close.remote() for a in self._actors], timeout=30)
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        for a in self._actors:
            try:
                self._ray.kill(a)
            except Exception:  # noqa: BLE001
                pass
        self._actors = []


def make_pool(factory: Callable, n: int, workers: int = 0, backend: str | None = None, address: str | None = None):
    """``backend``: ``"sequential"`` (in-process), ``"process"`` or ``"ray"``; default: process if ``workers > 0``.

    ``workers`` is the number of worker processes / Ray actors (0 with the Ray backend: one per CPU of the cluster
    or the machine)."""
    if backend is None:
        backend = "process" if workers > 0 else "sequential"
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: one of {', '.join(BACKENDS)}")
    if backend == "sequential":
        return LocalPool(factory, n)
    if backend == "process":
        return ProcessPool(factory, n, max(1, workers))
    if workers <= 0:
        import os

        ray = init_ray(address)
        workers = max(1, int(ray.cluster_resources().get("CPU", os.cpu_count() or 1)))
    return RayPool(factory, n, workers, address=address)
