"""`AdvantageResult` (spec 2.6) and the helper every estimator uses to build it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .batch import TrajectoryBatch
from .primitives import broadcast_to_tokens

__all__ = ["AdvantageResult", "finalize"]


@dataclass
class AdvantageResult:
    """Output contract of every estimator (spec 2.6).

    * ``turn_adv`` ``[N_turn]`` float32, in the batch's row order (for token-level estimators: the per-turn base
      before weighting).
    * ``token_adv`` ``[B, L]`` float32 after broadcast and token weighting, exactly 0 off ``response_mask``;
      ``None`` without a token table.
    * ``clip_scale`` ``[B, L]`` or None: per-token multiplier kappa on the clip bounds (A2TGPO); 1 off the mask.
    * ``token_weight`` ``[B, L]`` or None: SGCD's W (already folded into ``token_adv``), for logging.
    * ``loss_mask`` ``[B, L]`` bool: ``response_mask`` AND kept groups AND the estimator's own filters.
    * ``turn_mask`` ``[N_turn]`` bool: the same mask at turn level (usable without a token table).
    * ``keep_group`` ``[n_groups]`` bool, groups in order of first appearance (``group_ids`` gives their ids).
    * ``diagnostics``: scalar metrics (spec: those listed under each estimator plus the common ones).
    """

    turn_adv: np.ndarray
    token_adv: np.ndarray | None
    loss_mask: np.ndarray | None
    turn_mask: np.ndarray
    keep_group: np.ndarray
    group_ids: np.ndarray
    diagnostics: dict[str, float] = field(default_factory=dict)
    clip_scale: np.ndarray | None = None
    token_weight: np.ndarray | None = None
    turn_clip_scale: np.ndarray | None = None
    estimator: str = ""
    config: Any = None


def _common_diagnostics(values: np.ndarray, n_groups: int, n_filtered: int) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return dict(adv_mean=0.0, adv_std=0.0, adv_absmax=0.0, frac_zero_adv_tokens=0.0,
                    n_groups=float(n_groups), n_groups_filtered=float(n_filtered))
    return dict(
        adv_mean=float(v.mean()),
        adv_std=float(v.std()),
        adv_absmax=float(np.abs(v).max()),
        frac_zero_adv_tokens=float(np.mean(v == 0.0)),
        n_groups=float(n_groups),
        n_groups_filtered=float(n_filtered),
    )


def finalize(
    batch: TrajectoryBatch,
    name: str,
    config: Any,
    turn_adv: np.ndarray,
    *,
    keep_group: np.ndarray | None = None,
    turn_clip_scale: np.ndarray | None = None,
    token_weight: np.ndarray | None = None,
    extra_turn_mask: np.ndarray | None = None,
    diagnostics: dict[str, float] | None = None,
) -> AdvantageResult:
    """Broadcast turn values to tokens, build the masks and the common diagnostics, assert finiteness."""
    turn_adv = np.asarray(turn_adv, dtype=np.float64)
    if not np.all(np.isfinite(turn_adv)):
        bad = np.flatnonzero(~np.isfinite(turn_adv))
        raise FloatingPointError(f"estimator {name!r} produced non-finite advantages at turn rows {bad[:10].tolist()}")
    if keep_group is None:
        keep_group = np.ones(batch.n_groups, dtype=bool)
    turn_mask = keep_group[batch.group_index] if batch.n_turns else np.zeros(0, dtype=bool)
    if extra_turn_mask is not None:
        turn_mask = turn_mask & extra_turn_mask
    out_turn = turn_adv.astype(np.float32)
    token_adv = loss_mask = clip_scale = None
    if batch.has_tokens:
        mask = batch.response_mask
        token_adv64 = broadcast_to_tokens(batch.token_row, turn_adv, dtype=np.float64)
        if token_weight is not None:
            token_weight = np.where(mask, token_weight, 1.0).astype(np.float32)
            token_adv64 = token_adv64 * token_weight
        token_adv = np.where(mask, token_adv64, 0.0).astype(np.float32)
        row_keep = turn_mask[np.maximum(batch.token_row, 0)] if batch.n_turns else np.zeros(mask.shape, bool)
        loss_mask = mask & row_keep
        if turn_clip_scale is not None:
            clip_scale = broadcast_to_tokens(batch.token_row, turn_clip_scale, fill=1.0)
        diag_values = token_adv[mask]
    else:
        diag_values = out_turn
    diags = _common_diagnostics(diag_values, batch.n_groups, int((~keep_group).sum()))
    if diagnostics:
        diags.update({k: float(v) for k, v in diagnostics.items()})
    return AdvantageResult(
        turn_adv=out_turn,
        token_adv=token_adv,
        loss_mask=loss_mask,
        turn_mask=turn_mask,
        keep_group=keep_group,
        group_ids=batch.group_ids,
        diagnostics=diags,
        clip_scale=clip_scale,
        token_weight=token_weight,
        turn_clip_scale=None if turn_clip_scale is None else np.asarray(turn_clip_scale, dtype=np.float32),
        estimator=name,
        config=config,
    )
