"""Benchmark of the `estimators` package against straightforward per-row plain-Python references (issue 3).

    python benchmarks/estimators.py [--sizes 1000 10000 100000] [--quick] [--markdown] [--readme]

For each size (turn rows; groups of 8 rollouts of 10-30 turns, 40 anchor observations per group, 5 action keys,
10% invalid actions) it prints, per estimator, the numpy estimator's best wall time over at least 9 repeats (5 at
100k rows) and at least 0.25 s of repeats (at most 200), with the median and the best process CPU time (which shows
the cost without the waiting on a shared machine), the time of a per-row reference
written in plain Python the way the reference code does it (a loop over rows that scans the row's group for
matching rows), the ratio, and the largest difference between the two outputs (they must agree). Every reference
runs on the whole batch, 100k rows included (``--sample-100k`` times it on 10% of the groups and scales instead).

BiGPO / BiPACE appear twice in that table: with the ``embedding`` embedder (real greedy cosine clustering of
256-dimensional float32 fingerprints drawn around each group's 40 latent states; its reference clusters with the
literal Algorithm 1, one float64 matrix-vector product per record, then scans the group row by row), and with the
``identity`` embedder (exact-hash clusters, labelled as such). SGCD runs at 1k and 10k responses (step rows of 8-24
tokens, K = 100 teacher top-k log-probs) against a per-token Python reference; at 100k responses its top-k arrays
alone would take about 1.3 GB, so that size is not run.

Then GiGPO with ``preset="verl-agent"`` against verl-agent's own algorithm (``verl_agent_gigpo``: its
``gigpo/core_gigpo.py`` functions transcribed from torch to numpy, O(N^2) returns included; above 12,800 rows it runs
on the first groups and its time is scaled linearly, a lower bound), on 63-bit observation digests and on the raw
observation strings verl-agent groups (``TrajectoryBatch(obs_hash=strings)`` digests each distinct string once).

Then BiPACE (greedy cosine clustering + PACE q + episode term) with 3,584-dimensional float32 fingerprints at the
paper's setting (16 groups x 8 rollouts x 20 turns) and at 10k rows, timed without and with the batch construction
(``TrajectoryBatch(...)``: coercion, validation and the L2 normalization of the fingerprints), against the literal
Algorithm 1 (one float64 matrix-vector product per record, per group) for the clustering alone.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import estimators as E  # noqa: E402
from estimators.bipace import _greedy_direct  # noqa: E402

D_DELTA = 1e-6


# ------------------------------------------------------------------------------------------------ data
def synth(n_rows: int, seed: int = 0, G: int = 8, tmin: int = 10, tmax: int = 30, n_states: int = 40,
          emb_dim: int | None = None, noise: float = 0.25):
    """Turn columns; with ``emb_dim``, float32 fingerprints: a unit-variance centre per (group, latent state), the
    same latent state as ``obs_hash``, plus isotropic noise (cosine about .94 within a state, about 0 across)."""
    rng = np.random.default_rng(seed)
    lens = []
    n = 0
    g = 0
    while n < n_rows:
        for _ in range(G):
            T = int(rng.integers(tmin, tmax + 1))
            lens.append((g, T))
            n += T
        g += 1
    gid = np.concatenate([np.full(T, g) for g, T in lens])
    trj = np.concatenate([np.full(T, i) for i, (_, T) in enumerate(lens)])
    turn = np.concatenate([np.arange(T) for _, T in lens])
    done = np.concatenate([np.arange(T) == T - 1 for _, T in lens])
    N = gid.size
    succ = rng.integers(0, 2, size=len(lens)).astype(np.float64)
    state = rng.integers(0, n_states, size=N)
    cols = dict(
        group_id=gid, task_id=gid, traj_id=trj, turn_idx=turn, done=done,
        reward=np.where(done, succ[trj], 0.0), success=succ[trj],
        obs_hash=gid * 1000 + state, valid_action=rng.random(N) > 0.1,
        action_key=rng.integers(0, 5, size=N), process_ok=rng.integers(-1, 2, size=N),
        info_gain=np.where(done, np.nan, np.round(rng.normal(size=N), 3)),
    )
    if emb_dim:
        centers = rng.standard_normal(size=(g, n_states, emb_dim), dtype=np.float32)
        emb = centers[gid, state]
        emb += noise * rng.standard_normal(size=emb.shape, dtype=np.float32)
        cols["embedding"] = emb
    return cols


def sub_batch(cols: dict, groups: np.ndarray) -> dict:
    keep = np.isin(cols["group_id"], groups)
    return {k: v[keep] for k, v in cols.items()}


# ------------------------------------------------------------------------------------------------ references
class Ref:
    """Plain-Python structures, built inside every timed reference run."""

    def __init__(self, c: dict):
        self.n = n = len(c["reward"])
        self.gid = c["group_id"].tolist()
        self.tid = c["traj_id"].tolist()
        self.turn = c["turn_idx"].tolist()
        self.rew = c["reward"].tolist()
        self.c = c
        self.group_rows: dict = {}
        self.traj_rows: dict = {}
        for i in range(n):
            self.group_rows.setdefault(self.gid[i], []).append(i)
            self.traj_rows.setdefault(self.tid[i], []).append(i)
        for rows in self.traj_rows.values():
            rows.sort(key=lambda j: self.turn[j])
        self.R = {t: sum(self.rew[j] for j in rows) for t, rows in self.traj_rows.items()}

    def col(self, name):
        return self.c[name].tolist()

    def rtg(self, gamma, kappa):
        valid = self.col("valid_action")
        out = [0.0] * self.n
        for rows in self.traj_rows.values():
            acc = 0.0
            for j in reversed(rows):
                acc = (self.rew[j] - kappa * (0.0 if valid[j] else 1.0)) + gamma * acc
                out[j] = acc
        return out


def _norm(x, vals, mode, ddof=1, var_eps=0.0):
    n = len(vals)
    if n <= 1:
        return 0.0
    mu = sum(vals) / n
    if mode == "mean_norm":
        return x - mu
    if mode == "loo":
        return x - (sum(vals) - x) / (n - 1)
    var = sum((v - mu) ** 2 for v in vals) / (n - ddof)
    return (x - mu) / (math.sqrt(var + var_eps) + D_DELTA)


def _traj_values_in_group(r: Ref, i, values):
    """Scan the rows of row i's group; one value per trajectory (first row seen)."""
    seen = set()
    out = []
    for j in r.group_rows[r.gid[i]]:
        t = r.tid[j]
        if t not in seen:
            seen.add(t)
            out.append(values[t])
    return out


