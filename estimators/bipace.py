"""BiGPO and BiPACE (spec 4.3, 4.4; the BiPACE paper, arXiv 2606.25556: Sec. 3.4-3.5, Algorithm 1, App. F).

* :func:`greedy_cosine_clusters`: Algorithm 1 (single pass, canonical order, float64 dot products, ``atol``).
* :class:`HashNgram`: the zero-dependency character n-gram embedder (n = 3, D = 2048, counts, L2-normalized).
* :func:`calibrate_eps`: the App. F binary search for a median cluster size in [4, 8]; :class:`EpsCalibrator`
  runs it once (the first training step) and keeps the result.
* :func:`pace_advantage`: PACE's ``diff`` and ``q`` estimators with the RLOO fallback.
* estimators ``bigpo`` (state side: GiGPO's step term on cosine clusters) and ``bipace`` (+ PACE).
"""

from __future__ import annotations

import contextlib
import logging
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .batch import TrajectoryBatch
from .configs import BiGPOConfig, BiPACEConfig, ConfigError
from .gigpo import cluster_diagnostics, episode_term, step_kappa, step_returns, step_term
from .primitives import group_labels
from .registry import compute_advantage, register
from .result import AdvantageResult, finalize

logger = logging.getLogger(__name__)

try:  # optional: keep BLAS single-threaded inside the sequential clustering loop
    from threadpoolctl import threadpool_limits as _threadpool_limits
except ImportError:  # pragma: no cover - threadpoolctl is optional
    _threadpool_limits = None


def _single_thread_blas():
    """The clustering loop issues many small GEMMs between Python steps. A multi-threaded BLAS wakes its workers
    for each one and leaves them spinning while Python runs; on a busy 2-core machine that made the loop 10-100x
    slower. When threadpoolctl is installed, BLAS is limited to one thread for the duration of the loop."""
    if _threadpool_limits is None:
        return contextlib.nullcontext()
    try:
        return _threadpool_limits(limits=1, user_api="blas")
    except Exception:  # pragma: no cover - never let an introspection problem break the estimator
        return contextlib.nullcontext()

__all__ = [
    "greedy_cosine_clusters",
    "cluster_groups",
    "HashNgram",
    "calibrate_eps",
    "CalibrationResult",
    "EpsCalibrator",
    "pace_advantage",
    "bigpo",
    "bipace",
]

def _greedy_direct(x: np.ndarray, thr: float) -> np.ndarray:
    """Algorithm 1 written literally (one matrix-vector product per record); the reference for the blocked form.
    Rows are first scaled to unit norm in float64, as the blocked form does."""
    x = x / np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]
    n, dim = x.shape
    labels = np.empty(n, dtype=np.int64)
    cent = np.empty((min(n, 64), dim), dtype=np.float64)
    sizes: list[int] = []
    k = 0
    for i in range(n):
        xi = x[i]
        if k:
            s = cent[:k] @ xi
            j = int(np.argmax(s))  # ties -> lowest j
            if 1.0 - float(s[j]) <= thr:
                sizes[j] += 1
                c = cent[j] + (xi - cent[j]) / sizes[j]
                nrm = float(np.sqrt(c @ c))
                if nrm > 0:  # an exactly antipodal pair (eps = 2) would leave a zero centroid: keep the old one
                    cent[j] = c / nrm
                labels[i] = j
                continue
        if k == cent.shape[0]:
            cent = np.concatenate([cent, np.empty_like(cent)])
        cent[k] = xi
        sizes.append(1)
        labels[i] = k
        k += 1
    return labels


