"""Trajectory-level baselines (spec section 3): GRPO, Dr.GRPO, RLOO, DAPO's filter and overlong shaping."""

from __future__ import annotations

import numpy as np

from .batch import TrajectoryBatch
from .configs import ConfigError, DAPOConfig, OutcomeConfig
from .primitives import group_normalize
from .registry import register
from .result import AdvantageResult, finalize

__all__ = [
    "trajectory_advantage",
    "mixed_groups",
    "overlong_penalty",
    "grpo",
    "dr_grpo",
    "rloo",
    "dapo",
]


def trajectory_advantage(values: np.ndarray, traj_group: np.ndarray, n_groups: int, mode: str,
                         ddof: int = 1, delta: float = 1e-6, var_eps: float = 0.0,
                         verl_compat: bool = False) -> np.ndarray:
    """Group-normalize one value per trajectory (spec 2.1): returns one float64 advantage per trajectory."""
    return group_normalize(values, traj_group, n_groups, mode=mode, ddof=ddof, delta=delta, var_eps=var_eps,
                           singleton="raw" if verl_compat else "zero")


def mixed_groups(values: np.ndarray, traj_group: np.ndarray, n_groups: int) -> np.ndarray:
    """Spec 2.5 filter: ``keep[p]`` iff the trajectory values of group p are not all equal (sigma_p > 0)."""
    values = np.asarray(values, dtype=np.float64)
    if n_groups == 0:
        return np.zeros(0, dtype=bool)
    gmax = np.full(n_groups, -np.inf)
    gmin = np.full(n_groups, np.inf)
    np.maximum.at(gmax, traj_group, values)
    np.minimum.at(gmin, traj_group, values)
    return gmax > gmin


def _all_equal_frac(values: np.ndarray, traj_group: np.ndarray, n_groups: int) -> float:
    if n_groups == 0:
        return 0.0
    return float(np.mean(~mixed_groups(values, traj_group, n_groups)))


def overlong_penalty(length: np.ndarray, overlong_max: int = 20480, overlong_cache: int = 4096) -> np.ndarray:
    """DAPO soft overlong punishment (spec 3.4): 0 up to L_max - L_cache, then linear down to -1 at L_max,
    -1 beyond."""
    y = np.asarray(length, dtype=np.float64)
    start = overlong_max - overlong_cache
    return np.where(y <= start, 0.0, np.where(y <= overlong_max, (start - y) / overlong_cache, -1.0))


def _outcome(batch: TrajectoryBatch, name: str, mode: str, cfg: OutcomeConfig) -> AdvantageResult:
    batch.require(("group_id", "traj_id", "reward"), name)
    R = batch.traj_return
    if cfg.episode_stats == "per_step":
        # verl-agent: every step row is a member of its group's statistic (and RLOO leaves one row out)
        turn = group_normalize(R[batch.traj_index], batch.group_index, batch.n_groups, mode=mode,
                               singleton="raw" if cfg.verl_compat else "zero")
    else:
        a = trajectory_advantage(R, batch.traj_group, batch.n_groups, mode, verl_compat=cfg.verl_compat)
        turn = a[batch.traj_index]
    diags = {"frac_groups_all_equal": _all_equal_frac(R, batch.traj_group, batch.n_groups)}
    return finalize(batch, name, cfg, turn, diagnostics=diags)


@register("grpo", OutcomeConfig)
def grpo(batch: TrajectoryBatch, cfg: OutcomeConfig) -> AdvantageResult:
    """Spec 3.1: A = (R - mu_p) / (sigma_p + 1e-6), sigma with ddof=1; singleton -> 0 (``verl_compat``: R).
    ``episode_stats="per_step"``: mu and sigma over the group's turn rows (verl-agent)."""
    return _outcome(batch, "grpo", "mean_std_norm", cfg)


