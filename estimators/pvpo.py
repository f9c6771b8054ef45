"""PVPO (spec 4.7 and 9; the PVPO paper, arXiv 2506.02153).

* :class:`StaticValueTable`: task_id -> V_hat (mean reward of M reference rollouts), with its build step.
* :func:`prerollout_filter`: the offline difficulty filter (acc = 1 dropped; acc = 0 kept only with a stored GT).
* :func:`select_gt_injections` and :func:`inject_gt`: online GT injection when every rollout of a task failed.
* estimator ``pvpo``: A(tau) = R(tau) - V_hat(task), no std, broadcast to every turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping, Sequence

import numpy as np

from .batch import SGCD_COLUMNS, TOKEN_COLUMNS, TURN_COLUMNS, BatchValidationError, TrajectoryBatch
from .configs import ConfigError, PVPOConfig
from .registry import register
from .result import AdvantageResult, finalize

__all__ = [
    "StaticValueTable",
    "PrerolloutFilterResult",
    "prerollout_filter",
    "select_gt_injections",
    "GTTrajectory",
    "inject_gt",
    "pvpo",
]


def _key(task: Any) -> Hashable:
    if isinstance(task, np.generic):
        return task.item()
    return task


@dataclass
class StaticValueTable:
    """Static Monte-Carlo baseline V_hat(task) (spec 4.7). ``built_at_step`` is the training step of the last
    (re)computation; ``stats`` carries the pre-rollout filter fractions for the diagnostics."""

    values: dict[Hashable, float] = field(default_factory=dict)
    built_at_step: int = 0
    stats: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_rollouts(cls, task_ids: Sequence[Any], rewards: Sequence[float], step: int = 0,
                      tasks: Iterable[Any] | None = None) -> "StaticValueTable":
        """V_hat(q) = mean of the rewards of the rollouts of q (restricted to ``tasks`` when given)."""
        values = _mean_by_task(task_ids, rewards)
        if tasks is not None:
            keep = {_key(t) for t in tasks}
            values = {k: v for k, v in values.items() if k in keep}
        return cls(values, step)

    def __contains__(self, task: Any) -> bool:
        return _key(task) in self.values

    def __len__(self) -> int:
        return len(self.values)

    def lookup(self, task_ids: Sequence[Any]) -> np.ndarray:
        """V_hat for each task id; a task missing from the table raises (no fallback to the batch mean)."""
        arr = np.asarray(task_ids)
        out = np.empty(arr.shape[0], dtype=np.float64)
        missing = []
        for i, t in enumerate(arr.tolist()):
            v = self.values.get(t)
            if v is None:
                missing.append(i)
            else:
                out[i] = v
        if missing:
            raise BatchValidationError("task_id", f"task {arr[missing[0]]!r} is not in the PVPO V table "
                                       f"({len(missing)} rows)", missing)
        return out

    def updated(self, task_ids: Sequence[Any], rewards: Sequence[float], step: int) -> "StaticValueTable":
        """Static V update (spec 4.7): recompute V_hat for every task already in the table from new rollouts
        (the sample filter is not re-applied); tasks without new rollouts keep their value."""
        new = _mean_by_task(task_ids, rewards)
        values = {k: new.get(k, v) for k, v in self.values.items()}
        return StaticValueTable(values, step, dict(self.stats))

    def age(self, step: int) -> int:
        return int(step) - int(self.built_at_step)

    @staticmethod
    def should_update(step: int, v_update_steps: Sequence[int] = (500,), v_update_every: int | None = None) -> bool:
        """One-shot updates at ``v_update_steps`` (default [500]); ``v_update_every`` is the periodic extension."""
        if step in set(v_update_steps):
            return True
        return bool(v_update_every) and step > 0 and step % int(v_update_every) == 0


def _mean_by_task(task_ids: Sequence[Any], values: Sequence[float]) -> dict[Hashable, float]:
    tasks = np.asarray(task_ids)
    vals = np.asarray(values, dtype=np.float64)
    if tasks.shape[0] != vals.shape[0]:
        raise ValueError("task_ids and values differ in length")
    if not np.all(np.isfinite(vals)):
        raise ValueError("non-finite pre-rollout reward")
    if tasks.size == 0:
        return {}
    uniq, inv = np.unique(tasks, return_inverse=True)
    inv = inv.reshape(-1)
    means = np.bincount(inv, weights=vals) / np.bincount(inv)
    return {_key(u): float(m) for u, m in zip(uniq, means)}


@dataclass
class PrerolloutFilterResult:
    kept_tasks: list
    dropped_acc1: list
    dropped_acc0_no_gt: list
    gt_tasks: list
    table: StaticValueTable


def prerollout_filter(task_ids: Sequence[Any], rewards: Sequence[float], acc: Sequence[float],
                      tasks_with_gt: Iterable[Any] = (), drop_zero_acc_without_gt: bool = True,
                      step: int = 0) -> PrerolloutFilterResult:
    """Offline pre-rollout (spec 4.7): per task, acc(q) = mean accuracy and V_hat(q) = mean reward of its M
    rollouts. acc = 1: dropped; 0 < acc < 1: kept; acc = 0: kept only with a stored GT trajectory (or always, when
    ``drop_zero_acc_without_gt=False``). The returned table holds the kept tasks and the filter fractions."""
    v = _mean_by_task(task_ids, rewards)
    a = _mean_by_task(task_ids, acc)
    with_gt = {_key(t) for t in tasks_with_gt}
    kept, d1, d0, gt = [], [], [], []
    for task, acc_q in a.items():
        if acc_q >= 1.0:
            d1.append(task)
        elif acc_q <= 0.0:
            if task in with_gt:
                kept.append(task)
                gt.append(task)
            elif drop_zero_acc_without_gt:
                d0.append(task)
            else:
                kept.append(task)
        else:
            kept.append(task)
    n = max(len(a), 1)
    table = StaticValueTable({t: v[t] for t in kept}, step,
                             {"frac_tasks_dropped_acc1": len(d1) / n, "frac_dropped_acc0_noGT": len(d0) / n})
    return PrerolloutFilterResult(kept, d1, d0, gt, table)


def select_gt_injections(batch: TrajectoryBatch, tasks_with_gt: Iterable[Any]) -> np.ndarray:
    """Online GT injection (spec 4.7): for every group whose task has a stored GT and whose rollouts all failed
    (``success`` = 0 on every trajectory), the traj_id of its first rollout in canonical order. At most one per
    group; groups already holding a GT row are skipped."""
    batch.require(("task_id", "success"), "pvpo.select_gt_injections")
    if batch.n_trajectories == 0:
        return np.zeros(0, dtype=np.int64)
    with_gt = {_key(t) for t in tasks_with_gt}
    succ = batch.traj_value("success").astype(np.float64)
    any_success = np.zeros(batch.n_groups, dtype=bool)
    np.logical_or.at(any_success, batch.traj_group, succ > 0)
    has_gt = np.zeros(batch.n_groups, dtype=bool)
    if batch.has("is_gt"):
        np.logical_or.at(has_gt, batch.traj_group, batch.traj_value("is_gt"))
    first_traj = batch.traj_index[batch.canonical_order[np.r_[0, np.flatnonzero(
        np.diff(batch.group_index[batch.canonical_order])) + 1]]]
    task_of_group = batch.traj_value("task_id")[first_traj]
    out = []
    for g, t in enumerate(first_traj):
        if not any_success[g] and not has_gt[g] and _key(task_of_group[g]) in with_gt:
            out.append(batch.traj_ids[t])
    return np.asarray(out, dtype=np.int64)


@dataclass
class GTTrajectory:
    """A ground-truth trajectory to inject (spec 4.7).

    ``n_turns`` turn rows; ``turn_columns`` optionally gives per-turn values for turn-table columns (e.g.
    ``obs_hash``); ``token`` gives its token rows (``response_mask``, ``token_turn_idx``, ``old_logprob`` = the
    GT generator's log-probs, optionally ``ref_logprob`` and ``response_len_tokens``), each ``[b, L']`` with
    L' <= the batch's L (padded on the right).
    """

    n_turns: int = 1
    turn_columns: Mapping[str, Any] = field(default_factory=dict)
    token: Mapping[str, Any] = field(default_factory=dict)


_GT_DEFAULTS = {"obs_hash": -1, "action_key": -1, "valid_action": True, "action_parsed": True, "process_ok": -1,
                "truncated": False}


def inject_gt(batch: TrajectoryBatch, replacements: Mapping[int, GTTrajectory], gt_reward: float = 1.0
              ) -> TrajectoryBatch:
    """Replace each trajectory ``traj_id`` of ``replacements`` by its GT trajectory: same traj_id, group and task,
    reward ``gt_reward`` on its last turn (0 before), success 1, ``is_gt`` true, and its own token rows (so its
    importance ratio uses the GT generator as behavior policy). Returns a new, validated batch; the GT rows take the
    place of the replaced rows, so the canonical order of the group is kept."""
    if not replacements:
        return batch
    if any(batch.has(c) for c in SGCD_COLUMNS):
        raise ValueError("inject_gt does not support batches with SGCD arrays")
    d = batch.to_dict()
    n = batch.n_turns
    traj = batch.traj_id
    key = np.arange(n, dtype=np.float64)
    drop = np.zeros(n, dtype=bool)
    new_turn: dict[str, list] = {c: [] for c in TURN_COLUMNS if c in d}
    new_key: list[float] = []
    tok_new: dict[str, list] = {c: [] for c in TOKEN_COLUMNS if c in d}
    tok_key: list[float] = []
    L = batch.response_mask.shape[1] if batch.has_tokens else 0
    tok_drop = np.zeros(batch.response_mask.shape[0] if batch.has_tokens else 0, dtype=bool)
    for tid, gt in replacements.items():
        rows = np.flatnonzero(traj == tid)
        if rows.size == 0:
            raise BatchValidationError("traj_id", f"inject_gt: trajectory {tid} is not in the batch")
        drop[rows] = True
        first = int(rows.min())
        T = int(gt.n_turns)
        if T < 1:
            raise ValueError("GTTrajectory.n_turns must be >= 1")
        for t in range(T):
            new_key.append(first + t / (T + 1))
        for c in new_turn:
            if c in gt.turn_columns:
                vals = np.asarray(gt.turn_columns[c])
                if vals.shape[0] != T:
                    raise ValueError(f"GTTrajectory.turn_columns[{c!r}] has {vals.shape[0]} rows, expected {T}")
                new_turn[c].extend(list(vals))
                continue
            last = np.arange(T) == T - 1
            if c in ("group_id", "task_id", "traj_id"):
                vals = np.repeat(d[c][first:first + 1], T)
            elif c == "turn_idx":
                vals = np.arange(T)
            elif c == "reward":
                vals = np.where(last, gt_reward, 0.0)
            elif c in ("done", "is_final_answer"):
                vals = last
            elif c == "success":
                vals = np.ones(T)
            elif c == "is_gt":
                vals = np.ones(T, dtype=bool)
            elif c == "info_gain":
                vals = np.where(last, np.nan, 0.0)
            elif c in _GT_DEFAULTS:
                vals = np.full(T, _GT_DEFAULTS[c])
            else:
                raise ValueError(f"inject_gt: GTTrajectory must provide turn column {c!r}")
            new_turn[c].extend(list(vals))
        if batch.has_tokens:
            trows = np.flatnonzero(batch.row_traj_id == tid)
            tok_drop[trows] = True
            tfirst = float(trows.min()) if trows.size else float(batch.response_mask.shape[0])
            mask = np.asarray(gt.token.get("response_mask"))
            if mask.ndim != 2 or mask.shape[1] > L:
                raise ValueError(f"GTTrajectory.token['response_mask'] must be [b, L'<= {L}]")
            b = mask.shape[0]
            for r in range(b):
                tok_key.append(tfirst + r / (b + 1))
            for c in tok_new:
                if c == "row_traj_id":
                    tok_new[c].extend([tid] * b)
                    continue
                if c == "response_len_tokens":
                    v = gt.token.get(c, mask.sum(axis=1))
                    tok_new[c].extend(list(np.asarray(v)))
                    continue
                if c not in gt.token:
                    raise ValueError(f"inject_gt: GTTrajectory.token must provide {c!r}")
                arr = np.asarray(gt.token[c])
                fill = -1 if c == "token_turn_idx" else 0
                pad = np.full((b, L), fill, dtype=arr.dtype)
                pad[:, :arr.shape[1]] = arr
                tok_new[c].extend(list(pad))
    keep = ~drop
    order = np.argsort(np.concatenate([key[keep], np.asarray(new_key)]), kind="stable")
    kwargs: dict[str, Any] = {}
    for c in new_turn:
        if c == "embedding":
            merged = np.concatenate([d[c][keep], np.asarray(new_turn[c], dtype=np.float32).reshape(-1, d[c].shape[1])])
        else:
            merged = np.concatenate([d[c][keep], np.asarray(new_turn[c]).astype(d[c].dtype)])
        kwargs[c] = merged[order]
    if batch.has_tokens:
        tkeep = ~tok_drop
        tkey = np.arange(tok_drop.size, dtype=np.float64)
        torder = np.argsort(np.concatenate([tkey[tkeep], np.asarray(tok_key)]), kind="stable")
        for c in tok_new:
            merged = np.concatenate([d[c][tkeep], np.asarray(tok_new[c]).astype(d[c].dtype).reshape(
                (-1,) + d[c].shape[1:])])
            kwargs[c] = merged[torder]
    if "is_gt" not in kwargs:
        is_gt = np.concatenate([np.zeros(int(keep.sum()), dtype=bool), np.ones(len(new_key), dtype=bool)])
        kwargs["is_gt"] = is_gt[order]
    return TrajectoryBatch(**kwargs)


@register("pvpo", PVPOConfig)
def pvpo(batch: TrajectoryBatch, cfg: PVPOConfig) -> AdvantageResult:
    """Spec 4.7: A(tau) = R(tau) - V_hat(task(tau)), no std, broadcast to every turn; V_hat from
    ``cfg.v_table``. A task missing from the table raises; a group may hold at most one GT trajectory."""
    if cfg.v_table is None or not isinstance(cfg.v_table, StaticValueTable):
        raise ConfigError("pvpo needs v_table=StaticValueTable(...)")
    batch.require(("group_id", "traj_id", "turn_idx", "reward", "task_id"), "pvpo")
    R = batch.traj_return
    tasks = batch.traj_value("task_id") if batch.n_trajectories else np.zeros(0)
    v = cfg.v_table.lookup(tasks) if batch.n_trajectories else np.zeros(0)
    n_gt = 0
    if batch.has("is_gt") and batch.n_trajectories:
        gt = batch.traj_value("is_gt")
        per_group = np.bincount(batch.traj_group, weights=gt.astype(np.float64), minlength=batch.n_groups)
        if (per_group > 1).any():
            bad = np.flatnonzero(per_group > 1)
            raise BatchValidationError("is_gt", "more than one GT trajectory in a group",
                                       np.flatnonzero(np.isin(batch.group_index, bad) & batch.is_gt))
        n_gt = int(gt.sum())
    a = R - v
    turn = a[batch.traj_index] if batch.n_turns else np.zeros(0)
    diags = {
        "frac_tasks_dropped_acc1": float(cfg.v_table.stats.get("frac_tasks_dropped_acc1", 0.0)),
        "frac_dropped_acc0_noGT": float(cfg.v_table.stats.get("frac_dropped_acc0_noGT", 0.0)),
        "n_gt_injected": float(n_gt),
        "mean_v_hat": float(v.mean()) if v.size else 0.0,
        "mean_r_minus_v": float(a.mean()) if a.size else 0.0,
    }
    if cfg.current_step is not None:
        diags["v_table_age_steps"] = float(cfg.v_table.age(cfg.current_step))
    return finalize(batch, "pvpo", cfg, turn, diagnostics=diags)
