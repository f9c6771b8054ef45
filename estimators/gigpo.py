"""GiGPO (spec 4.1) and HGPO (spec 4.2, reference only), plus the step-level pieces BiGPO reuses.

All group-bys are one sort plus ``bincount``: cost O(N log N) in the number of turn rows, independent of how many
rows share a state. verl-agent's ``compute_step_discounted_returns`` is O(N^2) (for every row it scans the batch
with ``np.where`` to find its trajectory), and its ``build_step_group`` scans the batch once per group.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .batch import TrajectoryBatch
from .configs import GiGPOConfig, HGPOConfig
from .primitives import discounted_suffix_sum, group_labels, group_normalize, pair_partition
from .registry import register
from .result import AdvantageResult, finalize

__all__ = [
    "penalized_rewards",
    "step_kappa",
    "step_returns",
    "episode_term",
    "step_term",
    "cluster_diagnostics",
    "gigpo",
    "hgpo",
    "hgpo_levels",
]


def penalized_rewards(batch: TrajectoryBatch, kappa_inv: float, estimator: str) -> np.ndarray:
    """Spec 2.2: r' = r - kappa_inv * (1 - valid_action) (float64, batch row order)."""
    r = batch.reward.astype(np.float64)
    if kappa_inv > 0:
        batch.require(("valid_action",), estimator)
        r = r - kappa_inv * (~batch.valid_action).astype(np.float64)
    return r


def step_kappa(cfg: GiGPOConfig) -> float:
    """The penalty that reaches the step returns: kappa_inv, or 0 with ``penalty_in_step_returns="none"``
    (verl-agent computes the returns before it applies the penalty; spec 2.2)."""
    return 0.0 if cfg.penalty_in_step_returns == "none" else cfg.invalid_action_penalty


def step_returns(batch: TrajectoryBatch, gamma: float, kappa_inv: float, estimator: str) -> np.ndarray:
    """Spec 2.3 return-to-go of the penalized rewards, in batch row order (float64)."""
    r = penalized_rewards(batch, kappa_inv, estimator)
    order = batch.canonical_order
    rc = discounted_suffix_sum(r[order], batch.traj_start, batch.traj_len, gamma)
    out = np.empty_like(rc)
    out[order] = rc
    return out


def _normalize_with_stats(row_values: np.ndarray, row_labels: np.ndarray, stat_values: np.ndarray,
                          stat_labels: np.ndarray, n_labels: int, mode: str, ddof: int, delta: float,
                          var_eps: float = 0.0, singleton: Literal["zero", "raw"] = "zero") -> np.ndarray:
    """Normalize ``row_values`` with the mean/std of ``stat_values`` taken per label (singleton stats -> 0, or
    the raw row value with ``singleton="raw"``, as in :func:`group_normalize`)."""
    counts = np.bincount(stat_labels, minlength=n_labels).astype(np.float64)
    ref = np.zeros(n_labels)
    ref[stat_labels[::-1]] = stat_values[::-1]
    ys = stat_values - ref[stat_labels]
    mean_y = np.bincount(stat_labels, weights=ys, minlength=n_labels) / np.maximum(counts, 1.0)
    dev_s = ys - mean_y[stat_labels]
    dev = (row_values - ref[row_labels]) - mean_y[row_labels]
    if mode == "mean_norm":
        out = dev
    else:
        var = np.bincount(stat_labels, weights=dev_s * dev_s, minlength=n_labels) / np.maximum(counts - ddof, 1.0)
        out = dev / (np.sqrt(var + var_eps)[row_labels] + delta)
    if singleton == "raw":  # verl-agent: mean 0, std 1 -> (x - 0) / (1 + delta) under mean_std_norm
        single = row_values if mode == "mean_norm" else row_values / (1.0 + delta)
        return np.where(counts[row_labels] <= 1, single, out)
    return np.where(counts[row_labels] <= 1, 0.0, out)


def episode_term(batch: TrajectoryBatch, cfg: GiGPOConfig, estimator: str, ddof: int = 1) -> np.ndarray:
    """Spec 4.1 step 1: A_ep per turn row (float64). ``episode_stats="per_traj"``: one value per trajectory;
    ``"per_step"``: every step row counts once (verl-agent's ``compute_mean_std_cross_steps=True``).
    ``penalty_in_episode_term="per_row"`` reproduces verl-agent's per-row penalized episode score (spec 2.2);
    ``episode_singleton="raw"`` gives a one-member statistic the raw score (verl-agent's mean 0, std 1)."""
    if batch.n_turns == 0:
        return np.zeros(0)
    R_rows = batch.traj_return[batch.traj_index]
    if cfg.penalty_in_episode_term == "per_row" and cfg.invalid_action_penalty > 0:
        batch.require(("valid_action",), estimator)
        score = R_rows - cfg.invalid_action_penalty * (~batch.valid_action).astype(np.float64)
    else:
        score = R_rows
    if cfg.episode_stats == "per_step":
        return _normalize_with_stats(score, batch.group_index, score, batch.group_index, batch.n_groups,
                                     cfg.mode, ddof, 1e-6, singleton=cfg.episode_singleton)
    # per trajectory: the statistic uses one score per trajectory (its first row, as verl-agent dedupes)
    first_rows = batch.canonical_order[batch.traj_start]
    return _normalize_with_stats(score, batch.group_index, score[first_rows], batch.traj_group, batch.n_groups,
                                 cfg.mode, ddof, 1e-6, singleton=cfg.episode_singleton)


def step_term(returns: np.ndarray, cluster: np.ndarray, n_clusters: int, mode: str, ddof: int = 1,
              delta: float = 1e-6) -> np.ndarray:
    """Spec 4.1 step 3: norm of the returns-to-go within each step cluster; singletons give 0."""
    return group_normalize(returns, cluster, n_clusters, mode=mode, ddof=ddof, delta=delta, singleton="zero")