@register("dr_grpo", OutcomeConfig)
def dr_grpo(batch: TrajectoryBatch, cfg: OutcomeConfig) -> AdvantageResult:
    """Spec 3.2: A = R - mu_p (pair with ``seq-mean-token-sum-norm``); a singleton group gets 0.

    ``verl_compat`` is rejected: spec 2.1 defines it for GRPO and RLOO only (verl's Dr.GRPO, GRPO with
    ``norm_adv_by_std_in_grpo=False``, would give a singleton its raw reward).
    """
    if cfg.verl_compat:
        raise ConfigError("dr_grpo does not take verl_compat=True: the verl singleton convention (a one-rollout "
                          "group gets its raw reward) is defined for grpo and rloo only (spec 2.1); dr_grpo gives a "
                          "singleton group 0. Use grpo/rloo with verl_compat=True, or leave it False.")
    return _outcome(batch, "dr_grpo", "mean_norm", cfg)


@register("rloo", OutcomeConfig)
def rloo(batch: TrajectoryBatch, cfg: OutcomeConfig) -> AdvantageResult:
    """Spec 3.3: A = R - mean of the other trajectories = G/(G-1) (R - mu_p). ``episode_stats="per_step"``: the
    mean of the other turn rows of the group (verl-agent's RLOO over step rows)."""
    return _outcome(batch, "rloo", "loo", cfg)


@register("dapo", DAPOConfig)
def dapo(batch: TrajectoryBatch, cfg: DAPOConfig) -> AdvantageResult:
    """Spec 3.4: GRPO advantage on R (+ optional overlong penalty), dynamic-sampling filter (spec 2.5) on
    ``success``, optional overlong filtering of truncated trajectories.

    Filtered groups keep their rows with loss mask 0 and advantage 0. Overlong length per trajectory: the longest
    ``response_len_tokens`` among its token rows (with trajectory rows: the row's length; with step rows: the
    longest single response, the one that meets the per-response limit). This choice is ours; the spec's DAPO is
    single-turn.
    """
    need = ["group_id", "traj_id", "reward"]
    if cfg.dynamic_sampling:
        need.append(cfg.filter_on)
    if cfg.overlong_shaping:
        need.append("response_len_tokens")
    if cfg.overlong_filter:
        need.append("truncated")
    batch.require(need, "dapo")
    R = batch.traj_return.copy()
    diags: dict[str, float] = {}
    if cfg.overlong_shaping:
        length = np.zeros(batch.n_trajectories, dtype=np.float64)
        np.maximum.at(length, batch.row_traj_index, batch.response_len_tokens.astype(np.float64))
        pen = overlong_penalty(length, cfg.overlong_max, cfg.overlong_cache)
        R = R + pen
        diags["overlong_penalty_mean"] = float(pen.mean()) if pen.size else 0.0
        diags["frac_traj_overlong"] = float(np.mean(pen < 0)) if pen.size else 0.0
    a = trajectory_advantage(R, batch.traj_group, batch.n_groups, "mean_std_norm", verl_compat=cfg.verl_compat)
    if cfg.dynamic_sampling:
        filt = batch.traj_return if cfg.filter_on == "reward" else batch.traj_value("success").astype(np.float64)
        keep = mixed_groups(filt, batch.traj_group, batch.n_groups)
    else:
        keep = np.ones(batch.n_groups, dtype=bool)
    a = np.where(keep[batch.traj_group], a, 0.0)
    turn = a[batch.traj_index] if batch.n_turns else np.zeros(0)
    extra = None
    if cfg.overlong_filter:
        extra = ~batch.traj_value("truncated")[batch.traj_index]
        diags["frac_traj_truncated"] = float(batch.traj_value("truncated").mean()) if batch.n_trajectories else 0.0
    diags["frac_groups_all_equal"] = _all_equal_frac(R, batch.traj_group, batch.n_groups)
    return finalize(batch, "dapo", cfg, turn, keep_group=keep, extra_turn_mask=extra, diagnostics=diags)
