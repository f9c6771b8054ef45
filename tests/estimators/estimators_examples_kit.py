"""The hand-built TrajectoryBatch of the worked-example tests (no hypothesis): ``batch`` and the delta ``D``."""

from __future__ import annotations

import numpy as np

import estimators as E

D = 1e-6  # delta


def batch(trajs, **extra):
    """trajs: list of (group, traj_id, rewards per turn, dict of per-turn columns)."""
    cols: dict[str, list] = {"group_id": [], "traj_id": [], "turn_idx": [], "reward": [], "done": []}
    for g, tid, rewards, per_turn in trajs:
        T = len(rewards)
        for t in range(T):
            cols["group_id"].append(g)
            cols["traj_id"].append(tid)
            cols["turn_idx"].append(t)
            cols["reward"].append(rewards[t])
            cols["done"].append(t == T - 1)
            for k, v in per_turn.items():
                cols.setdefault(k, []).append(v[t] if isinstance(v, (list, tuple)) else v)
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    arrays.update(extra)
    return E.TrajectoryBatch(**arrays)
