"""τ²-bench's summary statistics over results rows (one row per episode, as ``agentgym eval`` writes them).

* ``pass^k`` (τ-bench): for each task with ``n`` trials of which ``c`` succeeded, ``C(c, k) / C(n, k)`` — the chance
  that k trials drawn without replacement all succeed — averaged over tasks. ``pass^1`` is the success rate.
* per-category success: the mean success per ``category`` (see :mod:`.tasks`).

Rows carry ``task_id``, ``won`` (reward 1), ``score`` (the reward) and, from ``task_metadata``, ``category``.
Rows with an ``error`` are environment/harness failures: they are counted, never scored.
"""

from __future__ import annotations

from typing import Sequence

# One pass^k for every env: the eval summaries' (tasks with fewer than k clean trials are left out).
from ...eval.summary import pass_hat_k, pass_k_curve

__all__ = ["pass_hat_k", "tau_summary"]


def _clean(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if r.get("error") is None]


def tau_summary(rows: Sequence[dict], max_k: int | None = None) -> dict:
    """Average reward, pass^k for k = 1..max_k (default: the fewest trials of any task), per-category success."""
    clean = _clean(rows)
    cats: dict[str, list[bool]] = {}
    for r in clean:
        cats.setdefault(str(r.get("category", "unknown")), []).append(bool(r["won"]))
    return {
        "episodes": len(clean), "errors": len(rows) - len(clean), "tasks": len({str(r["task_id"]) for r in clean}),
        "avg_reward": sum(float(r["score"]) for r in clean) / len(clean) if clean else float("nan"),
        "pass_hat_k": pass_k_curve(clean, max_k),
        "category_success": {c: sum(v) / len(v) for c, v in sorted(cats.items())},
        "category_episodes": {c: len(v) for c, v in sorted(cats.items())},
    }
