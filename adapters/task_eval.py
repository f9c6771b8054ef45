"""Success of a model on a fixed task set, greedy and sampled, in the training's own rollout and context form.

``agentgym train --eval-every N`` calls :func:`evaluate_tasks` at step 0, every N steps and at the end and writes
the result to ``metrics.jsonl`` (``eval/*`` keys); the warm start calls it at its checks. Episodes are
played by :func:`adapters.episodes.play_episodes`, exactly as the trainer's rollouts: the same context form
(transcript), tokenization and turn budget. Sampled episode ``r`` of task ``k`` draws its tokens from the stream keyed
by ``(seed, k, r)`` and the turn (:mod:`agentgym.rollout.sampling`): an evaluation neither depends on nor disturbs
any global random state, and two models evaluated with the same ``seed`` share their random numbers (a paired
comparison with common random numbers: an unchanged model scores exactly the same).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .episodes import EpisodeConfig, play_episodes

__all__ = ["TaskEvalResult", "evaluate_tasks"]


@dataclass
class TaskEvalResult:
    """Greedy success (one episode per task) and sampled success (``samples`` episodes per task), their
    invalid-action fractions, and the per-task sampled success (task id -> fraction won)."""

    greedy_success: float
    sampled_success: float
    greedy_invalid_action_frac: float
    sampled_invalid_action_frac: float
    n_tasks: int
    samples: int
    per_task_sampled: dict = field(default_factory=dict)
    per_task_greedy: dict = field(default_factory=dict)
    sampling: dict = field(default_factory=dict)
    seed: int = 0

    def metrics(self, prefix: str = "eval/") -> dict:
        """The numbers as a flat ``metrics.jsonl`` record, with the sampled episodes' distribution (temperature,
        top-k, top-p) and sampling seed."""
        return {f"{prefix}greedy_success": self.greedy_success, f"{prefix}sampled_success": self.sampled_success,
                f"{prefix}greedy_invalid_action_frac": self.greedy_invalid_action_frac,
                f"{prefix}sampled_invalid_action_frac": self.sampled_invalid_action_frac,
                f"{prefix}n_tasks": self.n_tasks, f"{prefix}samples": self.samples,
                **{f"{prefix}{k}": v for k, v in self.sampling.items()}, f"{prefix}sampling_seed": self.seed}


def _play(model, tokenizer, env_id, task_ids, seeds, repeats, cfg, env_kwargs, envs, chunk, sampling_seed=0):
    specs = [(t, s, k, k * repeats + r) for k, (t, s) in enumerate(zip(task_ids, seeds)) for r in range(repeats)]
    episodes = []
    for start in range(0, len(specs), chunk):
        episodes += play_episodes(model, tokenizer, env_id, specs[start:start + chunk], cfg, env_kwargs=env_kwargs,
                                  envs=envs, sampling_seed=sampling_seed)
    per_task: dict[str, list[float]] = {}
    for e in episodes:
        per_task.setdefault(e.task_id, []).append(e.score)
    invalid = [not t.valid_action for e in episodes for t in e.turns]
    return ({k: float(np.mean(v)) for k, v in per_task.items()}, float(np.mean([e.score for e in episodes])),
            float(np.mean(invalid)) if invalid else 0.0)


def evaluate_tasks(model: Any, tokenizer: Any, env_id: str, task_ids: Sequence[str], cfg: EpisodeConfig, *,
                   seeds: Sequence[int] | None = None, samples: int = 4, seed: int = 0,
                   env_kwargs: dict | None = None, envs: dict | None = None, chunk: int = 64) -> TaskEvalResult:
    """Play every task of ``task_ids`` once greedily and ``samples`` times sampled (``cfg``'s temperature, top-k and
    top-p; the random numbers keyed by ``seed``, see the module docstring); ``seeds`` are the env reset seeds per
    task (default 0, 1, ...). ``envs``: an env cache for :func:`play_episodes`."""
    task_ids = [str(t) for t in task_ids]
    seeds = list(range(len(task_ids))) if seeds is None else [int(s) for s in seeds]
    if len(seeds) != len(task_ids):
        raise ValueError("evaluate_tasks: one seed per task")
    envs = {} if envs is None else envs
    greedy_cfg = dataclasses.replace(cfg, do_sample=False)
    g_tasks, g_mean, g_inv = _play(model, tokenizer, env_id, task_ids, seeds, 1, greedy_cfg, env_kwargs, envs, chunk)
    s_tasks, s_mean, s_inv = {}, float("nan"), float("nan")
    sampled_cfg = dataclasses.replace(cfg, do_sample=True)
    if samples > 0:
        s_tasks, s_mean, s_inv = _play(model, tokenizer, env_id, task_ids, seeds, samples, sampled_cfg, env_kwargs,
                                       envs, chunk, sampling_seed=int(seed))
    return TaskEvalResult(greedy_success=g_mean, sampled_success=s_mean, greedy_invalid_action_frac=g_inv,
                          sampled_invalid_action_frac=s_inv, n_tasks=len(task_ids), samples=samples,
                          per_task_sampled=s_tasks, per_task_greedy=g_tasks,
                          sampling=sampled_cfg.sampling().identity(), seed=int(seed))
