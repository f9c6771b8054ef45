"""Evaluation grids: tasks x seeds x trials of one env split, played with :func:`agentgym.rollout.runner.play`.

An *episode* is ``(task_id, seed, trial)``: the env resets with ``seed`` and ``options={"task_id": task_id}``; a
privileged policy draws from a generator seeded by ``(seed, digest(task_id), trial)``. Episodes already finished in the
results file are skipped, so a killed run resumes where it stopped; each finished episode is appended and flushed
at once (under the async schedule, from one results thread). Model policies play episode-asynchronously by default
(``schedule``, see :mod:`agentgym.rollout.runner`): up to ``chunk`` episodes in flight, a finished episode's env slot
taking the next; under lockstep, ``chunk`` episodes are played together per runner call.
Which tasks are played is :mod:`.sample`'s job (the whole split, a stratified sample, the first N, exact ids).
Each row records the run's identity (policy, policy options, ``max_turns``, env kwargs, the task selection, and the
env's own identity fields such as TextCraft's ``rules``), and a model policy's ``endpoint``; resuming a file
whose rows of this env split were made with another identity raises
:class:`~agentgym.eval.results.ResultsMismatchError` (see :mod:`.results`). Each episode's transcript (every prompt,
response, observation and step info) goes, compressed, into the side file ``RESULTS.transcripts.jsonl`` before its
row, which names it (``transcript_id``; see :mod:`.transcripts`); ``transcripts=False`` keeps none.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..hashing import stable_digest
from ..rollout.backends import make_pool
from ..rollout.policy import EnvPolicy, Policy
from ..rollout.progress import RolloutStats
from ..rollout.records import EpisodeSpec, Hooks, Trajectory
from ..rollout.guard import DEFAULT_WINDOW
from ..rollout.runner import Schedule, env_factory, play
from .results import ResultsFile, results_row, run_identity
from .sample import select_tasks
from .transcripts import TranscriptFile, key_fields, transcript_of, transcripts_path

__all__ = ["EvalGrid", "run_grid"]

logger = logging.getLogger(__name__)


@dataclass
class EvalGrid:
    """What to evaluate."""

    env_id: str
    split: str
    # Which tasks (see agentgym.eval.sample; at most one of the three): a stratified sample of N tasks, the first N,
    # or exact ids; none: every task of a file-backed split.
    episodes: int | None = None
    seeds: Sequence[int] = (0,)
    trials: int = 1
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_turns: int | None = None
    workers: int = 0
    chunk: int = 64  # episodes in flight (async), or played together per runner call (lockstep)
    backend: str | None = None  # "sequential" | "process" | "ray"; default: process when workers > 0
    address: str | None = None  # Ray cluster address (backend "ray"); default: a local Ray instance
    schedule: str | None = None  # "lockstep" | "async"; default: async for model (text) policies
    first: int | None = None
    tasks: Sequence[str] | None = None
    sample_seed: int = 0  # the stratified sample's seed (--sample-seed)

    def task_ids(self) -> list[str]:
        return list(self._probe()[0])

    def selection(self) -> dict[str, Any] | None:
        """How the tasks were chosen (:func:`~agentgym.eval.sample.select_tasks`; None: the whole split)."""
        return self._probe()[2]

    def env_identity(self) -> dict[str, Any]:
        """The env's own identity fields (:meth:`agentgym.core.AgentEnv.run_identity`, e.g. ``rules``) under this
        grid's split and env kwargs."""
        return dict(self._probe()[1])

    def _probe(self) -> tuple[list[str], dict[str, Any], dict[str, Any] | None]:
        # One throwaway env answers these questions; cached, as some envs are slow to make.
        key = (self.env_id, self.split, self.episodes, self.first, tuple(self.tasks or ()) or None, self.sample_seed,
               repr(sorted(self.env_kwargs.items())))
        cached = getattr(self, "_probed", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        import agentgym

        env = agentgym.make(self.env_id, split=self.split, **self.env_kwargs)
        try:
            # TaskError for an unbounded (generated) split without a count, or an unknown id
            ids, selection = select_tasks(env, episodes=self.episodes, first=self.first,
                                          tasks=None if self.tasks is None else list(self.tasks),
                                          seed=self.sample_seed)
            ident = dict(env.run_identity())
        finally:
            env.close()
        self._probed = (key, (ids, ident, selection))
        return ids, ident, selection

    def episodes_list(self) -> list[tuple[str, int, int]]:
        return [(t, int(s), k) for t in self.task_ids() for s in self.seeds for k in range(self.trials)]


def run_grid(grid: EvalGrid, policy: Policy | EnvPolicy, out: str, *, policy_name: str = "",
             policy_args: dict[str, Any] | None = None,
             progress: Callable[[int], None] | None = None,
             monitor: Callable[[RolloutStats], None] | None = None, transcripts: bool = True) -> list[dict]:
    """Play every unfinished episode of ``grid``; return the latest row of every episode of the grid.

    ``policy_name`` (default: the policy's ``name``, e.g. ``hf:PATH`` or ``openai:MODEL``, else its ``__name__`` or
    class name) and ``policy_args`` (the options that change
    its responses, such as the sampling temperature) are part of the run's identity, with the grid's ``max_turns``
    and ``env_kwargs``. Raises :class:`~agentgym.eval.results.ResultsMismatchError` when ``out`` holds rows of this
    env split made with another identity. ``progress`` is called with the number of episodes finished (or found
    finished in ``out``), ``monitor`` about twice a second with the live counters (episodes running and failed,
    model requests in flight, tokens/s). ``transcripts`` (default True) stores each episode's transcript in the
    side file (:func:`~agentgym.eval.transcripts.transcripts_path`).
    """
    results = ResultsFile(out)
    name = policy_name or getattr(policy, "name", None) or getattr(policy, "__name__", None) or type(policy).__name__
    identity = run_identity(name, policy_args, grid.max_turns, grid.env_kwargs, grid.env_identity(),
                            selection=grid.selection())
    existing = results.read()  # once: rows with per-request records make large files
    results.check_identity(grid.env_id, grid.split, identity, existing)
    # scheme://host[:port] of a model server (openai:) goes in every row, but not in the identity checked above:
    # the same server may be reached at another address on resume.
    endpoint = getattr(policy, "endpoint", None)
    if isinstance(endpoint, str):
        identity = {**identity, "endpoint": endpoint}
    # a local model's sampling distribution (hf:: temperature, top_k, top_p), explicit in every row
    sampling = getattr(policy, "sampling", None)
    if isinstance(sampling, dict):
        identity = {**identity, "sampling": dict(sampling)}
    done = results.done_keys(existing)
    episodes = grid.episodes_list()
    keys = {(grid.env_id, grid.split, t, s, k) for t, s, k in episodes}
    todo = [e for e in episodes if (grid.env_id, grid.split, e[0], e[1], e[2]) not in done]
    logger.info("%s/%s: %d episodes to play (%d already done)", grid.env_id, grid.split, len(todo),
                len(episodes) - len(todo))
    if progress is not None and len(todo) < len(episodes):
        progress(len(episodes) - len(todo))
    if not todo:
        return [row for key, row in results.latest(existing).items() if key in keys]
    env_kwargs = {"split": grid.split, **grid.env_kwargs}
    # One pool for the whole grid: worker processes / Ray actors start once, not once per chunk. Every reset
    # reseeds its env, so a slot that played an earlier chunk plays the next exactly like a fresh env.
    pool = make_pool(env_factory(grid.env_id, env_kwargs, grid.max_turns), min(grid.chunk, len(todo)),
                     grid.workers, backend=grid.backend, address=grid.address)
    try:
        side = TranscriptFile(transcripts_path(out)) if transcripts else None
        _play_chunks(grid, policy, todo, results, identity, progress, pool, env_kwargs, side, monitor)
    finally:
        pool.close()
    return [row for key, row in results.latest().items() if key in keys]


def _play_chunks(grid, policy, todo, results, identity, progress, pool, env_kwargs, side, monitor=None) -> None:
    # Async: every episode in one call (the pool's slots cap the episodes in flight; nothing waits for a chunk's
    # slowest episode). Lockstep: ``play`` plays batches of the pool's size (``chunk``) one after the other.
    def record(traj: Trajectory) -> None:
        row = results_row(traj, grid.env_id, grid.split, identity)
        if side is not None:  # the transcript first: a row never names a transcript that was not written
            row["transcript_id"] = side.append(key_fields(row), transcript_of(traj))
        results.append([row])
        if progress is not None:
            progress(1)

    # One group of size 1 per episode. The policy generator is seeded by the episode's identity, so a resumed run
    # plays each remaining episode exactly as an uninterrupted run would.
    specs = (EpisodeSpec(task=t, seed=int(s), policy_seed=(int(s), stable_digest(t), k, 0), group=i, trial=k)
             for i, (t, s, k) in enumerate(todo))
    play(pool, specs, policy, schedule=Schedule(grid.schedule),
         hooks=Hooks(on_trajectory=record, stats=RolloutStats(total=len(todo)), on_progress=monitor), keep=False,
         stop_on_systemic=min(DEFAULT_WINDOW, len(todo)))
