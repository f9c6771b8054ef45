"""Env pools: where the environments of a rollout live.

A pool holds ``n`` env *slots* and answers batched calls; every call returns one :class:`SlotResult` per request,
holding either the value or an :class:`~agentgym.errors.ErrorRecord` (an exception never escapes a pool).

* :class:`LocalPool` — every env in this process (``workers=0``).
* :class:`ProcessPool` — slots spread over ``workers`` processes (``spawn`` start method), one pipe each; a batched
  call sends each worker its share and gathers the answers in request order. Envs are deterministic given their
  seed and options, and privileged policies draw from per-slot generators seeded by the runner, so both pools give
  the same results.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ErrorRecord, error_record

__all__ = ["SlotResult", "EnvFactory", "LocalPool", "ProcessPool", "make_pool"]


@dataclass(frozen=True)
class EnvFactory:
    """A picklable recipe for an env: ``agentgym.make(env_id, **kwargs)``."""

    env_id: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __call__(self):
        import agentgym

        return agentgym.make(self.env_id, **dict(self.kwargs))


@dataclass
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
            return SlotResult((obs, info, env.prompt(), env.task_metadata()))
        except BaseException as e:  # noqa: BLE001 - every failure becomes a typed record
            return SlotResult(error=error_record(e, "reset"))

    def step(self, i: int, action: str) -> SlotResult:
        try:
            env = self.envs[i]
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            return SlotResult((obs, float(reward), bool(terminated), bool(truncated), info,
                               None if done else env.prompt()))
        except BaseException as e:  # noqa: BLE001
            return SlotResult(error=error_record(e, "step"))

    def act(self, i: int, policy) -> SlotResult:
        try:
            response = policy.act(self.envs[i], self.rngs[i])
            if not isinstance(response, str):
                raise TypeError(f"{policy!r} returned {type(response).__name__}, not str")
            return SlotResult(response)
        except BaseException as e:  # noqa: BLE001
            return SlotResult(error=error_record(e, "policy"))

    def close(self) -> None:
        for env in self.envs:
            if env is not None:
                try:
                    env.close()
                except Exception:  # noqa: BLE001 - closing is best effort
                    pass


class LocalPool:
    """All slots in this process."""

    def __init__(self, factory: Callable, n: int):
        self._slots = _Slots(factory, n)

    def call(self, op: str, requests: Sequence[tuple]) -> list[SlotResult]:
        fn = getattr(self._slots, op)
        return [fn(*req) for req in requests]

    def close(self) -> None:
        self._slots.close()


def _worker(conn, factory, n: int) -> None:
    slots = _Slots(factory, n)
    while True:
        msg = conn.recv()
        if msg is None:
            slots.close()
            conn.close()
            return
        op, requests = msg
        fn = getattr(slots, op)
        conn.send([fn(*req) for req in requests])


class ProcessPool:
    """Slots spread round-robin over worker processes (slot i lives in worker i % workers)."""

    def __init__(self, factory: Callable, n: int, workers: int):
        ctx = mp.get_context("spawn")
        self.workers = max(1, min(workers, n))
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

    def call(self, op: str, requests: Sequence[tuple]) -> list[SlotResult]:
        per_worker: list[list[tuple[int, tuple]]] = [[] for _ in range(self.workers)]
        for pos, req in enumerate(requests):
            i = req[0]
            per_worker[i % self.workers].append((pos, (i // self.workers, *req[1:])))
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
                answers = [SlotResult(error=error_record(RuntimeError(f"worker {w} died: {e!r}"), op))
                           for _ in items]
            for (pos, _), ans in zip(items, answers):
                out[pos] = ans
        return out  # type: ignore[return-value]

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


def make_pool(factory: Callable, n: int, workers: int = 0):
    return LocalPool(factory, n) if workers <= 0 else ProcessPool(factory, n, workers)
