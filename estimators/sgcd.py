"""SGCD (spec 4.8 and 9; the SGCD paper, arXiv 2606.12634): the GRPO advantage weighted per token by a
detached teacher/student divergence on a local support, with entropy-bounded segments.

* :func:`support_divergence`: d_t and the teacher entropy H_t over teacher top-K + {y_t} + one tail atom.
* :func:`segment_scores`: the per-response min-max normalization and the onset/entropy segmenter -> s_t.
* :func:`sgcd_weights`: W_t = clip(1 + gamma_s s_t, 1, c).
"""

from __future__ import annotations

import numpy as np

from .batch import TrajectoryBatch
from .configs import SGCDConfig
from .outcome import mixed_groups, trajectory_advantage
from .primitives import group_labels
from .registry import register
from .result import AdvantageResult, finalize

__all__ = ["support_divergence", "segment_scores", "sgcd_weights", "sgcd"]

_TAIL_FLOOR = 1e-12
_CHUNK = 1 << 15


def _kl(lp_a: np.ndarray, lp_b: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """sum over atoms of P_a (log P_a - log P_b); ``valid`` masks atoms out."""
    pa = np.exp(lp_a)
    return np.sum(np.where(valid, pa * (lp_a - lp_b), 0.0), axis=-1)


def support_divergence(teacher_topk_logprob: np.ndarray, student_logprob_on_teacher_topk: np.ndarray,
                       teacher_logprob_obs: np.ndarray, student_logprob_obs: np.ndarray, obs_in_topk: np.ndarray,
                       divergence: str = "rkl") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Spec 4.8 step 2 for a flat set of tokens (``[n, K]`` top-K arrays, ``[n]`` the rest), float64.

    Atoms: the teacher's top-K ids, the sampled token when it is not among them, and a tail atom with
    P_m(tail) = max(1 - sum of the other atoms, 1e-12). ``rkl``: KL(P_student || P_teacher) (the paper's
    "reverse KL"); ``fkl``: KL(P_teacher || P_student); ``jsd``: Jensen-Shannon. Returns (d, H_teacher,
    teacher tail mass, student tail mass).
    """
    tk = np.asarray(teacher_topk_logprob, dtype=np.float64)
    sk = np.asarray(student_logprob_on_teacher_topk, dtype=np.float64)
    extra = ~np.asarray(obs_in_topk, dtype=bool)
    to = np.asarray(teacher_logprob_obs, dtype=np.float64)
    so = np.asarray(student_logprob_obs, dtype=np.float64)
    mass_t = np.exp(tk).sum(-1) + np.where(extra, np.exp(to), 0.0)
    mass_s = np.exp(sk).sum(-1) + np.where(extra, np.exp(so), 0.0)
    tail_t = np.maximum(1.0 - mass_t, _TAIL_FLOOR)
    tail_s = np.maximum(1.0 - mass_s, _TAIL_FLOOR)
    # all atoms as [n, K + 2]: top-K, the sampled token (masked when inside the top-K), the tail
    lt = np.concatenate([tk, to[:, None], np.log(tail_t)[:, None]], axis=1)
    ls = np.concatenate([sk, so[:, None], np.log(tail_s)[:, None]], axis=1)
    valid = np.ones(lt.shape, dtype=bool)
    valid[:, -2] = extra
    if divergence == "rkl":
        d = _kl(ls, lt, valid)
    elif divergence == "fkl":
        d = _kl(lt, ls, valid)
    elif divergence == "jsd":
        pm = 0.5 * (np.exp(lt) + np.exp(ls))
        lm = np.log(np.maximum(pm, 1e-300))
        d = 0.5 * _kl(ls, lm, valid) + 0.5 * _kl(lt, lm, valid)
    else:
        raise ValueError(f"unknown divergence {divergence!r} (rkl, fkl or jsd)")
    pt = np.exp(lt)
    H = -np.sum(np.where(valid, pt * lt, 0.0), axis=-1)
    return d, H, tail_t, tail_s


def segment_scores(d: np.ndarray, H: np.ndarray, unit: np.ndarray, position: np.ndarray, onset: float = 0.1,
                   entropy_ratio: float = 1.5) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Spec 4.8 step 3 over flat tokens grouped in responses (``unit``), ordered by ``position`` within each.

    d~ = (d - min d)/(max d - min d + 1e-8) per response. Scanning left to right, a token with d~ > ``onset``
    opens a segment at onset o; it covers o and the following tokens while H_t <= ratio * H_o; the first token
    with H_t > ratio * H_o ends it and the scan resumes at that token (which may open a new segment). Segment
    tokens get s = d~_o, others s = d~_t. Vectorised across responses: the loop runs over positions only.

    Returns (s, d~, diagnostics).
    """
    d = np.asarray(d, dtype=np.float64)
    H = np.asarray(H, dtype=np.float64)
    n = d.size
    if n == 0:
        return np.zeros(0), np.zeros(0), {"n_segments_per_response": 0.0, "mean_segment_length": 0.0,
                                          "frac_tokens_in_segments": 0.0, "frac_responses_all_d_zero": 0.0}
    u, n_u = group_labels(np.asarray(unit))
    dmin = np.full(n_u, np.inf)
    dmax = np.full(n_u, -np.inf)
    np.minimum.at(dmin, u, d)
    np.maximum.at(dmax, u, d)
    dn = (d - dmin[u]) / (dmax[u] - dmin[u] + 1e-8)
    # rank within unit by position
    order = np.lexsort((np.asarray(position), u))
    us = u[order]
    starts = np.flatnonzero(np.r_[True, us[1:] != us[:-1]])
    lens = np.diff(np.r_[starts, n])
    rank_sorted = np.arange(n) - np.repeat(starts, lens)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = rank_sorted
    max_len = int(lens.max())
    DD = np.zeros((n_u, max_len))
    HHm = np.zeros((n_u, max_len))
    DD[u, rank] = dn
    HHm[u, rank] = H
    VALID = np.zeros((n_u, max_len), dtype=bool)
    VALID[u, rank] = True
    S = np.zeros((n_u, max_len))
    IN = np.zeros((n_u, max_len), dtype=bool)
    OPEN = np.zeros((n_u, max_len), dtype=bool)
    in_seg = np.zeros(n_u, dtype=bool)
    onset_val = np.zeros(n_u)
    h_onset = np.zeros(n_u)
    for p in range(max_len):
        dp = DD[:, p]
        in_seg &= HHm[:, p] <= entropy_ratio * h_onset  # the segment goes on while H_t <= ratio * H_o
        new = ~in_seg & (dp > onset) & VALID[:, p]      # the scan resumes here and may open a new segment
        onset_val = np.where(new, dp, onset_val)
        h_onset = np.where(new, HHm[:, p], h_onset)
        in_seg |= new
        S[:, p] = np.where(in_seg, onset_val, dp)
        IN[:, p] = in_seg
        OPEN[:, p] = new
    s = S[u, rank]
    in_tok = IN[u, rank]
    is_onset = OPEN[u, rank]
    n_segments = np.bincount(u, weights=is_onset.astype(np.float64), minlength=n_u)
    all_zero = np.bincount(u, weights=(dn != 0).astype(np.float64), minlength=n_u) == 0
    diags = {
        "n_segments_per_response": float(n_segments.mean()),
        "mean_segment_length": float(in_tok.sum() / n_segments.sum()) if n_segments.sum() else 0.0,
        "frac_tokens_in_segments": float(in_tok.mean()),
        "frac_responses_all_d_zero": float(all_zero.mean()),
    }
    return s, dn, diags


def sgcd_weights(s: np.ndarray, gamma_s: float = 1.0, c: float = 2.0) -> np.ndarray:
    """Spec 4.8 step 4: W = clip(1 + gamma_s * s, 1, c)."""
    return np.clip(1.0 + gamma_s * np.asarray(s, dtype=np.float64), 1.0, c)


@register("sgcd", SGCDConfig)
def sgcd(batch: TrajectoryBatch, cfg: SGCDConfig) -> AdvantageResult:
    """Spec 4.8: token advantage A_i * W_t with A_i the GRPO advantage (ddof=1, delta=1e-6) on mixed groups
    (spec 2.5; others get loss mask 0 and W = 1), W from the detached support divergence and the segmenter.
    Segmentation unit: one assistant response = one (token row, turn) pair. ``credit_mask`` tokens get s = 0.
    The top-K arrays may hold more than ``top_k`` entries (the first ``top_k`` are used; ``obs_in_topk`` must
    then refer to those)."""
    batch.require(("group_id", "traj_id", "turn_idx", "reward", "response_mask", "teacher_topk_logprob",
                   "student_logprob_on_teacher_topk", "teacher_logprob_obs", "student_logprob_obs", "obs_in_topk"),
                  "sgcd")
    K = batch.teacher_topk_logprob.shape[-1]
    if K < cfg.top_k:
        raise ValueError(f"sgcd: top_k={cfg.top_k} but the teacher arrays hold only K={K} entries")
    R = batch.traj_return
    keep = mixed_groups(R, batch.traj_group, batch.n_groups)
    a = trajectory_advantage(R, batch.traj_group, batch.n_groups, "mean_std_norm")
    a = np.where(keep[batch.traj_group], a, 0.0) if a.size else a
    turn = a[batch.traj_index] if batch.n_turns else np.zeros(0)
    mask = batch.response_mask
    bi, li = np.nonzero(mask)
    n_tok = bi.size
    d = np.zeros(n_tok)
    H = np.zeros(n_tok)
    tail = np.zeros(n_tok)
    for s0 in range(0, n_tok, _CHUNK):
        sl = slice(s0, s0 + _CHUNK)
        b_, l_ = bi[sl], li[sl]
        d[sl], H[sl], tail[sl], _ = support_divergence(
            batch.teacher_topk_logprob[b_, l_, :cfg.top_k], batch.student_logprob_on_teacher_topk[b_, l_, :cfg.top_k],
            batch.teacher_logprob_obs[b_, l_], batch.student_logprob_obs[b_, l_], batch.obs_in_topk[b_, l_],
            cfg.divergence)
    unit = bi.astype(np.int64) * (int(batch.token_turn_idx.max(initial=0)) + 1) + batch.token_turn_idx[bi, li]
    s, dn, seg_diag = segment_scores(d, H, unit, li, cfg.onset, cfg.entropy_ratio)
    if batch.has("credit_mask"):
        s = np.where(batch.credit_mask[bi, li], 0.0, s)
    w_tok = sgcd_weights(s, cfg.gamma_s, cfg.c)
    tok_group_keep = keep[batch.group_index[batch.token_row[bi, li]]] if n_tok else np.zeros(0, dtype=bool)
    w_tok = np.where(tok_group_keep, w_tok, 1.0)
    W = np.ones(mask.shape, dtype=np.float64)
    W[bi, li] = w_tok
    diags = dict(seg_diag)
    if n_tok:
        diags.update(
            W_mean=float(w_tok.mean()), W_std=float(w_tok.std()), W_p50=float(np.percentile(w_tok, 50)),
            W_p90=float(np.percentile(w_tok, 90)), W_max=float(w_tok.max()),
            frac_tokens_W_gt1=float(np.mean(w_tok > 1.0)), frac_tokens_W_at_c=float(np.mean(w_tok >= cfg.c)),
            d_mean=float(d.mean()), d_max=float(d.max()), H_mean=float(H.mean()), tail_mass_mean=float(tail.mean()),
        )
    # response tokens whose turn index is -1 would overlap tool/prompt spans; validation rejects them, so this
    # is 0 by construction and logged for the paper's "non-inert" checklist
    diags["frac_mask_leak"] = float(np.mean(batch.token_turn_idx[bi, li] < 0)) if n_tok else 0.0
    return finalize(batch, "sgcd", cfg, turn, keep_group=keep, token_weight=W, diagnostics=diags)
