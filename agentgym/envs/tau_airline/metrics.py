"""τ²-bench's summary statistics over results rows (one row per episode, as ``agentgym eval`` writes them).

* ``pass^k`` (τ-bench): for each task with ``n`` trials of which ``c`` succeeded, ``C(c, k) / C(n, k)`` — the chance
  that k trials drawn without replacement all succeed — averaged over tasks. ``pass^1`` is the success rate.
* per-category success: the mean success per ``category`` (see :mod:`.tasks`).

Rows carry ``task_id``, ``won`` (reward 1), ``score`` (the reward) and, from ``task_metadata``, ``category``.
Rows with an ``error`` are environment/harness failures: they are counted, never scored.
"""

from __future__ import annotations

from math import comb
from typing import Sequence

__all__ = ["pass_hat_k", "tau_summary"]


def _clean(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if r.get("error") is None]


def pass_hat_k(rows: Sequence[dict], k: int) -> float:
    """τ-bench's pass^k over ``rows`` (tasks with fewer than k clean trials are left out); nan when none has k."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    per_task: dict[str, list[bool]] = {}
    for r in _clean(rows):
        per_task.setdefault(str(r["task_id"]), []).append(bool(r["won"]))
    vals = [comb(sum(s), k) / comb(len(s), k) for s in per_task.values() if len(s) >= k]
    return sum(vals) / len(vals) if vals else float("nan")


def tau_summary(rows: Sequence[dict], max_k: int | None = None) -> dict:
    """Average reward, pass^k for k = 1..max_k (default: the fewest trials of any task), per-category success."""
    clean = _clean(rows)
    counts: dict[str, int] = {}
    for r in clean:
        counts[str(r["task_id"])] = counts.get(str(r["task_id"]), 0) + 1
    if max_k is None:
        max_k = min(counts.values()) if counts else 0
    cats: dict[str, list[bool]] = {}
    for r in clean:
        cats.setdefault(str(r.get("category", "unknown")), []).append(bool(r["won"]))
    return {
        "episodes": len(clean), "errors": len(rows) - len(clean), "tasks": len(counts),
        "avg_reward": sum(float(r["score"]) for r in clean) / len(clean) if clean else float("nan"),
        "pass_hat_k": {k: pass_hat_k(clean, k) for k in range(1, max_k + 1)},
        "category_success": {c: sum(v) / len(v) for c, v in sorted(cats.items())},
        "category_episodes": {c: len(v) for c, v in sorted(cats.items())},
    }