def ref_outcome(c, mode):
    r = Ref(c)
    return [_norm(r.R[r.tid[i]], _traj_values_in_group(r, i, r.R), mode) for i in range(r.n)]


def ref_dapo(c):
    r = Ref(c)
    succ = dict(zip(r.tid, r.col("success")))
    out = []
    for i in range(r.n):
        s = _traj_values_in_group(r, i, succ)
        keep = max(s) > min(s)
        out.append(_norm(r.R[r.tid[i]], _traj_values_in_group(r, i, r.R), "mean_std_norm") if keep else 0.0)
    return out


def ref_gigpo(c, gamma=0.95, kappa=0.1):
    r = Ref(c)
    obs = r.col("obs_hash")
    ret = r.rtg(gamma, kappa)
    out = []
    for i in range(r.n):
        ep = _norm(r.R[r.tid[i]], _traj_values_in_group(r, i, r.R), "mean_std_norm")
        members = [ret[j] for j in r.group_rows[r.gid[i]] if obs[j] == obs[i]]
        out.append(ep + _norm(ret[i], members, "mean_std_norm"))
    return out


def ref_hgpo(c, K=2, alpha=1.0, gamma=0.95, kappa=0.1):
    r = Ref(c)
    obs = r.col("obs_hash")
    ret = r.rtg(gamma, kappa)
    hist = [None] * r.n
    for rows in r.traj_rows.values():
        for pos, j in enumerate(rows):
            hist[j] = [obs[rows[pos - m]] if pos - m >= 0 else None for m in range(K + 1)]
    out = []
    for i in range(r.n):
        num = den = 0.0
        for k in range(1, K + 2):
            members = [ret[j] for j in r.group_rows[r.gid[i]] if hist[j][:k] == hist[i][:k]]
            a = _norm(ret[i], members, "mean_std_norm", ddof=0)
            if a != 0:
                w = (k + 1) ** alpha
                num += w * a
                den += w
        out.append(num / den if den else 0.0)
    return out


def _pace_q_ref(i, C, key, ret):
    """PACE's q advantage of row ``i`` in its cluster ``C`` (rows, >= 2), per row as reference code does: the mean
    return of its action key's peers minus the cluster mean when the key has >= 2 rows, else the leave-one-out
    (RLOO) fallback."""
    same = [ret[j] for j in C if key[j] == key[i]]
    allv = [ret[j] for j in C]
    if len(same) >= 2:
        return sum(same) / len(same) - sum(allv) / len(allv)
    return ret[i] - (sum(allv) - ret[i]) / (len(allv) - 1)


