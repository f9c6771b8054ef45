"""Rollouts: :func:`play` plays explicit episodes; :func:`collect_groups` plays B tasks x G rollouts per task.

:func:`play` is the core: ``play(pool, episodes, policy, schedule=..., hooks=...)`` plays an iterable of
:class:`~.records.EpisodeSpec` (task, seed, policy seed, group, member, trial) on an env pool. It caps turns, records
one :class:`~.records.TurnRecord` per turn, and turns any ``Exception`` from the env or the policy into a typed
:class:`~agentgym.errors.ErrorRecord` on that trajectory: such trajectories are *marked* and left out of the
:class:`estimators.TrajectoryBatch`, never scored 0. ``KeyboardInterrupt`` and ``SystemExit`` are not failures of an
episode: they stop the run. ``agentgym eval`` (:mod:`agentgym.eval.grid`) calls it directly.

:func:`collect_groups` expands B tasks into B groups of G episodes (every member of a group resets with the same
seed, so every member sees the same first observation, differing only through the policy), plays them with
:func:`play` on a pool of its own (or the caller's) and builds the batch.

Two schedules (:class:`Schedule`) play the same episodes with the same results (for a deterministic policy: the same
rewards, turns, hashes and turn records, up to the order in which ``on_trajectory`` sees them and timing fields):

* ``"lockstep"`` (:mod:`.lockstep`) — turn by turn: each turn gathers the prompts of the unfinished episodes, asks the
  policy once for all of them (text policies) or each env's privileged policy, and steps only those episodes. Every
  turn waits for the slowest answer of the batch.
* ``"async"`` (:mod:`.async_runner`) — episode-asynchronous: one asyncio task per episode, each advancing as soon as
  its own answer arrives. The default for text (model) policies; privileged policies (oracle, random) default to
  lockstep, which has nothing to wait for.

Records, task options and the batch (``to_trajectory_batch``) live in :mod:`.records`.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from . import records as _records
from .async_runner import play_async
from .backends import EnvFactory, make_pool
from .guard import DEFAULT_WINDOW, SystemicFailureGuard
from .lockstep import play_lockstep
from .policy import EnvPolicy, Policy
from .progress import RolloutStats
from .records import EpisodeSpec, Hooks

__all__ = ["play", "Schedule", "collect_groups", "env_factory", "SCHEDULES", "default_schedule"]

SCHEDULES = ("lockstep", "async")

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Schedule:
    """How :func:`play` schedules its episodes.

    Attributes:
        kind: ``"lockstep"`` or ``"async"`` (see the module doc); None: :func:`default_schedule` of the policy.
        max_active: the most episodes in flight at once (default and cap: the pool's size). Async: a finished
            episode's env slot takes the next episode. Lockstep: episodes are played in consecutive batches of this
            many, each to its end.
        offload: async only: run in-process env calls on threads, off the event loop (default: when the env class
            is marked ``slow_steps``: it waits on a sandbox, a server or an LLM user). Pool workers (process, Ray)
            are always off the loop.
    """

    kind: str | None = None
    max_active: int | None = None
    offload: bool | None = None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.kind!r}: one of {', '.join(SCHEDULES)}")
        if self.max_active is not None and self.max_active < 1:
            raise ValueError(f"max_active must be >= 1, got {self.max_active}")


def play(pool, episodes: Iterable[EpisodeSpec], policy: Policy | EnvPolicy, *,
         schedule: Schedule | str | None = None, hooks: Hooks | None = None,
         keep: bool = True, stop_on_systemic: int = DEFAULT_WINDOW) -> list[_records.Trajectory]:
    """Play ``episodes`` on ``pool`` (from :func:`~.backends.make_pool`, left open) with ``policy``.

    Episode ``i`` of the iterable becomes trajectory ``traj_id=i``. ``episodes`` is read lazily (async: as slots
    free up; lockstep: one batch at a time), so a long eval need not hold every spec or trajectory. ``keep=False``
    hands each trajectory to ``hooks.on_trajectory`` and keeps nothing (memory stays bounded by the episodes in
    flight); the return value is then empty. Returns the trajectories in episode order.

    ``stop_on_systemic``: watch this many first-finishing episodes of a text policy (0: none; fewer when
    ``episodes`` has a length below it): when they all failed at the policy with a systemic error (connection
    refused; HTTP 401/403/404/422) before any answer, the run stops with
    :class:`~agentgym.errors.SystemicFailureError` (see :mod:`.guard`), after ``hooks.on_trajectory`` saw them.
    """
    if not isinstance(schedule, Schedule):
        schedule = Schedule(kind=schedule)
    hooks = hooks or Hooks()
    if hasattr(episodes, "__len__"):
        stop_on_systemic = min(stop_on_systemic, len(episodes))
    if stop_on_systemic > 0 and not isinstance(policy, EnvPolicy):
        hooks = Hooks(on_trajectory=SystemicFailureGuard(stop_on_systemic).wrap(hooks.on_trajectory),
                      stats=hooks.stats, on_progress=hooks.on_progress)
    kind = schedule.kind or default_schedule(policy)
    width = max(1, min(schedule.max_active or pool.size, pool.size))
    trajs: Iterable[_records.Trajectory] = (_records.Trajectory.from_spec(i, spec)
                                            for i, spec in enumerate(episodes))
    kept: list[_records.Trajectory] = []
    if keep:
        trajs = _keeping(trajs, kept)
    if kind == "lockstep":
        it = iter(trajs)
        while batch := list(itertools.islice(it, width)):
            play_lockstep(pool, batch, policy, hooks)
    else:
        play_async(pool, trajs, policy, hooks, max_active=width, offload=schedule.offload)
    return kept


def _keeping(trajs: Iterable[_records.Trajectory], kept: list[_records.Trajectory]):
    for t in trajs:
        kept.append(t)
        yield t


def env_factory(env_id: str, env_kwargs: dict | None = None, max_turns: int | None = None) -> EnvFactory:
    """The env recipe :func:`collect_groups` builds its pool from (for callers that keep one pool open)."""
    kwargs = dict(env_kwargs or {})
    if max_turns is not None:
        kwargs["max_turns"] = int(max_turns)
    return EnvFactory(env_id, tuple(sorted(kwargs.items())))


def default_schedule(policy) -> str:
    """``"async"`` for text (model) policies, ``"lockstep"`` for privileged ones (oracle, random)."""
    return "lockstep" if isinstance(policy, EnvPolicy) else "async"


def collect_groups(env_id: str, tasks: Sequence[Any], group_size: int, policy: Policy | EnvPolicy, *,
                   seed: int = 0, env_kwargs: dict | None = None, max_turns: int | None = None,
                   workers: int = 0, on_trajectory: Callable[[_records.Trajectory], None] | None = None,
                   seeds: Sequence[int] | None = None,
                   policy_seeds: Sequence[Sequence[int]] | None = None, backend: str | None = None,
                   address: str | None = None, pool=None, schedule: Schedule | str | None = None,
                   max_active: int | None = None, offload: bool | None = None, stats: RolloutStats | None = None,
                   on_progress: Callable[[RolloutStats], None] | None = None,
                   keep: bool = True, stop_on_systemic: int = DEFAULT_WINDOW) -> _records.RolloutResult:
    """Play ``len(tasks)`` groups of ``group_size`` episodes with :func:`play`, and build their batch.

    Args:
        env_id: a registered id; gymnasium's ``"module:EnvId"`` form imports ``module`` first, which is how a
            custom env registered outside agentgym reaches worker processes.
        tasks: per group, a task id (str), a task dict, or None (the env draws one from its seed).
        group_size: G, episodes per group.
        policy: a batched :class:`Policy` or an :class:`EnvPolicy`.
        seed: group ``g`` resets with seed ``seed + g`` unless ``seeds`` gives one per group.
        env_kwargs: passed to ``agentgym.make``; ``max_turns`` (if given) is added to them.
        workers: 0 = in-process; N = N worker processes (same results), or N Ray actors with ``backend="ray"``.
        backend: ``"sequential"`` | ``"process"`` | ``"ray"``; default: process when ``workers > 0``, else
            sequential. Every backend gives the same results (see :mod:`.backends`).
        address: the Ray cluster to join (``ray.init(address=...)``); default: a local one.
        pool: an open pool (from :func:`make_pool`, built with :func:`env_factory`), reused and left open
            (``backend``/``workers`` are then ignored). Lockstep needs a slot per episode (``len(tasks) *
            group_size``); async plays any number of episodes, at most ``pool.size`` at once.
        on_trajectory: called with each trajectory as soon as it finishes (for append-as-you-go results files), one
            call at a time; lockstep calls it in the caller's thread, async on one helper thread (a slow disk must
            not stall the event loop), so it must not rely on thread-bound objects (e.g. an sqlite connection made in
            another thread). An exception from it stops the run.
        schedule: ``"lockstep"`` or ``"async"`` (see the module doc), or a :class:`Schedule` (which then carries
            ``max_active`` and ``offload``); default :func:`default_schedule`.
        max_active: async only: the most episodes in flight at once (default: every episode, or the pool's size);
            a finished episode's env slot takes the next episode.
        offload: async only: run in-process env calls on threads, off the event loop (default: when the env class
            is marked ``slow_steps``: it waits on a sandbox, a server or an LLM user). Pool workers (process, Ray) are
            always off the loop.
        stats: live counters (:class:`~.progress.RolloutStats`) to update; ``on_progress`` is called with them
            about twice a second.
        keep: False hands each trajectory to ``on_trajectory`` and keeps nothing (a long eval's memory stays bounded
            by the episodes in flight); the result then has no trajectories and no batch.
        stop_on_systemic: watch this many first-finishing episodes (0: none): when they all failed at the policy
            with a systemic error (connection refused; HTTP 401/403/404/422) before any answer, the run stops with
            :class:`~agentgym.errors.SystemicFailureError` (see :mod:`.guard`), after ``on_trajectory`` saw them.
        policy_seeds: per group, the integers that seed the privileged policy's generator (member index appended);
            default ``(group seed, group index)``. With the member index they also identify the episode to a text
            policy that takes ``contexts`` (:class:`~agentgym.rollout.policy.PromptContext`).
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    sched = schedule if isinstance(schedule, Schedule) else Schedule(schedule, max_active, offload)
    kind = sched.kind or default_schedule(policy)
    group_seeds = list(seeds) if seeds is not None else [seed + g for g in range(len(tasks))]
    if len(group_seeds) != len(tasks):
        raise ValueError(f"seeds has {len(group_seeds)} entries for {len(tasks)} tasks")
    pseeds = [tuple(int(x) for x in p) for p in policy_seeds] if policy_seeds is not None else \
        [(int(group_seeds[g]), g) for g in range(len(tasks))]
    if len(pseeds) != len(tasks):
        raise ValueError(f"policy_seeds has {len(pseeds)} entries for {len(tasks)} tasks")
    n = len(tasks) * group_size
    if stats is not None and not stats.total:  # a caller that plays several calls sets its own total
        stats.total = n
    if kind == "lockstep" and pool is not None and pool.size < n:
        raise ValueError(f"the pool has {pool.size} slots for {n} episodes (the async schedule can reuse slots)")
    if n == 0:
        return _records.RolloutResult(trajectories=[], batch=None)
    # B x G: every member of group g plays task g from the group's seed; the member index ends its policy seed.
    specs = (EpisodeSpec(task=t, seed=int(group_seeds[g]), policy_seed=(*pseeds[g], m), group=g, member=m)
             for g, t in enumerate(tasks) for m in range(group_size))
    hooks = Hooks(on_trajectory=on_trajectory, stats=stats, on_progress=on_progress)
    own = pool is None
    if own:
        size = n if kind == "lockstep" else min(n, sched.max_active or n)
        pool = make_pool(env_factory(env_id, env_kwargs, max_turns), size, workers, backend=backend, address=address)
    try:
        trajs = play(pool, specs, policy, schedule=Schedule(kind, sched.max_active if kind == "async" else None,
                                                            sched.offload), hooks=hooks, keep=keep,
                    stop_on_systemic=min(stop_on_systemic, n))
    finally:
        if own:
            pool.close()
    if not keep:
        return _records.RolloutResult(trajectories=[], batch=None)
    clean = [t for t in trajs if t.error is None and t.turns]
    return _records.RolloutResult(trajectories=trajs, batch=_records.to_trajectory_batch(clean) if clean else None)