def cluster_diagnostics(cluster: np.ndarray, n_clusters: int) -> dict[str, float]:
    """Spec 4.1 diagnostics of a partition: counts, singleton fractions (cluster and record senses), matched-pair
    volume sum_C n_C (n_C - 1) / 2 and a histogram of cluster sizes 1..8+."""
    sizes = np.bincount(cluster, minlength=n_clusters).astype(np.float64) if n_clusters else np.zeros(0)
    n_rec = float(sizes.sum())
    d = {
        "n_step_clusters": float(n_clusters),
        "mean_cluster_size": float(sizes.mean()) if n_clusters else 0.0,
        "singleton_cluster_frac": float(np.mean(sizes == 1)) if n_clusters else 0.0,
        "singleton_record_frac": float(sizes[sizes == 1].sum() / n_rec) if n_rec else 0.0,
        "matched_pair_volume": float(np.sum(sizes * (sizes - 1) / 2)),
    }
    for k in range(1, 8):
        d[f"cluster_size_hist_{k}"] = float(np.sum(sizes == k))
    d["cluster_size_hist_8plus"] = float(np.sum(sizes >= 8))
    return d


@register("gigpo", GiGPOConfig)
def gigpo(batch: TrajectoryBatch, cfg: GiGPOConfig) -> AdvantageResult:
    """Spec 4.1: A(i) = A_ep(tau(i)) + w * norm({R_j : j in C(i)}), C(i) = rows of the group with the same
    ``obs_hash`` (any depth, any trajectory), R = discounted return-to-go of the penalized rewards (of the env
    rewards with ``penalty_in_step_returns="none"``). :meth:`GiGPOConfig.verl_agent` reproduces verl-agent."""
    batch.require(("group_id", "traj_id", "turn_idx", "reward", "obs_hash"), "gigpo")
    if cfg.invalid_action_penalty > 0:
        batch.require(("valid_action",), "gigpo")
    ret = step_returns(batch, cfg.gamma, step_kappa(cfg), "gigpo")
    a_ep = episode_term(batch, cfg, "gigpo")
    cluster, n_c = pair_partition(batch.group_index, batch.n_groups, batch.obs_hash)
    a_st = step_term(ret, cluster, n_c, cfg.mode)
    adv = a_ep + cfg.step_advantage_w * a_st
    diags = cluster_diagnostics(cluster, n_c)
    diags["step_adv_std"] = float(a_st.std()) if a_st.size else 0.0
    diags["episode_adv_std"] = float(a_ep.std()) if a_ep.size else 0.0
    return finalize(batch, "gigpo", cfg, adv, diagnostics=diags)


def hgpo_levels(batch: TrajectoryBatch, history_length: int) -> list[tuple[np.ndarray, int]]:
    """Spec 4.2 groups G_k, k = 1..K+1: rows of one group whose last k anchor observations (current included)
    are equal. A history shorter than k counts as its own value ("no observation"), so two turn-0 rows with the
    same observation share every level. Labels are exact (no hash combination, no collisions)."""
    n = batch.n_turns
    order = batch.canonical_order
    pos = batch.canonical_pos
    turn = batch.turn_idx.astype(np.int64)
    h_c = batch.obs_hash[order]
    levels: list[tuple[np.ndarray, int]] = []
    lab, n_lab = group_labels(batch.group_index, batch.obs_hash)
    levels.append((lab, n_lab))
    for j in range(1, history_length + 1):
        exists = turn >= j
        prev = np.where(exists, h_c[np.maximum(pos - j, 0)] if n else np.zeros(0, np.int64), 0)
        lab, n_lab = group_labels(lab, exists.astype(np.int64), prev)
        levels.append((lab, n_lab))
    return levels


@register("hgpo", HGPOConfig)
def hgpo(batch: TrajectoryBatch, cfg: HGPOConfig) -> AdvantageResult:
    """Spec 4.2 (reference only): A(i) = sum_k w_k a_k(i) / sum_{k: a_k(i) != 0} w_k with w_k = (k+1)^alpha,
    a_k = norm of the returns-to-go over G_k (population std), k = 1..K+1, plus the optional base level k = 0
    (the episode advantage, population std)."""
    batch.require(("group_id", "traj_id", "turn_idx", "reward", "obs_hash"), "hgpo")
    ret = step_returns(batch, cfg.gamma, step_kappa(cfg), "hgpo")
    num = np.zeros(batch.n_turns)
    den = np.zeros(batch.n_turns)
    diags: dict[str, float] = {}
    if cfg.base_level and batch.n_turns:
        a0 = episode_term(batch, cfg, "hgpo", ddof=0)
        nz = a0 != 0
        num += np.where(nz, a0, 0.0)
        den += nz * 1.0
    for k, (lab, n_lab) in enumerate(hgpo_levels(batch, cfg.history_length), start=1):
        a_k = group_normalize(ret, lab, n_lab, mode=cfg.mode, ddof=0, delta=1e-6, singleton="zero")
        w = float((k + 1) ** cfg.alpha)
        nz = a_k != 0
        num += np.where(nz, w * a_k, 0.0)
        den += nz * w
        sizes = np.bincount(lab, minlength=n_lab) if n_lab else np.zeros(0)
        diags[f"level{k}_n_groups"] = float(n_lab)
        diags[f"level{k}_nonsingleton_record_frac"] = float(np.mean(sizes[lab] > 1)) if lab.size else 0.0
    adv = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return finalize(batch, "hgpo", cfg, adv, diagnostics=diags)