def ref_bipace_identity(c, gamma=0.95, kappa=0.1):
    r = Ref(c)
    obs = r.col("obs_hash")
    key = r.col("action_key")
    ret = r.rtg(gamma, kappa)
    out = []
    for i in range(r.n):
        ep = _norm(r.R[r.tid[i]], _traj_values_in_group(r, i, r.R), "mean_std_norm")
        C = [j for j in r.group_rows[r.gid[i]] if obs[j] == obs[i]]
        if len(C) < 2:
            out.append(ep)
            continue
        out.append(ep + _pace_q_ref(i, C, key, ret))
    return out


def ref_a2tgpo(c, gamma=1.0, alpha=0.3):
    r = Ref(c)
    ig = r.col("info_gain")
    done = r.col("done")
    var_eps = 1e-8
    out = [0.0] * r.n
    ordinal = [0] * r.n
    for rows in r.traj_rows.values():
        e = 0
        for j in rows:
            if not done[j]:
                e += 1
                ordinal[j] = e
    igt = [0.0] * r.n
    for i in range(r.n):
        if done[i]:
            continue
        members = [ig[j] for j in r.group_rows[r.gid[i]] if not done[j] and ordinal[j] == ordinal[i]]
        igt[i] = _norm(ig[i], members, "mean_std_norm", ddof=0, var_eps=var_eps)
    for i in range(r.n):
        vals = _traj_values_in_group(r, i, r.R)
        a_out = _norm(r.R[r.tid[i]], vals, "mean_std_norm", ddof=0, var_eps=var_eps)
        if done[i]:
            out[i] = a_out
            continue
        proc = [j for j in r.traj_rows[r.tid[i]] if not done[j]]
        n = len(proc)
        e = ordinal[i]
        acc = sum(gamma ** (ordinal[j] - e) * igt[j] for j in proc if ordinal[j] >= e)
        out[i] = alpha * acc / math.sqrt(n - e + 1) + a_out
    return out


def ref_gvpo(c, b=0.2, zeta=1e-8):
    r = Ref(c)
    pok = r.col("process_ok")
    out = []
    for i in range(r.n):
        a = _norm(r.R[r.tid[i]], _traj_values_in_group(r, i, r.R), "mean_norm")
        if pok[i] == 0:
            a = -b if abs(a) <= zeta else ((1 + b) * a if a < -zeta else 0.0)
        out.append(a)
    return out


def ref_pvpo(c, table):
    r = Ref(c)
    task = r.col("task_id")
    return [r.R[r.tid[i]] - table[task[i]] for i in range(r.n)]


def ref_igpo(c, gamma=1.0):
    r = Ref(c)
    ig = r.col("info_gain")
    done = r.col("done")
    val = [r.R[r.tid[i]] if done[i] else ig[i] for i in range(r.n)]
    rt = []
    for i in range(r.n):
        members = [val[j] for j in r.group_rows[r.gid[i]]]
        rt.append(_norm(val[i], members, "mean_std_norm", ddof=0, var_eps=1e-8))
    out = [0.0] * r.n
    for rows in r.traj_rows.values():
        acc = 0.0
        for j in reversed(rows):
            acc = rt[j] + gamma * acc
            out[j] = acc
    return out


def ref_cosine(c, eps, pace, gamma=0.95, kappa=0.1):
    """BiGPO (``pace="gigpo"``) / BiPACE (``pace="q"``) with real cosine clusters: per group, the literal
    Algorithm 1 over the records in canonical order (one float64 matrix-vector product per record), then for each
    row a scan of its group for the rows of its cluster (and of its action key)."""
    r = Ref(c)
    emb = c["embedding"]
    key = r.col("action_key")
    ret = r.rtg(gamma, kappa)
    label = [None] * r.n
    for g, rows in r.group_rows.items():
        trajs = dict.fromkeys(r.tid[j] for j in rows)  # first appearance
        order = [j for t in trajs for j in r.traj_rows[t]]
        for j, lab in zip(order, _greedy_direct(emb[order].astype(np.float64), eps + 1e-6).tolist()):
            label[j] = lab
    out = []
    for i in range(r.n):
        ep = _norm(r.R[r.tid[i]], _traj_values_in_group(r, i, r.R), "mean_std_norm")
        C = [j for j in r.group_rows[r.gid[i]] if label[j] == label[i]]
        allv = [ret[j] for j in C]
        if pace == "gigpo":
            out.append(ep + _norm(ret[i], allv, "mean_std_norm"))
            continue
        if len(C) < 2:
            out.append(ep)
            continue
        out.append(ep + _pace_q_ref(i, C, key, ret))
    return out


