"""IGPO (baseline) and A2TGPO (spec 4.5 and 9; the A²TGPO paper, Sec. 4).

Turn roles: a row is *final* when ``done`` is true or ``is_final_answer`` is true; every other row is a
*process* (tool-call) turn and must carry a finite ``info_gain``. A truncated trajectory's last row is final
(its IG is ignored; its outcome is the reward it received). The outcome is R(tau) = sum of rewards.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .batch import BatchValidationError, TrajectoryBatch
from .configs import A2TGPOConfig, IGPOConfig
from .outcome import trajectory_advantage
from .primitives import discounted_suffix_sum, group_labels, group_normalize
from .registry import register
from .result import AdvantageResult, finalize

__all__ = ["a2tgpo", "igpo", "a2tgpo_components", "turn_group_normalize", "clip_scale_from_ig"]

_VAR_EPS = 1e-8
_DELTA = 1e-6
_MAX_DEPTH_DIAG = 10


def clip_scale_from_ig(ig_norm: np.ndarray, clip_lambda: float) -> np.ndarray:
    """kappa = 1 + lambda (2 sigmoid(I) - 1) = 1 + lambda tanh(I/2): in [1-lambda, 1+lambda], 1 at I = 0."""
    return 1.0 + clip_lambda * np.tanh(0.5 * np.asarray(ig_norm, dtype=np.float64))


def turn_group_normalize(ig: np.ndarray, group: np.ndarray, ordinal: np.ndarray) -> np.ndarray:
    """A2TGPO step 1: z-score of IG within (prompt group, process-turn ordinal) groups, population std,
    sigma = sqrt(var + 1e-8) + 1e-6; groups with fewer than 2 members give 0."""
    lab, n_lab = group_labels(np.asarray(group), np.asarray(ordinal))
    return group_normalize(ig, lab, n_lab, mode="mean_std_norm", ddof=0, delta=_DELTA, var_eps=_VAR_EPS)


def _roles(batch: TrajectoryBatch, name: str) -> tuple[np.ndarray, np.ndarray]:
    final = batch.done.copy()
    if batch.has("is_final_answer"):
        final |= batch.is_final_answer
    process = ~final
    ig = batch.info_gain.astype(np.float64)
    bad = process & ~np.isfinite(ig)
    if bad.any():
        raise BatchValidationError("info_gain", f"{name}: NaN information gain on a process (non-final) turn",
                                   np.flatnonzero(bad))
    return final, process


def a2tgpo_components(batch: TrajectoryBatch, cfg: A2TGPOConfig, name: str = "a2tgpo") -> dict[str, Any]:
    """The pieces of spec 4.5 per turn row (float64): ``process`` (bool), and for ``turn_group``: ``ordinal``,
    ``ig_norm`` (I~), ``outcome_adv`` (per trajectory), ``D``; for ``joint``: ``r_tilde``; always ``adv``,
    ``kappa`` and ``diagnostics``."""
    batch.require(("group_id", "traj_id", "turn_idx", "reward", "info_gain"), name)
    n = batch.n_turns
    if n == 0:
        return {"adv": np.zeros(0), "kappa": np.zeros(0), "process": np.zeros(0, dtype=bool), "diagnostics": {}}
    final, process = _roles(batch, name)
    parts: dict[str, Any] = {"process": process}
    order = batch.canonical_order
    ig = np.where(process, batch.info_gain.astype(np.float64), 0.0)
    R = batch.traj_return
    diags: dict[str, float] = {}
    if cfg.norm_mode == "turn_group":
        # ordinal e of each process turn within its trajectory (1..n_tau)
        proc_c = process[order].astype(np.int64)
        cs = np.cumsum(proc_c)
        before = (cs - proc_c)[batch.traj_start]  # process turns before each trajectory starts
        e_c = cs - before[batch.traj_index[order]]
        ordinal = np.empty(n, dtype=np.int64)
        ordinal[order] = e_c
        p_rows = np.flatnonzero(process)
        ig_norm = np.zeros(n)
        lab, n_lab = group_labels(batch.group_index[p_rows], ordinal[p_rows])
        ig_norm[p_rows] = group_normalize(ig[p_rows], lab, n_lab, mode="mean_std_norm", ddof=0, delta=_DELTA,
                                          var_eps=_VAR_EPS)
        a_out = trajectory_advantage(R, batch.traj_group, batch.n_groups, "mean_std_norm", ddof=0, delta=_DELTA,
                                     var_eps=_VAR_EPS)
        # variance-rescaled accumulation over the process turns of each trajectory (compressed canonical layout)
        p_canon = order[process[order]]  # process rows in canonical order
        n_proc = np.bincount(batch.traj_index[p_canon], minlength=batch.n_trajectories)
        tp = batch.traj_index[p_canon]
        starts = np.flatnonzero(np.r_[True, tp[1:] != tp[:-1]]) if tp.size else np.zeros(0, dtype=np.int64)
        acc = discounted_suffix_sum(ig_norm[p_canon], starts, np.diff(np.r_[starts, tp.size]), cfg.gamma)
        remaining = n_proc[batch.traj_index[p_canon]] - ordinal[p_canon] + 1  # n - e + 1
        D = np.zeros(n)
        D[p_canon] = acc / np.sqrt(remaining)
        adv = a_out[batch.traj_index] + np.where(process, cfg.alpha * D, 0.0)
        kappa = np.where(process, clip_scale_from_ig(ig_norm, cfg.clip_lambda), 1.0)
        sizes = np.bincount(lab, minlength=n_lab) if n_lab else np.zeros(0, dtype=np.int64)
        diags["ig_group_size_mean"] = float(sizes.mean()) if n_lab else 0.0
        diags["frac_process_turns_singleton_group"] = float(np.mean(sizes[lab] < 2)) if lab.size else 0.0
        for e in range(1, _MAX_DEPTH_DIAG + 1):
            at = ordinal[p_rows] == e
            if not at.any():
                break
            diags[f"ig_group_size_e{e}"] = float(sizes[lab[at]].mean())
            diags[f"D_std_e{e}"] = float(D[p_rows][at].std())
        diags["outcome_adv_std"] = float(a_out.std()) if a_out.size else 0.0
        parts.update(ordinal=ordinal, ig_norm=ig_norm, outcome_adv=a_out, D=D)
    else:
        # IGPO: per-turn rewards (IG on process turns, the outcome on the trajectory's last turn) pooled over the
        # prompt group and z-normalized together, then accumulated backward over every turn
        r_tilde = np.zeros(n)
        pooled = process | batch.done
        values = np.where(process, ig, R[batch.traj_index])
        rows = np.flatnonzero(pooled)
        r_tilde[rows] = group_normalize(values[rows], batch.group_index[rows], batch.n_groups,
                                        mode="mean_std_norm", ddof=0, delta=_DELTA, var_eps=_VAR_EPS)
        acc_c = discounted_suffix_sum(r_tilde[order], batch.traj_start, batch.traj_len, cfg.gamma)
        acc = np.empty(n)
        acc[order] = acc_c
        adv = cfg.alpha * acc
        kappa = np.where(process, clip_scale_from_ig(r_tilde, cfg.clip_lambda), 1.0)
        parts.update(r_tilde=r_tilde)
    n_proc_traj = np.bincount(batch.traj_index, weights=process.astype(np.float64), minlength=batch.n_trajectories)
    diags["n_process_turns_mean"] = float(n_proc_traj.mean())
    parts.update(adv=adv, kappa=kappa, diagnostics=diags)
    return parts


def _compute(batch: TrajectoryBatch, cfg: A2TGPOConfig, name: str) -> AdvantageResult:
    parts = a2tgpo_components(batch, cfg, name)
    kappa = parts["kappa"]
    res = finalize(batch, name, cfg, parts["adv"], turn_clip_scale=kappa, diagnostics=parts["diagnostics"])
    ks = res.clip_scale[batch.response_mask] if res.clip_scale is not None else kappa
    if ks.size:
        res.diagnostics.update(clip_scale_mean=float(ks.mean()), clip_scale_std=float(ks.std()),
                               clip_scale_min=float(ks.min()), clip_scale_max=float(ks.max()))
    return res


@register("a2tgpo", A2TGPOConfig)
def a2tgpo(batch: TrajectoryBatch, cfg: A2TGPOConfig) -> AdvantageResult:
    """Spec 4.5 (``norm_mode="turn_group"``): A(tau, e) = alpha * D_e + A_out(tau) on process turns, A_out on the
    final turn; D_e = sum_{m>=e} gamma^(m-e) I~_m / sqrt(n - e + 1); clip scale kappa = 1 + lambda(2 sigmoid(I~)-1)
    on process turns, 1 on the final turn (returned as ``clip_scale``)."""
    return _compute(batch, cfg, "a2tgpo")


@register("igpo", IGPOConfig)
def igpo(batch: TrajectoryBatch, cfg: IGPOConfig) -> AdvantageResult:
    """Spec 4.5 (``norm_mode="joint"``): IG of process turns and the outcome of the last turn, z-normalized
    together over the prompt group, accumulated backward: A_k = alpha * sum_{m>=k} gamma^(m-k) r~_m
    (alpha = 1 and clip_lambda = 0 by default: plain IGPO)."""
    return _compute(batch, cfg, "igpo")