def _greedy_blocked(x: np.ndarray, thr: float, block: int = 32) -> np.ndarray:
    """Algorithm 1 processed in blocks of records (exact, float64).

    At the start of a block one GEMM gives every record's dot with every current centroid, and a second the
    block's own Gram matrix. Every record is taken as x_r / ||x_r|| with the norm from the Gram diagonal (float64),
    so rows that are unit only to float32 precision are exactly unit here, at no extra pass over the data.
    Inside the block the records are taken one by one as in Algorithm 1; when record r joins centroid j
    (K_j' = (a K_j + b x_r)/||a K_j + b x_r||, a = (|M|-1)/|M|, b = 1/|M|, with K_j and x_r unit, so
    ||a K_j + b x_r||^2 = a^2 + 2ab K_j.x_r + b^2) the later records' dots with K_j are updated
    by the same linear formula from the block Gram matrix, and a record that opens a cluster gets its column from
    the Gram matrix. Cost: n * D * (K + block) flops in BLAS-3 instead of n * K matrix-vector products.
    """
    n, dim = x.shape
    labels = np.empty(n, dtype=np.int64)
    cent = np.empty((min(n, 64), dim), dtype=np.float64)
    sizes: list[int] = []
    k = 0
    for b0 in range(0, n, block):
        xb = x[b0:b0 + block]
        nb = xb.shape[0]
        gb = xb @ xb.T
        d2 = np.diagonal(gb).copy()
        if not np.all((d2 > 0) & np.isfinite(d2)):
            bad = b0 + np.flatnonzero(~((d2 > 0) & np.isfinite(d2)))
            raise ValueError(f"greedy_cosine_clusters: rows {bad[:10].tolist()} have a zero or non-finite norm")
        rinv = 1.0 / np.sqrt(d2)
        gb *= rinv[:, None]
        gb *= rinv[None, :]
        S = np.empty((nb, k + nb), dtype=np.float64)
        if k:
            np.matmul(xb, cent[:k].T, out=S[:, :k])
            S[:, :k] *= rinv[:, None]
        for r in range(nb):
            if k:
                s = S[r, :k]
                j = int(s.argmax())  # ties -> lowest j
                sj = float(s[j])
                if 1.0 - sj <= thr:
                    m = sizes[j] + 1
                    sizes[j] = m
                    a = (m - 1) / m
                    b = 1.0 / m
                    nrm2 = a * a + 2.0 * a * b * sj + b * b
                    if nrm2 > 0:  # an exactly antipodal pair (eps = 2) would give a zero centroid: keep the old one
                        inv = 1.0 / np.sqrt(nrm2)
                        cj = cent[j]
                        cj *= a * inv
                        cj += (b * inv * rinv[r]) * xb[r]
                        if r + 1 < nb:
                            S[r + 1:, j] = (a * inv) * S[r + 1:, j] + (b * inv) * gb[r + 1:, r]
                    labels[b0 + r] = j
                    continue
            if k == cent.shape[0]:
                cent = np.concatenate([cent, np.empty_like(cent)])
            np.multiply(xb[r], rinv[r], out=cent[k])
            S[r + 1:, k] = gb[r + 1:, r]
            sizes.append(1)
            labels[b0 + r] = k
            k += 1
    return labels