def sgcd_batch(n_rows: int, K: int = 100, G: int = 8, lmin: int = 8, lmax: int = 24, seed: int = 0) -> dict:
    """Step rows: ``n_rows`` single-turn responses of ``lmin``-``lmax`` tokens in groups of ``G``, binary rewards,
    teacher top-K log-probs (+ 50 units of mass outside the K atoms) and a student perturbed around them."""
    rng = np.random.default_rng(seed)
    B, L = n_rows, lmax
    n_tok = rng.integers(lmin, lmax + 1, size=B)
    mask = np.arange(L)[None, :] < n_tok[:, None]
    tti = np.where(mask, 0, -1)
    logits = rng.standard_normal(size=(B, L, K + 1), dtype=np.float32) * 2
    lt = logits[..., :K] - np.log(np.exp(logits).sum(-1, keepdims=True) + 50)
    ls = lt + rng.normal(scale=0.3, size=lt.shape).astype(np.float32)
    ls -= np.log(np.exp(ls).sum(-1, keepdims=True) + 0.05)
    return dict(group_id=np.arange(B) // G, traj_id=np.arange(B), turn_idx=np.zeros(B), done=np.ones(B, bool),
                reward=rng.integers(0, 2, size=B).astype(float), row_traj_id=np.arange(B), response_mask=mask,
                token_turn_idx=tti, teacher_topk_logprob=lt, student_logprob_on_teacher_topk=ls,
                teacher_logprob_obs=lt[..., 0].copy(), student_logprob_obs=ls[..., 0].copy(),
                obs_in_topk=np.ones((B, L), bool))


def ref_sgcd_weights(batch) -> list:
    """SGCD's W per response, token by token in plain Python: support KL over the top-K + tail atoms, teacher
    entropy, min-max normalization per response, the onset / entropy segmenter, W = clip(1 + s, 1, 2)."""
    tk = batch.teacher_topk_logprob.tolist()
    sk = batch.student_logprob_on_teacher_topk.tolist()
    m = batch.response_mask.tolist()
    W = []
    for b in range(len(m)):
        d, H = [], []
        for t in range(len(m[b])):
            if not m[b][t]:
                continue
            pt = [math.exp(v) for v in tk[b][t]]
            ps = [math.exp(v) for v in sk[b][t]]
            tail_t = max(1 - sum(pt), 1e-12)
            tail_s = max(1 - sum(ps), 1e-12)
            d.append(sum(p * (math.log(p) - math.log(q)) for p, q in zip(ps + [tail_s], pt + [tail_t])))
            H.append(-sum(p * math.log(p) for p in pt + [tail_t]))
        lo, hi = min(d), max(d)
        dn = [(x - lo) / (hi - lo + 1e-8) for x in d]
        s = []
        in_seg, ov, ho = False, 0.0, 0.0
        for x, h in zip(dn, H):
            if in_seg and h > 1.5 * ho:
                in_seg = False
            if not in_seg and x > 0.1:
                in_seg, ov, ho = True, x, h
            s.append(ov if in_seg else x)
        W.append([min(max(1 + v, 1.0), 2.0) for v in s])
    return W


def ref_sgcd(batch) -> list:
    """Token advantages per response: the GRPO advantage of mixed groups (0 elsewhere) times W."""
    c = {k: np.asarray(v) for k, v in batch.to_dict().items() if np.asarray(v).ndim == 1}
    r = Ref(c)
    adv = []
    for i in range(r.n):
        vals = _traj_values_in_group(r, i, r.R)
        adv.append(_norm(r.R[r.tid[i]], vals, "mean_std_norm") if max(vals) > min(vals) else 0.0)
    return [[adv[b] * w for w in ws] for b, ws in enumerate(ref_sgcd_weights(batch))]


# ------------------------------------------------------------------------------------------------ timing
class Timing(float):
    """Best wall time of the repeats (a float, used for the ratios), with the median wall time and the best
    process CPU time attached: on a shared machine the CPU time shows the cost without the waiting."""

    median: float
    cpu: float
    repeats: int


def median_time(fn, repeat, min_total=0.0):
    """Run ``fn`` ``repeat`` times, and more (up to 200) until ``min_total`` seconds have passed: a call of about
    a millisecond needs more than a handful of repeats for its best time to mean anything on a shared machine."""
    walls, cpus = [], []
    out = None
    while len(walls) < repeat or (sum(walls) < min_total and len(walls) < 200):
        c = time.process_time()
        t = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    best = Timing(min(walls))
    best.median = statistics.median(walls)
    best.cpu = min(cpus)
    best.repeats = len(walls)
    return best, out


