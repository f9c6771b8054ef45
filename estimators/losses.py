"""Policy losses (spec section 6), in torch. torch is imported lazily, inside the functions, so that
``import estimators`` (and even ``import estimators.losses``) never imports it.

* ratios (6.1): ``token`` (PPO), ``sequence`` (GSPO: length-normalized, clamped at 10, stop-gradient form) and
  ``turn`` (A2TGPO: the sequence rule per (row, turn) segment of ``token_turn_idx``);
* the clipped per-token loss (6.2) with asymmetric bounds scaled by a per-token ``clip_scale`` and verl's dual
  clip (on by default for ``token`` ratios only);
* the k3 ``low_var_kl`` term (6.3);
* aggregations (6.4): ``token-mean``, ``seq-mean-token-sum``, ``seq-mean-token-mean``, ``seq-mean-token-sum-norm``
  with ``seq_unit`` "row" or "traj" and global denominators for gradient accumulation;
* the recipes of 6.5 by name (:data:`RECIPES`, :func:`policy_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "PolicyLossConfig",
    "RECIPES",
    "get_recipe",
    "compute_log_ratio",
    "clipped_token_loss",
    "low_var_kl",
    "agg_loss",
    "policy_loss",
]

RATIOS = ("token", "sequence", "turn")
_L_NORM_MISSING = ("agg='seq-mean-token-sum-norm' (Dr.GRPO) needs l_norm, the fixed L_norm of spec 6.4: pass the "
                   "trainer's maximum response length, e.g. get_recipe('dr_grpo', l_norm=max_response_tokens) or "
                   "agg_loss(..., l_norm=max_response_tokens). The batch's padded width is not used, because it "
                   "changes with each batch's longest response.")
AGGS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


@dataclass(frozen=True)
class PolicyLossConfig:
    """One loss setting. ``dual_clip`` is c_dual (None: off); ``None`` for ``dual_clip`` together with
    ``dual_clip_auto=True`` means "3.0 for token ratios, off for sequence/turn" (spec 6.2).

    ``l_norm`` is Dr.GRPO's fixed L_norm for ``agg="seq-mean-token-sum-norm"``. The recipes leave it None because
    it depends on the trainer: the caller sets it to the maximum response length
    (``get_recipe("dr_grpo", l_norm=...)``); computing the loss without it raises ``ValueError``.
    """

    ratio: str = "token"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    dual_clip_auto: bool = True
    agg: str = "token-mean"
    kl_coef: float = 0.0
    seq_unit: str = "row"
    l_norm: int | None = None

    def __post_init__(self) -> None:
        if self.ratio not in RATIOS:
            raise ValueError(f"ratio={self.ratio!r} is not one of {RATIOS}")
        if self.agg not in AGGS:
            raise ValueError(f"agg={self.agg!r} is not one of {AGGS}")
        if self.seq_unit not in ("row", "traj"):
            raise ValueError("seq_unit must be 'row' or 'traj'")
        if self.clip_low < 0 or self.clip_high < 0:
            raise ValueError("clip bounds must be >= 0")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError("dual_clip (c_dual) must be > 1")
        if self.l_norm is not None and not self.l_norm > 0:
            raise ValueError(f"l_norm must be > 0 (the maximum response length), got {self.l_norm!r}")

    @property
    def c_dual(self) -> float | None:
        if self.dual_clip is not None:
            return self.dual_clip
        if self.dual_clip_auto and self.ratio == "token":
            return 3.0
        return None


# spec 6.5. "as base" / "as GRPO" KL entries use verl's GRPO default 0.001.
RECIPES: dict[str, PolicyLossConfig] = {
    "grpo": PolicyLossConfig("token", 0.2, 0.2, agg="seq-mean-token-mean", kl_coef=0.001),
    "dr_grpo": PolicyLossConfig("token", 0.2, 0.2, agg="seq-mean-token-sum-norm", kl_coef=0.0),
    "dapo": PolicyLossConfig("token", 0.2, 0.28, agg="token-mean", kl_coef=0.0),
    "gspo": PolicyLossConfig("sequence", 3e-4, 4e-4, agg="seq-mean-token-mean", kl_coef=0.0),
    "gigpo": PolicyLossConfig("token", 0.2, 0.2, agg="token-mean", kl_coef=0.01),
    "bigpo": PolicyLossConfig("token", 0.2, 0.2, agg="token-mean", kl_coef=0.01),
    "bipace": PolicyLossConfig("token", 0.2, 0.2, agg="token-mean", kl_coef=0.01),
    "a2tgpo": PolicyLossConfig("turn", 3e-3, 4e-3, agg="token-mean", kl_coef=0.001),
    "gvpo": PolicyLossConfig("token", 0.2, 0.28, agg="seq-mean-token-mean", kl_coef=0.0),
    "pvpo": PolicyLossConfig("token", 0.2, 0.2, agg="token-mean", kl_coef=0.001),
    "sgcd": PolicyLossConfig("token", 0.2, 0.2, agg="token-mean", kl_coef=0.0),
}


def get_recipe(name: str, **overrides: Any) -> PolicyLossConfig:
    """The spec 6.5 recipe ``name`` with optional field overrides."""
    try:
        cfg = RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown loss recipe {name!r}; available: {sorted(RECIPES)}") from None
    return replace(cfg, **overrides) if overrides else cfg


def _segments(token_turn_idx: "torch.Tensor", mask: "torch.Tensor") -> tuple["torch.Tensor", int]:
    import torch

    B, L = mask.shape
    tt = torch.where(mask, token_turn_idx.long(), torch.zeros_like(token_turn_idx, dtype=torch.long))
    width = int(tt.max().item()) + 1 if tt.numel() else 1
    seg = torch.arange(B, device=mask.device).unsqueeze(1) * width + tt
    return seg, B * width


def compute_log_ratio(logprob: "torch.Tensor", old_logprob: "torch.Tensor", mask: "torch.Tensor",
                      ratio: str = "token", token_turn_idx: "torch.Tensor | None" = None) -> "torch.Tensor":
    """Spec 6.1: log of the per-token ratio. ``token``: clamp(delta, -20, 20) (verl's ``compute_policy_loss``).
    ``sequence`` (GSPO): l_b = min(masked mean of delta per row, 10), with delta unclamped as in verl's
    ``compute_policy_loss_gspo``, in the stop-gradient form log pi - sg(log pi) + sg(l_b): the forward value is
    l_b on every token, the gradient that of log pi. ``turn``: the same per (row, turn) segment.

    One intentional difference from verl's GSPO, where l_b > 10 only: verl clamps the whole per-token expression
    ``log pi - sg(log pi) + sg(l_b)`` at 10, and ``torch.clamp`` passes no gradient where it clips, so such a row
    gets no gradient at all; here (spec 6.1) the clamp applies to l_b, so the row's ratio is e^10 and its gradient
    e^10 * grad log pi, which the PPO clip then handles like any other ratio above 1 + eps_high (the clipped branch
    is active for A > 0, so the gradient is 0 there as in verl; for A < 0 it flows). Forward values are identical.
    """
    import torch

    mask = mask.bool()
    delta = logprob - old_logprob
    if ratio == "token":
        return torch.clamp(delta, -20.0, 20.0)
    m = mask.to(delta.dtype)
    if ratio == "sequence":
        seq = (delta * m).sum(-1) / m.sum(-1).clamp(min=1.0)
        seq = torch.clamp(seq, max=10.0)
        return logprob - logprob.detach() + seq.detach().unsqueeze(-1)
    if ratio == "turn":
        if token_turn_idx is None:
            raise ValueError("ratio='turn' needs token_turn_idx")
        seg, n_seg = _segments(token_turn_idx, mask)
        flat = seg.reshape(-1)
        sums = torch.zeros(n_seg, dtype=delta.dtype, device=delta.device).index_add_(0, flat, (delta * m).reshape(-1))
        cnts = torch.zeros(n_seg, dtype=delta.dtype, device=delta.device).index_add_(0, flat, m.reshape(-1))
        turn = torch.clamp(sums / cnts.clamp(min=1.0), max=10.0)
        return logprob - logprob.detach() + turn[seg].detach()
    raise ValueError(f"unknown ratio {ratio!r} (token, sequence or turn)")


def clipped_token_loss(log_ratio: "torch.Tensor", advantages: "torch.Tensor", clip_low: float, clip_high: float,
                       clip_scale: "torch.Tensor | None" = None, c_dual: float | None = None
                       ) -> tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
    """Spec 6.2: l = max(-A rho, -A clip(rho, 1 - eps_low k, 1 + eps_high k)); dual clip: for A < 0,
    l = min(l, -c_dual A). Ties keep the unclipped branch, so at rho = 1 the value and gradient do not depend on
    the bounds (I13). Returns (per-token loss, clipped indicator, dual-clip indicator)."""
    import torch

    rho = torch.exp(log_ratio)
    adv = advantages.to(rho.dtype)
    if clip_scale is None:
        lo = torch.full_like(rho, 1.0 - clip_low)
        hi = torch.full_like(rho, 1.0 + clip_high)
    else:
        k = clip_scale.to(rho.dtype)
        lo = 1.0 - clip_low * k
        hi = 1.0 + clip_high * k
    l1 = -adv * rho
    l2 = -adv * torch.minimum(torch.maximum(rho, lo), hi)
    clipped = l2 > l1
    loss = torch.where(clipped, l2, l1)
    lower = torch.zeros_like(clipped)
    if c_dual is not None:
        l3 = -adv * c_dual
        lower = (adv < 0) & (l3 < loss)
        loss = torch.where(lower, l3, loss)
    return loss, clipped, lower


def low_var_kl(logprob: "torch.Tensor", ref_logprob: "torch.Tensor") -> "torch.Tensor":
    """Spec 6.3 k3 estimator: with z = ref - log pi, clamp(e^z - z - 1, -10, 10)."""
    import torch

    z = torch.clamp(ref_logprob - logprob, -20.0, 20.0)
    return torch.clamp(torch.exp(z) - z - 1.0, -10.0, 10.0)


def _seq_index(mask: "torch.Tensor", seq_unit: str, row_traj_id: Any) -> tuple["torch.Tensor", int]:
    import torch

    B = mask.shape[0]
    if seq_unit == "row":
        return torch.arange(B, device=mask.device), B
    if row_traj_id is None:
        raise ValueError("seq_unit='traj' needs row_traj_id")
    rid = torch.as_tensor(row_traj_id, device=mask.device)
    _, inv = torch.unique(rid, return_inverse=True)
    return inv, int(inv.max().item()) + 1 if inv.numel() else 0


def agg_loss(loss: "torch.Tensor", mask: "torch.Tensor", agg: str = "token-mean", *, seq_unit: str = "row",
             row_traj_id: Any = None, l_norm: int | None = None, global_token_count: float | None = None,
             global_seq_count: float | None = None) -> "torch.Tensor":
    """Spec 6.4 aggregation of a per-token loss ``[B, L]`` under ``mask``.

    * ``token-mean``: sum m l / sum m;
    * ``seq-mean-token-sum``: mean over sequences with sum m > 0 of sum_t m l;
    * ``seq-mean-token-mean``: mean over sequences with sum m > 0 of sum_t m l / sum_t m;
    * ``seq-mean-token-sum-norm``: sum m l / (n_seq * L_norm), n_seq counting every sequence and L_norm
      ``l_norm``, a constant the caller must give: the trainer's maximum response length (spec 6.4). Without it
      this raises ``ValueError``; the padded width of the batch (older verl's default) is not used, since it
      moves with each batch's longest response.

    A "sequence" is a token row (``seq_unit="row"``) or a trajectory (``"traj"``, grouping rows by
    ``row_traj_id``). With gradient accumulation pass the mini-batch's ``global_token_count`` /
    ``global_seq_count`` so that micro-batches share one denominator.
    """
    import torch

    m = mask.to(loss.dtype)
    ml = loss * m
    if agg == "token-mean":
        denom = torch.as_tensor(global_token_count if global_token_count is not None else m.sum(),
                                dtype=loss.dtype, device=loss.device)
        return ml.sum() / denom.clamp(min=1.0)
    idx, n_seq = _seq_index(mask, seq_unit, row_traj_id)
    seq_sum = torch.zeros(n_seq, dtype=loss.dtype, device=loss.device).index_add_(0, idx, ml.sum(-1))
    seq_cnt = torch.zeros(n_seq, dtype=loss.dtype, device=loss.device).index_add_(0, idx, m.sum(-1))
    nonempty = seq_cnt > 0
    if agg == "seq-mean-token-sum-norm":
        if l_norm is None:
            raise ValueError(_L_NORM_MISSING)
        width = float(l_norm)
        n = float(global_seq_count) if global_seq_count is not None else float(n_seq)
        return ml.sum() / max(n * width, 1.0)
    if agg == "seq-mean-token-sum":
        per_seq = seq_sum
    elif agg == "seq-mean-token-mean":
        per_seq = seq_sum / seq_cnt.clamp(min=1.0)
    else:
        raise ValueError(f"unknown aggregation {agg!r}; one of {AGGS}")
    n = float(global_seq_count) if global_seq_count is not None else float(nonempty.sum().item())
    return torch.where(nonempty, per_seq, torch.zeros_like(per_seq)).sum() / max(n, 1.0)


def policy_loss(logprob: "torch.Tensor", old_logprob: "torch.Tensor", advantages: "torch.Tensor",
                loss_mask: "torch.Tensor", config: PolicyLossConfig | str = "grpo", *,
                clip_scale: "torch.Tensor | None" = None, token_turn_idx: "torch.Tensor | None" = None,
                ref_logprob: "torch.Tensor | None" = None, row_traj_id: Any = None,
                global_token_count: float | None = None, global_seq_count: float | None = None,
                **overrides: Any) -> tuple["torch.Tensor", dict[str, float]]:
    """The full policy loss: ratio (6.1), clipped per-token loss (6.2), aggregation (6.4) and, when
    ``kl_coef > 0`` and ``ref_logprob`` is given, + kl_coef * agg(k3 KL) (6.3).

    ``config`` is a :class:`PolicyLossConfig` or a recipe name of :data:`RECIPES` (``overrides`` replace fields).
    ``advantages`` is ``AdvantageResult.token_adv`` (SGCD's W folded in), ``clip_scale`` its ``clip_scale``.
    Returns (scalar loss, metrics: pg_loss, clipfrac, clipfrac_lower, ppo_kl, kl).
    """
    import torch

    cfg = get_recipe(config) if isinstance(config, str) else config
    if overrides:
        cfg = replace(cfg, **overrides)
    mask = loss_mask.bool()
    log_ratio = compute_log_ratio(logprob, old_logprob, mask, cfg.ratio, token_turn_idx)
    per_tok, clipped, lower = clipped_token_loss(log_ratio, advantages, cfg.clip_low, cfg.clip_high, clip_scale,
                                                 cfg.c_dual)
    kw = dict(seq_unit=cfg.seq_unit, row_traj_id=row_traj_id, l_norm=cfg.l_norm,
              global_token_count=global_token_count, global_seq_count=global_seq_count)
    pg = agg_loss(per_tok, mask, cfg.agg, **kw)
    total = pg
    m = mask.to(per_tok.dtype)
    n_tok = m.sum().clamp(min=1.0)
    with torch.no_grad():
        delta = (logprob - old_logprob).detach()
        metrics = {
            "pg_loss": float(pg.detach()),
            "clipfrac": float((clipped.to(m.dtype) * m).sum() / n_tok),
            "clipfrac_lower": float((lower.to(m.dtype) * m).sum() / n_tok),
            "ppo_kl": float((-delta * m).sum() / n_tok),
        }
    if cfg.kl_coef > 0 and ref_logprob is not None:
        kl = agg_loss(low_var_kl(logprob, ref_logprob), mask, cfg.agg, **kw)
        total = total + cfg.kl_coef * kl
        metrics["kl"] = float(kl.detach())
    return total, metrics