def greedy_cosine_clusters(x: np.ndarray, eps: float, atol: float = 1e-6) -> np.ndarray:
    """Algorithm 1 of the BiPACE paper (spec 4.3) on fingerprints ``x`` [n, D] taken in the given order.

    Each row is scaled to unit norm in float64 first (rows normalized in float32 are unit only to about 1e-6; a
    zero or non-finite row raises ``ValueError``).

    Record i joins the centroid with the largest dot product (ties -> lowest index) when
    ``1 - x_i . K <= eps + atol``, and that centroid moves to ``normalize(K + (x_i - K)/|M|)``; otherwise it opens
    a new cluster. Dot products are float64. Returns cluster labels 0..K-1 in order of opening.
    The result depends on the order for eps > 0 (spec 8, I3).
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"x must be [n, D], got shape {x.shape}")
    n = x.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    with _single_thread_blas():
        return _greedy_blocked(np.ascontiguousarray(x, dtype=np.float64), float(eps) + float(atol))


def _group_slices(batch: TrajectoryBatch) -> list[np.ndarray]:
    """Row indices of each group in canonical (rollout-major) order."""
    order = batch.canonical_order
    if batch.n_turns == 0:
        return []
    g = batch.group_index[order]
    cuts = np.flatnonzero(g[1:] != g[:-1]) + 1
    return np.split(order, cuts)


def cluster_groups(batch: TrajectoryBatch, eps: float, atol: float = 1e-6, x: np.ndarray | None = None,
                   embedder: str = "embedding") -> tuple[np.ndarray, int]:
    """BiGPO partition of every group (spec 4.3): labels per turn row (global ids, in group order then opening
    order) and the number of clusters. ``x`` overrides the fingerprints (default: ``batch.embedding``);
    ``embedder="identity"`` uses the one-hot of ``obs_hash`` within the group."""
    n = batch.n_turns
    labels = np.zeros(n, dtype=np.int64)
    if n == 0:
        return labels, 0
    thr = float(eps) + float(atol)
    if embedder == "identity" and thr < 1.0:
        # one-hot fingerprints: distinct hashes have dot 0 (distance 1 > thr) and a centroid of identical one-hots
        # stays that one-hot, so Algorithm 1 returns exactly the hash partition (clusters in order of opening).
        order = batch.canonical_order
        lab, _ = group_labels(batch.group_index, batch.obs_hash)
        # renumber by first appearance in canonical order
        lab_c = lab[order]
        uniq, first = np.unique(lab_c, return_index=True)
        rank = np.empty(uniq.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
        remap = np.zeros(int(lab.max()) + 1, dtype=np.int64)
        remap[uniq] = rank
        return remap[lab], int(uniq.size)
    with _single_thread_blas():
        return _cluster_each_group(batch, thr, x, embedder, labels)


def _cluster_each_group(batch: TrajectoryBatch, thr: float, x: np.ndarray | None, embedder: str,
                        labels: np.ndarray) -> tuple[np.ndarray, int]:
    slices = _group_slices(batch)
    src = x if x is not None else batch.embedding
    # one float64 buffer reused by every group: a fresh float64 copy per group cost more in page faults than the
    # clustering's own GEMMs (74 ms against 3 ms for the paper's 16 x 160 x 3584)
    buf = None if embedder == "identity" else np.empty((max(r.size for r in slices), src.shape[1]))
    offset = 0
    for rows in slices:
        if embedder == "identity":
            _, inv = np.unique(batch.obs_hash[rows], return_inverse=True)
            xg = np.eye(int(inv.max()) + 1, dtype=np.float64)[inv.reshape(-1)]
        else:
            xg = buf[:rows.size]
            xg[...] = src[rows]
        lab = _greedy_blocked(xg, thr)
        labels[rows] = lab + offset
        offset += int(lab.max()) + 1
    return labels, offset


class HashNgram:
    """Character n-gram feature hashing (spec 4.3; our choice n = 3, D = 2048, count features, L2-normalized).

    Each n-gram's UTF-8 bytes are hashed with CRC-32 (stable across processes and platforms) into one of ``dim``
    buckets. A text shorter than n contributes itself as one gram; an empty text hashes a single NUL gram, so no
    fingerprint is ever zero.
    """

    def __init__(self, n: int = 3, dim: int = 2048, lowercase: bool = False):
        if n < 1 or dim < 1:
            raise ValueError("HashNgram needs n >= 1 and dim >= 1")
        self.n = n
        self.dim = dim
        self.lowercase = lowercase

    def buckets(self, text: str) -> np.ndarray:
        if self.lowercase:
            text = text.lower()
        if len(text) < self.n:
            grams = [text or "\0"]
        else:
            grams = [text[i:i + self.n] for i in range(len(text) - self.n + 1)]
        return np.fromiter((zlib.crc32(g.encode("utf-8")) % self.dim for g in grams), dtype=np.int64,
                           count=len(grams))

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for i, t in enumerate(texts):
            out[i] = np.bincount(self.buckets(t), minlength=self.dim)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out.astype(np.float32)


@dataclass
class CalibrationResult:
    """App. F search result: the chosen eps, and every probe as (eps, median cluster size)."""

    eps: float
    probes: list[tuple[float, float]]
    inside_target: bool


def calibrate_eps(batch: TrajectoryBatch, x: np.ndarray | None = None, *, lo: float = 0.02, hi: float = 0.40,
                  target: tuple[float, float] = (4.0, 8.0), max_probes: int = 6, atol: float = 1e-6,
                  embedder: str = "embedding") -> CalibrationResult:
    """The BiPACE paper's App. F (spec 4.3): binary search of eps in [lo, hi] with at most ``max_probes`` probes for a
    median cluster size (over clusters, all groups pooled) inside ``target``.

    Each probe is the midpoint of the current interval: a median below the target raises ``lo`` (coarser
    clusters), above it lowers ``hi``; a probe inside the target ends the search and is returned. Otherwise the
    probe whose median is closest to the target is returned (later probe on ties); the median is not guaranteed
    to be monotone in eps.
    """
    probes: list[tuple[float, float]] = []
    for _ in range(max_probes):
        eps = 0.5 * (lo + hi)
        labels, n_c = cluster_groups(batch, eps, atol, x=x, embedder=embedder)
        med = float(np.median(np.bincount(labels, minlength=n_c))) if n_c else 0.0
        probes.append((eps, med))
        if target[0] <= med <= target[1]:
            return CalibrationResult(eps, probes, True)
        if med < target[0]:
            lo = eps
        else:
            hi = eps
    if not probes:
        raise ValueError("max_probes must be >= 1")
    dist = [max(target[0] - m, m - target[1], 0.0) for _, m in probes]
    best = min(range(len(probes)), key=lambda i: (dist[i], -i))
    return CalibrationResult(probes[best][0], probes, False)


class EpsCalibrator:
    """Calibrate BiGPO's eps once, at the first training step (the BiPACE paper's App. F, spec 4.3), then keep it.

    ``compute_advantage(name, batch, calibrate_eps=True)`` runs the search on *that* batch, every time it is
    called. The paper calibrates once and trains with the result; this holder keeps that result as explicit state,
    so the estimators themselves stay pure functions of (batch, config)::

        calib = estimators.EpsCalibrator()                      # one per training run
        for batch in batches:
            res = calib.compute_advantage("bipace", batch, pace="q")   # 1st batch: search; later: eps=calib.eps
        checkpoint["eps_calibrator"] = calib.state_dict()       # resume: EpsCalibrator(**state)

    The same by hand: call once with ``calibrate_eps=True`` and pass ``res.diagnostics["eps_used"]`` back as
    ``eps`` on every later step. ``eps`` (None until calibrated) and ``inside_target`` (whether the search found a
    median cluster size inside [4, 8]) describe the kept result; an empty batch does not calibrate.
    """

    def __init__(self, eps: float | None = None, inside_target: bool | None = None):
        self.eps = None if eps is None else float(eps)
        self.inside_target = inside_target

    def compute_advantage(self, name: str, batch: TrajectoryBatch, **config) -> AdvantageResult:
        """``estimators.compute_advantage(name, batch, **config)`` with eps from the first calibrated batch.
        ``config`` must not set ``eps`` or ``calibrate_eps`` (this object owns them)."""
        clash = sorted({"eps", "calibrate_eps", "config"} & set(config))
        if clash:
            raise ConfigError(f"EpsCalibrator sets eps itself; do not pass {clash}")
        if self.eps is not None:
            return compute_advantage(name, batch, eps=self.eps, **config)
        if batch.n_turns == 0:
            return compute_advantage(name, batch, **config)
        res = compute_advantage(name, batch, calibrate_eps=True, **config)
        self.eps = float(res.diagnostics["eps_used"])
        self.inside_target = bool(res.diagnostics["eps_calibration_inside_target"])
        return res

    def state_dict(self) -> dict:
        """The kept result, for a checkpoint (``EpsCalibrator(**state)`` restores it)."""
        return {"eps": self.eps, "inside_target": self.inside_target}

    def __repr__(self) -> str:
        return f"EpsCalibrator(eps={self.eps!r}, inside_target={self.inside_target!r})"


def pace_advantage(returns: np.ndarray, cluster: np.ndarray, n_clusters: int, key: np.ndarray,
                   estimator: str = "q", fallback: str = "rloo") -> tuple[np.ndarray, dict[str, float]]:
    """PACE (spec 4.4, the BiPACE paper's Eqs. 4-7) within each cluster C, R = return-to-go, no std normalization.

    * ``diff``: R_i - mean_{C!=(i)} R; if C!=(i) is empty: the RLOO fallback R_i - mean_{C \\ i} R
      (``fallback="none"``: 0, our choice, since the peer mean is undefined).
    * ``q``: Q(i) - V = mean_{C=(i)} R - mean_C R; if |C=(i)| = 1: the RLOO fallback
      (``fallback="none"``: keep Q - V = R_i - V).
    * singleton clusters: 0.

    Returns (advantage per row, row-mix diagnostics).
    """
    R = np.asarray(returns, dtype=np.float64)
    n = R.size
    if n == 0:
        return np.zeros(0), {"frac_rows_pace": 0.0, "frac_rows_fallback": 0.0, "frac_rows_singleton": 0.0,
                             "frac_multi_clusters_with_ge2_keys": 0.0, "mean_unique_keys_per_multi_cluster": 0.0}
    size = np.bincount(cluster, minlength=n_clusters).astype(np.float64)
    ref = np.zeros(n_clusters)
    ref[cluster[::-1]] = R[::-1]
    y = R - ref[cluster]  # shifted by the cluster's first member: equal returns give exact zeros
    n_C = size[cluster]
    S_C = np.bincount(cluster, weights=y, minlength=n_clusters)[cluster]
    ck, n_ck = group_labels(cluster, np.asarray(key))
    n_eq = np.bincount(ck, minlength=n_ck).astype(np.float64)[ck]
    S_eq = np.bincount(ck, weights=y, minlength=n_ck)[ck]
    multi = n_C >= 2
    safe1 = np.where(multi, n_C - 1.0, 1.0)
    rloo = y - (S_C - y) / safe1
    if estimator == "diff":
        n_ne = n_C - n_eq
        branch = n_ne > 0
        base = (S_C - S_eq) / np.where(branch, n_ne, 1.0)
        fb = rloo if fallback == "rloo" else np.zeros(n)
        adv = np.where(branch, y - base, fb)
    elif estimator == "q":
        branch = n_eq >= 2
        qv = S_eq / n_eq - S_C / n_C
        adv = np.where(branch, qv, rloo if fallback == "rloo" else qv)
    else:
        raise ValueError(f"unknown PACE estimator {estimator!r} (q or diff)")
    adv = np.where(multi, adv, 0.0)
    # row-mix diagnostics (the BiPACE paper's App. L "step_norm_reward_cacb" hook)
    ck_cluster = np.zeros(n_ck, dtype=np.int64)
    ck_cluster[ck] = cluster
    keys_per_cluster = np.bincount(ck_cluster, minlength=n_clusters)
    multi_c = size >= 2
    diags = {
        "frac_rows_pace": float(np.mean(multi & branch)),
        "frac_rows_fallback": float(np.mean(multi & ~branch)),
        "frac_rows_singleton": float(np.mean(~multi)),
        "frac_multi_clusters_with_ge2_keys": float(np.mean(keys_per_cluster[multi_c] >= 2)) if multi_c.any() else 0.0,
        "mean_unique_keys_per_multi_cluster": float(keys_per_cluster[multi_c].mean()) if multi_c.any() else 0.0,
    }
    return adv, diags


def _fingerprints(batch: TrajectoryBatch, cfg: BiGPOConfig, name: str) -> tuple[np.ndarray | None, float]:
    if cfg.embedder == "embedding":
        batch.require(("embedding",), name)
        return None, float(batch.embedding_norm_min)
    if cfg.embedder == "identity":
        batch.require(("obs_hash",), name)
        return None, 1.0
    if cfg.obs_text is None:
        raise ValueError(f"{name}: embedder='hash_ngram' needs obs_text (one observation string per turn row)")
    if len(cfg.obs_text) != batch.n_turns:
        raise ValueError(f"{name}: obs_text has {len(cfg.obs_text)} entries for {batch.n_turns} turn rows")
    x = HashNgram(cfg.hash_ngram_n, cfg.hash_ngram_dim)(list(cfg.obs_text))
    return x, 1.0


def _bigpo_like(batch: TrajectoryBatch, cfg: BiGPOConfig, name: str) -> AdvantageResult:
    need = ["group_id", "traj_id", "turn_idx", "reward"]
    if cfg.pace != "gigpo":
        need.append("action_key")
    if cfg.invalid_action_penalty > 0:
        need.append("valid_action")
    batch.require(need, name)
    x, norm_min = _fingerprints(batch, cfg, name)
    eps = cfg.resolved_eps()
    diags: dict[str, float] = {}
    if cfg.calibrate_eps:
        cal = calibrate_eps(batch, x, atol=cfg.atol, embedder=cfg.embedder)
        eps = cal.eps
        diags["eps_calibration_probes"] = float(len(cal.probes))
        diags["eps_calibration_inside_target"] = float(cal.inside_target)
        logger.info("%s: calibrated eps=%.4f after probes %s", name, eps, cal.probes)
    cluster, n_c = cluster_groups(batch, eps, cfg.atol, x=x, embedder=cfg.embedder)
    ret = step_returns(batch, cfg.gamma, step_kappa(cfg), name)
    a_ep = episode_term(batch, cfg, name)
    diags.update(cluster_diagnostics(cluster, n_c))
    if cfg.pace == "gigpo":
        a_st = step_term(ret, cluster, n_c, cfg.mode)
    else:
        a_st, pd = pace_advantage(ret, cluster, n_c, batch.action_key, cfg.pace, cfg.fallback)
        diags.update(pd)
        if batch.has("action_parsed"):
            diags["action_tag_parse_rate"] = float(batch.action_parsed.mean()) if batch.n_turns else 0.0
    adv = a_ep + cfg.step_advantage_w * a_st
    diags["eps_used"] = float(eps)
    diags["n_clusters_per_group"] = float(n_c / batch.n_groups) if batch.n_groups else 0.0
    diags["embed_norm_min"] = norm_min
    return finalize(batch, name, cfg, adv, diagnostics=diags)


@register("bigpo", BiGPOConfig)
def bigpo(batch: TrajectoryBatch, cfg: BiGPOConfig) -> AdvantageResult:
    """Spec 4.3: GiGPO with the exact-hash clusters replaced by greedy cosine clusters of the fingerprints
    (state-only variant: ``pace="gigpo"`` by default)."""
    return _bigpo_like(batch, cfg, "bigpo")


@register("bipace", BiPACEConfig)
def bipace(batch: TrajectoryBatch, cfg: BiPACEConfig) -> AdvantageResult:
    """Spec 4.4: A(i) = A_ep(tau(i)) + w * A_PACE(i) on BiGPO clusters (default Q-style, RLOO fallback)."""
    return _bigpo_like(batch, cfg, "bipace")
