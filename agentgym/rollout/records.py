"""What a rollout records: episode specs in, trajectories and the estimators' turn table out.

* :class:`EpisodeSpec` names one episode to play (task, seed, policy seed, group, member, trial);
  :func:`~agentgym.rollout.runner.play` takes an iterable of them.
* :class:`TurnRecord` / :class:`Trajectory` / :class:`RolloutResult` are what both schedules (:mod:`.lockstep`,
  :mod:`.async_runner`) fill in.
* :func:`task_options` turns a spec's task into ``reset(options=...)``; :func:`finish_trajectory` is the end of an
  episode under either schedule.
* :func:`step_columns` and :func:`episode_end_columns` are the one mapping from step ``info`` dicts to batch columns,
  used by :func:`to_trajectory_batch` here and by trainer adapters that build their own batches
  (``adapters/episodes.py``). ``truncated`` has one meaning there: True on a trajectory's *last* turn when the
  episode stopped without a natural end (the env's turn budget ``max_turns``, or a trainer's token budget), False on
  every other row; a terminated episode is never truncated.

The batch follows docs/estimators.md section 1.1: one row per turn, trajectories in rollout-major
order, ``obs_hash`` of the observation the agent acted on, ``done`` on each trajectory's last turn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ErrorRecord
from .progress import RolloutStats

__all__ = ["EpisodeSpec", "TurnRecord", "Trajectory", "RolloutResult", "Hooks", "task_options",
           "finish_trajectory", "step_columns", "episode_end_columns", "to_trajectory_batch"]


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play.

    Attributes:
        task: a task id (str), a task dict, or None (the env draws one from ``seed``).
        seed: the env's reset seed.
        policy_seed: the integers that seed a privileged policy's generator for this episode and identify it to a
            text policy that takes ``contexts`` (:class:`~agentgym.rollout.policy.PromptContext` ``episode``).
        group: the group this episode belongs to (the batch's ``group_id``: episodes compared with each other).
        member: its index inside the group.
        trial: which repetition of (task, seed) it is (an eval grid's trials); carried to the trajectory.
    """

    task: Any
    seed: int
    policy_seed: tuple[int, ...]
    group: int = 0
    member: int = 0
    trial: int = 0


@dataclass(slots=True)  # one per turn: slots make them cheaper to build and hold
class TurnRecord:
    """One agent turn: what it saw, what it said, what happened."""

    turn_idx: int
    prompt: str
    obs_hash: int
    response: str
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict
    usage: dict | None = None  # the policy request's record (tokens, latency, attempts) when the policy gives one


@dataclass
class Trajectory:
    """One episode. ``error`` is set when the env or policy failed; such an episode is not scored."""

    traj_id: int
    group_id: int
    task: Any
    seed: int
    member: int
    task_id: str = ""
    meta: dict = field(default_factory=dict)
    first_observation: str = ""
    turns: list[TurnRecord] = field(default_factory=list)
    error: ErrorRecord | None = None
    wall_s: float = 0.0  # seconds from the episode's reset to its end (a timing field: not part of its results)
    policy_seed: tuple[int, ...] = ()  # the spec's policy seed (see EpisodeSpec)
    trial: int = 0

    @classmethod
    def from_spec(cls, traj_id: int, spec: EpisodeSpec) -> "Trajectory":
        return cls(traj_id=traj_id, group_id=int(spec.group), task=spec.task, seed=int(spec.seed),
                   member=int(spec.member), policy_seed=tuple(int(x) for x in spec.policy_seed),
                   trial=int(spec.trial))

    @property
    def won(self) -> bool:
        return bool(self.turns and self.turns[-1].info.get("won"))

    @property
    def score(self) -> float:
        return float(self.turns[-1].info.get("score", 0.0)) if self.turns else 0.0

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def truncated(self) -> bool:
        return bool(self.turns and self.turns[-1].truncated)


@dataclass
class RolloutResult:
    trajectories: list[Trajectory]
    batch: Any  # estimators.TrajectoryBatch, or None when no trajectory finished cleanly

    @property
    def errors(self) -> list[Trajectory]:
        return [t for t in self.trajectories if t.error is not None]


