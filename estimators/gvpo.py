"""GVPO (spec 4.6 and 9; the GVPO paper, ICLR 2026): the Dr.GRPO outcome advantage, reshaped on turns
whose execution failed (``process_ok == 0``)."""

from __future__ import annotations

import numpy as np

from .batch import TrajectoryBatch
from .configs import GVPOConfig
from .outcome import _all_equal_frac, trajectory_advantage
from .registry import register
from .result import AdvantageResult, finalize

__all__ = ["gvpo", "gvpo_shape"]


def gvpo_shape(adv: np.ndarray, process_ok: np.ndarray, b: float = 0.2, shaping: str = "case",
               zeta: float = 1e-8) -> np.ndarray:
    """Per-turn shaping of the trajectory advantage ``adv`` (already broadcast to turns).

    ``process_ok`` 1 (success) or -1 (no execution): unchanged. 0 (failure), ``case``: -b if |A| <= zeta,
    (1 + b) A if A < -zeta, 0 if A > zeta. ``additive``: A - b.
    """
    adv = np.asarray(adv, dtype=np.float64)
    fail = np.asarray(process_ok) == 0
    if shaping == "additive":
        shaped = adv - b
    elif shaping == "case":
        shaped = np.where(np.abs(adv) <= zeta, -b, np.where(adv < -zeta, (1.0 + b) * adv, 0.0))
    else:
        raise ValueError(f"unknown GVPO shaping {shaping!r} (case or additive)")
    return np.where(fail, shaped, adv)


@register("gvpo", GVPOConfig)
def gvpo(batch: TrajectoryBatch, cfg: GVPOConfig) -> AdvantageResult:
    """Spec 4.6: A_hat(tau) = R - mu_p (``std_norm``: / (sigma + 1e-6), ddof=1); failed turns reshaped by
    :func:`gvpo_shape`. No group filter (a group of uniform failures still gets -b on its failed steps)."""
    batch.require(("group_id", "traj_id", "turn_idx", "reward", "process_ok"), "gvpo")
    R = batch.traj_return
    a_traj = trajectory_advantage(R, batch.traj_group, batch.n_groups,
                                  "mean_std_norm" if cfg.std_norm else "mean_norm")
    raw = a_traj[batch.traj_index] if batch.n_turns else np.zeros(0)
    adv = gvpo_shape(raw, batch.process_ok, cfg.b, cfg.shaping, cfg.zeta)
    fail = batch.process_ok == 0
    diags = {
        "frac_fail_steps": float(fail.mean()) if fail.size else 0.0,
        "n_fail_adv_zero": float(np.sum(fail & (np.abs(raw) <= cfg.zeta))),
        "n_fail_adv_neg": float(np.sum(fail & (raw < -cfg.zeta))),
        "n_fail_adv_pos": float(np.sum(fail & (raw > cfg.zeta))),
        "mean_shaped_minus_raw": float((adv - raw).mean()) if adv.size else 0.0,
        "frac_groups_all_equal": _all_equal_frac(R, batch.traj_group, batch.n_groups),
    }
    return finalize(batch, "gvpo", cfg, adv, diagnostics=diags)