def fmt_ms(s):
    if s < 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e3:,.1f} ms" if s < 10 else f"{s:,.1f} s"


EMB_DIM = 256  # fingerprint width in the size table (the paper's 3,584 is in the BiPACE section)


def _ratio(t_ref, t_np):
    r = t_ref / t_np
    return f"{r:,.0f}x" if r >= 10 else f"{r:.1f}x"


def _row(rows_out, name, n, t_np, t_ref, err, note="", section="size"):
    rows_out.append((name, n, t_np, t_ref, err, note, section))
    ref = f"{'~' if note.startswith('~') else ' '}{fmt_ms(t_ref):>10s}" if t_ref else f"{'':>11s}"
    ratio = f"{_ratio(t_ref, t_np):>10s}" if t_ref else f"{'':>10s}"
    cpu = getattr(t_np, "cpu", float("nan"))
    print(f"{name:44s} N={n:>7,} numpy best {fmt_ms(t_np):>9s} (median {fmt_ms(getattr(t_np, 'median', t_np))}, "
          f"cpu {fmt_ms(cpu) if cpu == cpu else '-'})  reference {ref}  ratio {ratio}  "
          f"max|diff| {'' if err is None else f'{err:.1e}'}", flush=True)


def turn_table(sizes, quick, sample_100k, rows_out):
    cases = [
        ("grpo", {}, lambda c: ref_outcome(c, "mean_std_norm")),
        ("dr_grpo", {}, lambda c: ref_outcome(c, "mean_norm")),
        ("rloo", {}, lambda c: ref_outcome(c, "loo")),
        ("dapo", {}, ref_dapo),
        ("gigpo", {}, ref_gigpo),
        ("hgpo", {}, ref_hgpo),
        ("bigpo", {"eps": 0.10}, lambda c: ref_cosine(c, 0.10, "gigpo")),
        ("bipace", {"eps": 0.10}, lambda c: ref_cosine(c, 0.10, "q")),
        ("bipace", {"embedder": "identity"}, ref_bipace_identity),
        ("igpo", {}, ref_igpo),
        ("a2tgpo", {}, ref_a2tgpo),
        ("gvpo", {}, ref_gvpo),
        ("pvpo", None, None),
    ]
    for n_rows in sizes:
        cols = synth(n_rows, emb_dim=EMB_DIM)
        emb = cols.pop("embedding")
        t_build, batch = median_time(lambda: E.TrajectoryBatch(**cols), 1)
        t_build_e, batch_e = median_time(lambda: E.TrajectoryBatch(**cols, embedding=emb), 1)
        del emb
        sample = sample_100k and n_rows > 20_000
        _row(rows_out, "batch construction + validation", batch.n_turns, t_build, None, None, "once per batch")
        _row(rows_out, f"batch construction with {EMB_DIM}-d fingerprints", batch.n_turns, t_build_e, None, None,
             "once per batch")
        v_table = {int(t): 0.5 for t in np.unique(cols["task_id"])}
        for name, kw, ref in cases:
            if name == "pvpo":
                kw = {"v_table": E.StaticValueTable(v_table)}
                ref = lambda cc: ref_pvpo(cc, v_table)  # noqa: E731
            cosine = name in ("bigpo", "bipace") and kw.get("embedder") != "identity"
            b = batch_e if cosine else batch
            c = b.to_dict()
            if sample:
                groups = np.unique(c["group_id"])[: max(1, b.n_groups // 10)]
                c_ref = sub_batch(c, groups)
                scale = b.n_turns / len(c_ref["reward"])
            else:
                c_ref, scale = c, 1.0
            repeat = 3 if quick else (9 if n_rows <= 10_000 else 5)
            t_np, res = median_time(lambda: E.compute_advantage(name, b, **kw), repeat, min_total=0.25)
            t_ref, ref_out = median_time(lambda: ref(c_ref), 1)
            got = res.turn_adv[np.isin(c["group_id"], np.unique(c_ref["group_id"]))] if sample else res.turn_adv
            err = float(np.max(np.abs(got.astype(np.float64) - np.asarray(ref_out)))) if len(ref_out) else 0.0
            label = name
            if cosine:
                label = f"{name} (cosine clusters, D={EMB_DIM})"
            elif kw and kw.get("embedder") == "identity":
                label = f"{name} (identity embedder: exact hash)"
            _row(rows_out, label, b.n_turns, t_np, t_ref * scale, err, "~" if sample else "")
        del batch_e
        sgcd_row(n_rows, quick, rows_out)


def sgcd_row(n_rows, quick, rows_out):
    if n_rows > 20_000:
        print(f"sgcd at {n_rows:,} responses not run: its top-k arrays alone would take about "
              f"{n_rows * 16 * 100 * 2 * 4 / 1e9:.1f} GB", flush=True)
        return
    batch = E.TrajectoryBatch(**sgcd_batch(n_rows))
    t_np, res = median_time(lambda: E.compute_advantage("sgcd", batch), 3 if quick else 5)
    t_ref, ref_out = median_time(lambda: ref_sgcd(batch), 1)
    m = batch.response_mask
    got = [res.token_adv[b][m[b]].tolist() for b in range(m.shape[0])]
    err = max(abs(a - r) for ga, ra in zip(got, ref_out) for a, r in zip(ga, ra))
    _row(rows_out, "sgcd (responses of 8-24 tokens, K=100)", batch.n_turns, t_np, t_ref, err,
         f"{int(m.sum()):,} tokens; token advantages compared")


def paper_batch(n_groups, G=8, T=20, D=3584, seed=0, n_states=30, noise=0.25):
    """Fingerprints with cluster structure: per group 30 latent states, unit centre + isotropic noise."""
    rng = np.random.default_rng(seed)
    N = n_groups * G * T
    gid = np.repeat(np.arange(n_groups), G * T)
    trj = np.repeat(np.arange(n_groups * G), T)
    turn = np.tile(np.arange(T), n_groups * G)
    done = turn == T - 1
    st = rng.integers(0, n_states, size=N)
    centers = rng.normal(size=(n_groups, n_states, D)).astype(np.float32)
    emb = centers[gid, st] + noise * rng.normal(size=(N, D)).astype(np.float32)
    succ = rng.integers(0, 2, size=n_groups * G).astype(float)
    return dict(group_id=gid, traj_id=trj, turn_idx=turn, reward=np.where(done, succ[trj], 0.0), done=done,
                obs_hash=gid * 1000 + st, valid_action=rng.random(N) > 0.1, action_key=rng.integers(0, 5, size=N),
                embedding=emb)


def bipace_section(quick, rows_out):
    for label, n_groups in (("paper setting 16x8x20", 16), ("10k rows 64x8x20", 64)):
        cols = paper_batch(n_groups)
        repeat = 3 if quick else 7
        t_build, batch = median_time(lambda: E.TrajectoryBatch(**cols), repeat)
        t_np, res = median_time(lambda: E.compute_advantage("bipace", batch, eps=0.10), repeat)
        t_tot, _ = median_time(lambda: E.compute_advantage("bipace", E.TrajectoryBatch(**cols), eps=0.10), repeat)
        # reference: literal Algorithm 1 per group (one float64 matrix-vector product per record)
        emb = batch.embedding
        order = batch.canonical_order

        def ref():
            labels = []
            g = batch.group_index[order]
            for grp in range(batch.n_groups):
                rows = order[g == grp]
                labels.append(_greedy_direct(emb[rows].astype(np.float64), 0.10 + 1e-6))
            return labels

        t_ref, _ = median_time(ref, 1)
        d = res.diagnostics
        shape = f"clusters/group {d['n_clusters_per_group']:.1f}, mean size {d['mean_cluster_size']:.2f}"
        _row(rows_out, f"bipace ({label}, D=3584)", batch.n_turns, t_np, t_ref, None,
             f"estimator only; {shape}; reference: literal Algorithm 1 (clustering alone)", "bipace")
        _row(rows_out, f"  batch construction ({label})", batch.n_turns, t_build, None, None,
             "TrajectoryBatch(...): validation + float32 L2 normalization", "bipace")
        _row(rows_out, f"  bipace incl. batch construction ({label})", batch.n_turns, t_tot, t_ref, None,
             "TrajectoryBatch(...) + compute_advantage, timed together", "bipace")


def _cell_np(t_np):
    med = getattr(t_np, "median", float(t_np))
    cpu = getattr(t_np, "cpu", float("nan"))
    return fmt_ms(t_np) + (f" ({fmt_ms(med)}; cpu {fmt_ms(cpu)})" if cpu == cpu else "")


def _ref_cell(t_ref, note):
    return (("~" if note.startswith("~") else "") + fmt_ms(t_ref)) if t_ref else ""


def markdown(rows):
    """Every row: one line per (workload, size)."""
    lines = ["| estimator | turn rows | numpy best (median; cpu) | per-row Python reference | ratio | max abs diff "
             "| note |", "|---|---:|---:|---:|---:|---:|---|"]
    for name, n, t_np, t_ref, err, note, _ in rows:
        e = f"{err:.1e}" if err is not None else ""
        lines.append(f"| {name.strip()} | {n:,} | {_cell_np(t_np)} | {_ref_cell(t_ref, note)} | "
                     f"{_ratio(t_ref, t_np) if t_ref else ''} | {e} | "
                     f"{'reference timed on 10% of the groups and scaled' if note == '~' else note.lstrip('~ ')} |")
    return "\n".join(lines)


def readme_tables(rows):
    """The README's two tables: the size table (one column block per size, best wall times), then BiPACE."""
    size_rows = [r for r in rows if r[6] == "size"]
    starts = [j for j, r in enumerate(size_rows) if r[0] == "batch construction + validation"]
    blocks = [size_rows[a:b] for a, b in zip(starts, starts[1:] + [len(size_rows)])]
    head = "| estimator | " + " | ".join(f"{round(b[0][1] / 1000):,}k rows: ours | per-row reference | ratio"
                                        for b in blocks) + " |"
    lines = [head, "|---|" + "---:|---:|---:|" * len(blocks)]
    for name in dict.fromkeys(r[0] for r in size_rows):
        cells = []
        for block in blocks:
            match = [r for r in block if r[0] == name]
            if not match:
                cells += ["not run", "", ""]
                continue
            _, _, t_np, t_ref, _, note, _ = match[0]
            cells += [fmt_ms(t_np), _ref_cell(t_ref, note), _ratio(t_ref, t_np) if t_ref else ""]
        lines.append(f"| {name.strip()} | " + " | ".join(cells) + " |")
    out = "\n".join(lines) + "\n\n"
    lines = ["| workload (reference: literal Algorithm 1, clustering alone) | rows | ours: best (median; cpu) "
             "| reference | ratio |", "|---|---:|---:|---:|---:|"]
    for name, n, t_np, t_ref, _, _, section in rows:
        if section == "bipace":
            lines.append(f"| {name.strip()} | {n:,} | {_cell_np(t_np)} | {fmt_ms(t_ref) if t_ref else ''} | "
                         f"{_ratio(t_ref, t_np) if t_ref else ''} |")
    return out + "\n".join(lines)


# ------------------------------------------------------------------------------------------------ verl-agent GiGPO
def verl_agent_gigpo(c: dict, anchor_obs: np.ndarray, gamma=0.95, kappa=0.1, eps=1e-6) -> np.ndarray:
    """verl-agent's GiGPO (``gigpo/core_gigpo.py``) as verl-agent runs it, on numpy instead of torch: its
    ``compute_step_discounted_returns`` (for every row an ``np.where`` over the batch: O(N^2)), the per-row penalty
    on the episode score, ``episode_norm_reward`` with ``compute_mean_std_cross_steps=True``, ``build_step_group``
    (one ``np.where`` per group, a dict of exact observation strings) and ``step_norm_reward``; mean_std_norm."""
    from collections import defaultdict

    rewards = c["reward"].astype(np.float32)
    traj = c["traj_id"]
    index = c["group_id"]
    valid = c["valid_action"]
    # compute_step_discounted_returns (rows of a trajectory are in turn order in this batch)
    returns_by_traj = {}
    for uid in np.unique(traj):
        idx = np.where(traj == uid)[0]
        rr = rewards[idx]
        out = np.zeros_like(rr)
        run = 0.0
        for t in reversed(range(len(rr))):
            run = rr[t] + gamma * run
            out[t] = run
        returns_by_traj[uid] = out
    step_returns = np.zeros_like(rewards)
    for i, uid in enumerate(traj):
        idx = np.where(traj == uid)[0]
        step_returns[i] = returns_by_traj[uid][np.where(idx == i)[0][0]]
    # episode score per row minus the row's penalty; statistics over the rows of each uid
    R = np.zeros(len(rewards))
    np.add.at(R, traj, rewards)  # traj ids are 0..T-1 here
    scores = R[traj] - kappa * (~valid)
    id2score = defaultdict(list)
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    id2stat = {k: (0.0, 1.0) if len(v) == 1 else (np.mean(v), np.std(v, ddof=1)) for k, v in id2score.items()}
    ep = np.array([(scores[i] - id2stat[index[i]][0]) / (id2stat[index[i]][1] + eps) for i in range(len(scores))])
    # build_step_group + step_norm_reward
    uids = np.empty(len(rewards), dtype=object)
    for g in np.unique(index):
        locs = np.where(index == g)[0]
        clusters = defaultdict(list)
        for loc in locs:
            clusters[anchor_obs[loc]].append(loc)
        for k, (obs, members) in enumerate(clusters.items()):
            for m in members:
                uids[m] = (g, k)
    id2r = defaultdict(list)
    for i in range(len(rewards)):
        id2r[uids[i]].append(step_returns[i])
    st_stat = {k: (np.mean(v), 1.0) if len(v) == 1 else (np.mean(v), np.std(v, ddof=1)) for k, v in id2r.items()}
    st = np.array([(step_returns[i] - st_stat[uids[i]][0]) / (st_stat[uids[i]][1] + eps) for i in range(len(rewards))])
    return ep + st


def verl_agent_section(sizes, quick, rows_out):
    """GiGPO with ``preset="verl-agent"`` against verl-agent's algorithm, on 63-bit observation digests (what
    agentgym's envs hand over) and on the raw observation strings verl-agent groups (``digest_strings`` + GiGPO)."""
    for n_rows in sizes:
        cols = synth(n_rows)
        rng = np.random.default_rng(7)
        texts = np.array([f"You arrive at cabinet {s % 1000}. On the cabinet {s % 1000}, you see a mug "
                          f"{s // 1000 % 97}, a spoon 2, and a dishsponge 3. Group {s // 1000}." for s in cols["obs_hash"]],
                         dtype=object)
        digests = rng.integers(0, 2**63 - 1, size=int(cols["obs_hash"].max()) + 1)[cols["obs_hash"]]
        # verl-agent's returns are O(N^2): above 12,800 rows (its default batch of 16 x 8 x 100 turns) the reference
        # runs on the first groups and its time is scaled linearly (a lower bound on its true cost)
        groups = np.unique(cols["group_id"])
        n_ref = groups.size if len(texts) <= 12_800 else max(1, int(groups.size * 12_800 / len(texts)))
        sub = sub_batch({**cols, "text": texts}, groups[:n_ref])
        t_ref, ref_out = median_time(lambda: verl_agent_gigpo(sub, sub["text"]), 1)
        scale = len(texts) / len(sub["reward"])
        b_dig = E.TrajectoryBatch(**{**cols, "obs_hash": digests})
        repeat = 3 if quick else (9 if n_rows <= 10_000 else 5)
        t_dig, res = median_time(lambda: E.compute_advantage("gigpo", b_dig, preset="verl-agent"), repeat, 0.25)
        t_txt, res_t = median_time(lambda: E.compute_advantage("gigpo", E.TrajectoryBatch(**{**cols, "obs_hash": texts}),
                                                               preset="verl-agent"), repeat, 0.25)
        t_hash, _ = median_time(lambda: E.digest_strings(texts), repeat, 0.25)
        keep = np.isin(cols["group_id"], np.unique(sub["group_id"]))
        err = float(np.max(np.abs(res_t.turn_adv[keep].astype(np.float64) - ref_out)))
        note = ("~ verl-agent timed on its first 12,800 rows and scaled linearly (a lower bound: its returns are "
                "O(N^2))") if scale > 1 else ""
        _row(rows_out, "gigpo verl-agent preset (63-bit digests)", b_dig.n_turns, t_dig,
             t_ref * scale, None, note, section="verl-agent")
        _row(rows_out, "gigpo verl-agent preset from observation strings", b_dig.n_turns, t_txt, t_ref * scale, err,
             note, section="verl-agent")
        _row(rows_out, "  of which digest_strings", b_dig.n_turns, t_hash, None, None, "", section="verl-agent")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--sample-100k", action="store_true",
                    help="time the per-row references above 20k rows on 10%% of the groups and scale (faster)")
    ap.add_argument("--no-bipace", action="store_true", help="skip the BiPACE section (D=3584)")
    ap.add_argument("--no-verl-agent", action="store_true", help="skip the GiGPO vs verl-agent section")
    ap.add_argument("--markdown", action="store_true", help="print every row as a markdown table at the end")
    ap.add_argument("--readme", action="store_true", help="print the README's two tables at the end")
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    rows: list = []
    t0 = time.perf_counter()
    turn_table(args.sizes, args.quick, args.sample_100k, rows)
    if not args.no_verl_agent:
        verl_agent_section(args.sizes, args.quick, rows)
    if not args.no_bipace:
        bipace_section(args.quick, rows)
    print(f"total benchmark time {time.perf_counter() - t0:.1f} s, load average now {os.getloadavg()[0]:.2f}")
    if args.markdown:
        print()
        print(markdown(rows))
    if args.readme:
        print()
        print(readme_tables(rows))


if __name__ == "__main__":
    main()