@dataclass
class Hooks:
    """What a rollout tells its caller while it runs.

    Attributes:
        on_trajectory: called with each trajectory as soon as it finishes (for append-as-you-go results files), one
            call at a time; lockstep calls it in the caller's thread, async on one helper thread (a slow disk must
            not stall the event loop), so it must not rely on thread-bound objects (e.g. an sqlite connection made
            in another thread). An exception from it stops the run.
        stats: live counters (:class:`~.progress.RolloutStats`) to update.
        on_progress: called with ``stats`` about twice a second (only with ``stats``).
    """

    on_trajectory: Callable[[Trajectory], None] | None = None
    stats: RolloutStats | None = None
    on_progress: Callable[[RolloutStats], None] | None = None


def task_options(task: Any) -> dict | None:
    """``reset(options=...)`` for a spec's task: a task dict, a task id, or None (the seed draws one)."""
    if task is None:
        return None
    if isinstance(task, dict):
        return {"task": task}
    return {"task_id": str(task)}


def finish_trajectory(t: Trajectory, hooks: Hooks, started: float, *, call_back: bool = True) -> None:
    """The end of an episode under either schedule: its wall time, the counters, then (``call_back``) the caller's
    ``on_trajectory``."""
    t.wall_s = time.perf_counter() - started
    if hooks.stats is not None:
        hooks.stats.finished(t.error is None)
    if call_back and hooks.on_trajectory is not None:
        hooks.on_trajectory(t)


def step_columns(info: dict) -> tuple[bool, int, bool, int]:
    """``(valid_action, action_key, action_parsed, process_ok)`` of one step's ``info`` (``process_ok``: 1 ok, 0
    failed, -1 no verdict)."""
    ok = info.get("process_ok")
    return (bool(info.get("action_valid", True)), int(info.get("action_key", 0)), info.get("action") is not None,
            -1 if ok is None else int(bool(ok)))


def episode_end_columns(n_turns: int, truncated: bool) -> tuple[list[bool], list[bool]]:
    """``(done, truncated)`` of a trajectory's ``n_turns`` rows: ``done`` on the last row; ``truncated`` on the last
    row when the episode stopped without a natural end (see the module docstring)."""
    if n_turns == 0:
        return [], []
    return [False] * (n_turns - 1) + [True], [False] * (n_turns - 1) + [bool(truncated)]


def to_trajectory_batch(trajs: Sequence[Trajectory]):
    """The turn table (spec 1.1) of finished, error-free trajectories, in rollout-major order."""
    from estimators import TrajectoryBatch

    # One pass over the turns into plain lists (numpy conversion once per column at the end): this runs after every
    # rollout, so it is kept to a few microseconds per turn.
    group_id, task_id, traj_id, turn_idx, reward, done, truncated, success = [], [], [], [], [], [], [], []
    obs_hash, valid, akey, parsed, process = [], [], [], [], []
    for t in trajs:
        n = len(t.turns)
        if n == 0:
            continue
        group_id += [t.group_id] * n
        task_id += [t.task_id] * n
        traj_id += [t.traj_id] * n
        success += [t.score] * n
        last = t.turns[-1]
        ends, cut = episode_end_columns(n, last.truncated and not last.terminated)
        done += ends
        truncated += cut
        for r in t.turns:
            turn_idx.append(r.turn_idx)
            reward.append(r.reward)
            obs_hash.append(r.obs_hash)
            v, k, p, ok = step_columns(r.info)
            valid.append(v)
            akey.append(k)
            parsed.append(p)
            process.append(ok)
    return TrajectoryBatch(
        group_id=np.array(group_id, dtype=np.int64),
        task_id=np.array(task_id, dtype=object),
        traj_id=np.array(traj_id, dtype=np.int64),
        turn_idx=np.array(turn_idx, dtype=np.int32),
        reward=np.array(reward, dtype=np.float32),
        done=np.array(done, dtype=bool),
        truncated=np.array(truncated, dtype=bool),
        success=np.array(success, dtype=np.float32),
        obs_hash=np.array(obs_hash, dtype=np.int64),
        valid_action=np.array(valid, dtype=bool),
        action_key=np.array(akey, dtype=np.int64),
        action_parsed=np.array(parsed, dtype=bool),
        process_ok=np.array(process, dtype=np.int8),
    )
