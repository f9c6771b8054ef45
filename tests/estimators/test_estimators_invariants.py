"""Spec section 8 invariants (I1-I11, I14) as hypothesis property tests on random batches.

I12 and I13 (aggregation, ratios) are in test_estimators_losses.py. Random batches vary group count, group size
(singletons included), trajectory length, reward kind (binary ties, continuous, all-equal, dense), observation
collisions, invalid actions, row order and token layout.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import estimators as E
from estimators.bipace import cluster_groups, pace_advantage
from estimators.gigpo import episode_term, step_returns, step_term
from estimators_testkit import Shape, make_batch, shapes, token_values_by_turn, traj_layout_from_step

SET = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Two labelings describe the same partition (up to relabeling)."""
    if a.shape != b.shape:
        return False
    pairs = np.unique(np.stack([a, b], 1), axis=0)
    return len(pairs) == len(np.unique(a)) == len(np.unique(b))


def _per_group_sums(values, labels):
    return np.bincount(labels, weights=np.asarray(values, dtype=np.float64))


# ----------------------------------------------------------------------------------------------- I1, I2, I3
@SET
@given(shapes(tokens=st.just(None)))
def test_I1_bigpo_identity_eps0_equals_gigpo_bit_for_bit(shape):
    b = make_batch(shape)
    g = E.compute_advantage("gigpo", b)
    # identity embedder (one-hot of obs_hash within the group)
    bi = E.compute_advantage("bigpo", b, embedder="identity", eps=0.0, atol=1e-6)
    assert np.array_equal(g.turn_adv, bi.turn_adv)
    # the same through the real greedy clustering on explicit one-hot float32 fingerprints
    uniq, inv = np.unique(b.obs_hash, return_inverse=True)
    onehot = np.eye(uniq.size, dtype=np.float32)[inv.reshape(-1)]
    be = E.TrajectoryBatch(**{**b.to_dict(), "embedding": onehot})
    bg = E.compute_advantage("bigpo", be, embedder="embedding", eps=0.0, atol=1e-6)
    assert np.array_equal(g.turn_adv, bg.turn_adv)


@SET
@given(st.integers(1, 60), st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_I1_greedy_partition_equals_hash_partition_for_any_order(n, n_hash, seed):
    rng = np.random.default_rng(seed)
    h = rng.integers(0, n_hash, size=n)
    x = np.eye(n_hash, dtype=np.float32)[h]
    for _ in range(3):
        perm = rng.permutation(n)
        lab = E.greedy_cosine_clusters(x[perm], eps=0.0, atol=1e-6)
        assert _same_partition(lab, h[perm])


@SET
@given(st.integers(1, 40), st.integers(1, 8), st.integers(2, 64), st.integers(0, 2**31 - 1))
def test_I2_float32_duplicates_always_merge_at_eps0(n, n_base, dim, seed):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n_base, dim))
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    base32 = base.astype(np.float32)  # float32 copies of the same normalized vectors
    # keep only well-separated bases so that distinct bases never merge at eps = 0
    which = rng.integers(0, n_base, size=n)
    lab = E.greedy_cosine_clusters(base32[which], eps=0.0, atol=1e-6)
    dots = base @ base.T
    np.fill_diagonal(dots, 0)
    if np.all(1 - dots > 1e-3):
        assert _same_partition(lab, which)
    else:  # near-identical bases may merge; duplicates still never split
        for w in np.unique(which):
            assert len(np.unique(lab[which == w])) == 1
    # the direct (non-Gram) path agrees
    from estimators.bipace import _greedy_direct
    assert _same_partition(_greedy_direct(base32[which].astype(np.float64), 1e-6), lab)


@SET
@given(st.integers(1, 120), st.integers(2, 24), st.floats(0.0, 0.8), st.sampled_from([1, 3, 32]),
       st.integers(0, 2**31 - 1))
def test_blocked_greedy_equals_literal_algorithm_1(n, dim, eps, block, seed):
    from estimators.bipace import _greedy_blocked, _greedy_direct
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(4, dim))
    x = centers[rng.integers(0, 4, size=n)] + 0.4 * rng.normal(size=(n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    assert np.array_equal(_greedy_blocked(x, eps + 1e-6, block), _greedy_direct(x, eps + 1e-6))


@SET
@given(st.integers(2, 50), st.integers(2, 16), st.floats(0.01, 0.6), st.integers(0, 2**31 - 1))
def test_I3_greedy_is_deterministic_in_canonical_order(n, dim, eps, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    a = E.greedy_cosine_clusters(x, eps)
    b = E.greedy_cosine_clusters(x.copy(), eps)
    assert np.array_equal(a, b)
    # labels are numbered in order of opening, and every member is within eps of something (it joined or opened)
    assert a[0] == 0 and np.all(np.diff(np.maximum.accumulate(a)) <= 1)


@SET
@given(shapes(tokens=st.just(None)), st.floats(0.0, 0.5))
def test_I3_bigpo_deterministic_on_a_batch(shape, eps):
    b = make_batch(shape, emb_dim=6)
    r1 = E.compute_advantage("bipace", b, eps=eps)
    r2 = E.compute_advantage("bipace", b, eps=eps)
    assert np.array_equal(r1.turn_adv, r2.turn_adv)


# ----------------------------------------------------------------------------------------------- I4
@SET
@given(shapes(), st.booleans())
def test_I4_outcome_zero_sum_and_rloo_ratio(shape, verl_compat):
    b = make_batch(shape)
    res = {n: E.compute_advantage(n, b) for n in ("grpo", "dr_grpo", "rloo")}
    first_rows = b.canonical_order[b.traj_start]
    G = b.group_n_traj[b.traj_group]
    for name, r in res.items():
        per_traj = r.turn_adv[first_rows].astype(np.float64)
        sums = _per_group_sums(per_traj, b.traj_group)
        scale = np.bincount(b.traj_group, weights=np.abs(per_traj)) + 1
        assert np.all(np.abs(sums) <= 1e-5 * scale), name
        # every turn of a trajectory carries the trajectory's value
        assert np.array_equal(r.turn_adv, r.turn_adv[first_rows][b.traj_index])
    dr = res["dr_grpo"].turn_adv[first_rows].astype(np.float64)
    rl = res["rloo"].turn_adv[first_rows].astype(np.float64)
    multi = G >= 2
    np.testing.assert_allclose(rl[multi], (G[multi] / (G[multi] - 1)) * dr[multi], rtol=1e-5, atol=1e-6)
    assert np.all(rl[~multi] == 0) and np.all(dr[~multi] == 0)
    if verl_compat:  # verl's convention: singleton -> raw reward
        r = E.compute_advantage("grpo", b, verl_compat=True).turn_adv[first_rows]
        np.testing.assert_allclose(r[~multi], b.traj_return[~multi], rtol=1e-6)


# ----------------------------------------------------------------------------------------------- I5
@SET
@given(shapes(tokens=st.just(None)), st.sampled_from(["mean_norm", "mean_std_norm"]), st.floats(0.1, 10.0))
def test_I5_gigpo_step_term(shape, mode, a):
    b = make_batch(shape)
    cfg = E.GiGPOConfig(mode=mode)
    ret = step_returns(b, cfg.gamma, cfg.invalid_action_penalty, "t")
    cl, n_c = E.group_labels(b.group_index, b.obs_hash)
    st_ = step_term(ret, cl, n_c, mode)
    size = np.bincount(cl, minlength=n_c)
    sums = np.bincount(cl, weights=st_, minlength=n_c)
    assert np.all(np.abs(sums) <= 1e-9 * (1 + np.bincount(cl, weights=np.abs(st_), minlength=n_c)))
    assert np.all(st_[size[cl] == 1] == 0)
    rmax = np.full(n_c, -np.inf)
    rmin = np.full(n_c, np.inf)
    np.maximum.at(rmax, cl, ret)
    np.minimum.at(rmin, cl, ret)
    assert np.all(st_[(rmax == rmin)[cl]] == 0)
    # the estimator is episode term + w * step term
    full = E.compute_advantage("gigpo", b, mode=mode, step_advantage_w=0.5).turn_adv
    expect = episode_term(b, cfg, "t") + 0.5 * st_
    np.testing.assert_allclose(full, expect, rtol=1e-6, atol=1e-6)
    # scaling the returns by a > 0
    st_a = step_term(a * ret, cl, n_c, mode)
    if mode == "mean_norm":
        np.testing.assert_allclose(st_a, a * st_, rtol=1e-9, atol=1e-12)
    else:
        std = np.sqrt(np.bincount(cl, weights=(ret - (np.bincount(cl, ret) / size)[cl]) ** 2) / np.maximum(size - 1, 1))
        # "up to delta": the relative change is about delta / (min(a, 1) sigma)
        ok = std[cl] * min(a, 1.0) > 1e-2
        np.testing.assert_allclose(st_a[ok], st_[ok], rtol=1e-3, atol=1e-6)


# ----------------------------------------------------------------------------------------------- I6
@st.composite
def clustered_returns(draw):
    n = draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n_c = draw(st.integers(1, 6))
    cluster = rng.integers(0, n_c, size=n)
    _, cluster = np.unique(cluster, return_inverse=True)
    kind = draw(st.sampled_from(["binary", "float", "ties"]))
    if kind == "binary":
        R = rng.integers(0, 2, size=n).astype(float)
    elif kind == "ties":
        R = rng.choice([0.0, 0.25, 1.0], size=n)
    else:
        R = rng.normal(size=n)
    keys = rng.integers(0, draw(st.integers(1, 4)), size=n)
    return R, cluster.reshape(-1), int(cluster.max()) + 1, keys


@SET
@given(clustered_returns())
def test_I6_pace_identities(data):
    R, cl, n_c, keys = data
    size = np.bincount(cl, minlength=n_c)
    multi = size[cl] >= 2
    tol = 1e-9
    # q with fallback "none" is zero-sum in every cluster
    q_none, _ = pace_advantage(R, cl, n_c, keys, "q", "none")
    assert np.all(np.abs(np.bincount(cl, q_none, n_c)) < tol * (1 + size))
    # singletons give 0 for every variant
    for est in ("q", "diff"):
        for fb in ("rloo", "none"):
            adv, _ = pace_advantage(R, cl, n_c, keys, est, fb)
            assert np.all(adv[~multi] == 0)
    # distinct keys in every cluster
    distinct = np.arange(R.size)
    mean_norm = step_term(R, cl, n_c, "mean_norm")
    q_none_d, _ = pace_advantage(R, cl, n_c, distinct, "q", "none")
    np.testing.assert_allclose(q_none_d, mean_norm, rtol=0, atol=1e-12)
    q_rloo_d, _ = pace_advantage(R, cl, n_c, distinct, "q", "rloo")
    diff_d, _ = pace_advantage(R, cl, n_c, distinct, "diff", "rloo")
    rloo = E.group_normalize(R, cl, n_c, mode="loo")
    np.testing.assert_allclose(q_rloo_d, diff_d, rtol=0, atol=1e-12)
    np.testing.assert_allclose(diff_d, rloo, rtol=1e-9, atol=1e-12)
    scale = np.where(multi, size[cl] / np.maximum(size[cl] - 1, 1), 0.0)
    np.testing.assert_allclose(diff_d, scale * mean_norm, rtol=1e-9, atol=1e-12)
    # a single key per cluster: |C=(i)| = |C| >= 2 on every multi-member row, so no row falls back and
    # Q - V = mean_C R - mean_C R = 0 (not mean_norm); diff has no different-key peer and falls back to RLOO everywhere
    one = np.zeros(R.size, dtype=np.int64)
    q_one, d1 = pace_advantage(R, cl, n_c, one, "q", "rloo")
    q_one_none, _ = pace_advantage(R, cl, n_c, one, "q", "none")
    diff_one, d2 = pace_advantage(R, cl, n_c, one, "diff", "rloo")
    np.testing.assert_allclose(q_one, 0.0, atol=1e-12)
    np.testing.assert_allclose(q_one_none, 0.0, atol=1e-12)
    assert d1["frac_rows_fallback"] == 0.0 and d1["frac_rows_pace"] == pytest.approx(np.mean(multi))
    np.testing.assert_allclose(diff_one, rloo, rtol=1e-9, atol=1e-12)
    assert d2["frac_rows_pace"] == 0.0 and d2["frac_rows_fallback"] == pytest.approx(np.mean(multi))
    # q (RLOO fallback) is zero-sum in every cluster where no row falls back (every key there occurs twice or more)
    q, _ = pace_advantage(R, cl, n_c, keys, "q", "rloo")
    _, ck = np.unique(np.stack([cl, keys], 1), axis=0, return_inverse=True)
    n_eq = np.bincount(ck.reshape(-1))[ck.reshape(-1)]
    no_fallback = np.bincount(cl, weights=(n_eq < 2) & multi, minlength=n_c) == 0
    sums = np.bincount(cl, q, n_c)
    assert np.all(np.abs(sums[no_fallback]) < tol * (1 + size[no_fallback]))


def test_I6_q_is_not_zero_sum_with_fallback_rows():
    # counterexample of spec I6: R = (1, 0, 0, 0.5), keys (a, b, b, c) in one cluster
    # V = 0.375; a: |C=| = 1 -> RLOO 1 - (0+0+0.5)/3 = 0.8333; b: Q - V = 0 - 0.375 (x2); c: RLOO 0.5 - 1/3
    # sum = 0.8333 - 0.75 + 0.1667 = 0.25
    R = np.array([1.0, 0.0, 0.0, 0.5])
    adv, _ = pace_advantage(R, np.zeros(4, dtype=np.int64), 1, np.array([1, 2, 2, 3]), "q", "rloo")
    np.testing.assert_allclose(adv, [1 - 0.5 / 3, -0.375, -0.375, 0.5 - 1 / 3])
    assert adv.sum() == pytest.approx(0.25)


def _with_invalid(shape: Shape) -> Shape:
    """The drawn shape with 30% invalid actions (the penalty then moves the returns-to-go)."""
    return Shape(**{**shape.__dict__, "p_invalid": 0.3})


@SET
@given(shapes(tokens=st.just(None)))
def test_I6_pace_identities_on_batches(shape):
    """I6 through the estimator on random batches (invalid actions, ties, singletons): the step part of BiPACE is
    (result with w = 1) - (result with w = 0), on the exact-hash clusters (identity embedder)."""
    b = make_batch(_with_invalid(shape))
    kw = dict(embedder="identity", mode="mean_norm")

    def step(batch, **extra):
        full = E.compute_advantage("bipace", batch, **kw, **extra).turn_adv.astype(np.float64)
        ep = E.compute_advantage("bipace", batch, **kw, **extra, step_advantage_w=0.0).turn_adv.astype(np.float64)
        return full - ep

    cl, n_c = E.group_labels(b.group_index, b.obs_hash)
    size = np.bincount(cl, minlength=n_c)
    tol = 1e-5 * (1 + size)
    # q with fallback "none" sums to 0 in every cluster; singletons get 0
    q_none = step(b, pace="q", fallback="none")
    assert np.all(np.abs(np.bincount(cl, q_none, n_c)) < tol)
    assert np.all(q_none[size[cl] == 1] == 0)
    # distinct keys in every cluster: q/none = GiGPO mean_norm; q/rloo = diff = |C|/(|C|-1) mean_norm
    bd = b.replace(action_key=np.arange(b.n_turns))
    gig = E.compute_advantage("gigpo", bd, mode="mean_norm").turn_adv.astype(np.float64)
    np.testing.assert_allclose(E.compute_advantage("bipace", bd, **kw, pace="q", fallback="none").turn_adv, gig,
                               rtol=1e-6, atol=1e-6)
    diff_d = step(bd, pace="diff")
    np.testing.assert_allclose(step(bd, pace="q"), diff_d, rtol=1e-6, atol=1e-6)
    gig_step = gig - E.compute_advantage("gigpo", bd, mode="mean_norm", step_advantage_w=0.0).turn_adv
    scale = np.where(size[cl] >= 2, size[cl] / np.maximum(size[cl] - 1, 1), 0.0)
    np.testing.assert_allclose(diff_d, scale * gig_step, rtol=1e-5, atol=1e-5)
    # a single key: q = 0 on every row (the result is the episode term), diff never takes the PACE branch
    b1 = b.replace(action_key=np.zeros(b.n_turns, np.int64))
    np.testing.assert_allclose(step(b1, pace="q"), 0.0, atol=1e-6)
    assert E.compute_advantage("bipace", b1, **kw, pace="diff").diagnostics["frac_rows_pace"] == 0.0


@SET
@given(shapes(tokens=st.just(None)), st.integers(2, 16), st.integers(0, 2**31 - 1))
def test_I2_float32_duplicates_merge_through_the_batch(shape, dim, seed):
    """I1 + I2 on random batches: float32 fingerprints that are scaled copies of one direction per obs_hash
    (normalized by the batch in float32, so copies differ in the last bits) merge at eps = 0, atol = 1e-6, and the
    BiGPO advantages equal GiGPO's bit for bit (invalid actions, ties, singletons included)."""
    b = make_batch(_with_invalid(shape))
    rng = np.random.default_rng(seed)
    hashes, inv = np.unique(b.obs_hash, return_inverse=True)
    base = rng.normal(size=(hashes.size, dim))
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    dots = base @ base.T
    np.fill_diagonal(dots, 0)
    assume_separated = np.all(1 - dots > 1e-3)
    emb = (base[inv.reshape(-1)] * rng.uniform(0.05, 20.0, size=(b.n_turns, 1))).astype(np.float32)
    be = b.replace(embedding=emb)
    if assume_separated:
        g = E.compute_advantage("gigpo", b)
        bg = E.compute_advantage("bigpo", be, eps=0.0, atol=1e-6)
        assert np.array_equal(g.turn_adv, bg.turn_adv)
    # duplicates never split, whatever the other directions do
    labels, _ = cluster_groups(be, 0.0, 1e-6)
    pairs = np.unique(np.stack([b.group_index, inv.reshape(-1), labels], 1), axis=0)
    assert len(pairs) == len(np.unique(np.stack([b.group_index, inv.reshape(-1)], 1), axis=0))


def _rows(b: E.TrajectoryBatch, perm: np.ndarray) -> E.TrajectoryBatch:
    return E.TrajectoryBatch(**{k: v[perm] for k, v in b.to_dict().items()})


@SET
@given(shapes(tokens=st.just(None)), st.floats(0.01, 0.6), st.integers(0, 2**31 - 1))
def test_I3_order_on_batches(shape, eps, seed):
    """I3 on random batches: for eps > 0 the result is a function of the canonical order (rows laid out in
    canonical order, or with each trajectory's rows reversed, give the same values bit for bit); permutation
    invariance holds in I1's setting (one-hot fingerprints, eps = 0) for any row order."""
    b = make_batch(_with_invalid(shape), emb_dim=6)
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=(b.n_turns, 6)).astype(np.float32)
    b = b.replace(embedding=raw)
    ref = E.compute_advantage("bipace", b, eps=eps).turn_adv
    canon = b.canonical_order
    np.testing.assert_array_equal(E.compute_advantage("bipace", _rows(b, canon), eps=eps).turn_adv, ref[canon])
    # each trajectory's rows reversed, trajectories kept in canonical order: same canonical order, same values
    rev = np.concatenate([seg[::-1] for seg in np.split(canon, np.sort(b.traj_start)[1:])]) if b.n_turns else canon
    np.testing.assert_array_equal(E.compute_advantage("bipace", _rows(b, rev), eps=eps).turn_adv, ref[rev])
    # I1's setting: one-hot fingerprints at eps = 0 are invariant to any permutation of the rows
    _, inv = np.unique(b.obs_hash, return_inverse=True)
    bo = b.replace(embedding=np.eye(inv.max() + 1, dtype=np.float32)[inv.reshape(-1)])
    r1 = E.compute_advantage("bipace", bo, eps=0.0).turn_adv
    perm = rng.permutation(b.n_turns)
    np.testing.assert_array_equal(E.compute_advantage("bipace", _rows(bo, perm), eps=0.0).turn_adv, r1[perm])


# ----------------------------------------------------------------------------------------------- I7
@SET
@given(shapes(), st.floats(0.0, 0.9), st.floats(0.0, 1.0), st.sampled_from([1.0, 0.9]))
def test_I7_a2tgpo(shape, lam, alpha, gamma):
    b = make_batch(shape)
    cfg = E.A2TGPOConfig(clip_lambda=lam, alpha=alpha, gamma=gamma)
    p = E.a2tgpo_components(b, cfg)
    proc = p["process"]
    ig = p["ig_norm"]
    lab, n_lab = E.group_labels(b.group_index[proc], p["ordinal"][proc])
    size = np.bincount(lab, minlength=n_lab)
    sums = np.bincount(lab, weights=ig[proc], minlength=n_lab)
    assert np.all(np.abs(sums) < 1e-6 * (1 + size))
    assert np.all(ig[proc][size[lab] == 1] == 0)
    k = p["kappa"]
    assert np.all((k >= 1 - lam) & (k <= 1 + lam))
    assert np.all(k[~proc] == 1.0) and np.all(k[proc & (ig == 0)] == 1.0)
    o = np.argsort(ig[proc], kind="stable")
    assert np.all(np.diff(k[proc][o]) >= 0)  # kappa increases with I~
    a_out_rows = p["outcome_adv"][b.traj_index]
    assert np.array_equal(p["adv"][~proc], a_out_rows[~proc])
    r = E.compute_advantage("a2tgpo", b, clip_lambda=lam, alpha=alpha, gamma=gamma)
    np.testing.assert_allclose(r.turn_adv, p["adv"].astype(np.float32))
    # alpha = 0: every turn carries the outcome advantage
    p0 = E.a2tgpo_components(b, E.A2TGPOConfig(alpha=0.0))
    assert np.array_equal(p0["adv"], a_out_rows)
    # equal IG within every turn group: A = A_out
    ig_const = np.where(np.isnan(b.info_gain), np.nan, 0.3).astype(np.float32)
    be = E.TrajectoryBatch(**{**b.to_dict(), "info_gain": ig_const})
    pe = E.a2tgpo_components(be, cfg)
    assert np.array_equal(pe["adv"], a_out_rows)
    if r.clip_scale is not None:
        assert np.all(r.clip_scale[~b.response_mask] == 1.0)


# ----------------------------------------------------------------------------------------------- I8
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes(tokens=st.sampled_from(["step", "traj"])), st.floats(0.0, 3.0), st.floats(1.0, 4.0),
       st.sampled_from(["rkl", "fkl", "jsd"]))
def test_I8_sgcd(shape, gamma_s, c, div):
    b = make_batch(shape, sgcd=True, K=6)
    r = E.compute_advantage("sgcd", b, top_k=6, gamma_s=gamma_s, c=c, divergence=div)
    g = E.compute_advantage("grpo", b)
    m = b.response_mask
    W = r.token_weight[m].astype(np.float64)
    assert np.all((W >= 1.0) & (W <= c + 1e-6))
    A = np.where(r.keep_group[b.group_index], g.turn_adv, 0.0)[b.token_row[m]].astype(np.float64)
    At = r.token_adv[m].astype(np.float64)
    assert np.all(np.sign(At) == np.sign(A))
    assert np.all(np.abs(At) >= np.abs(A) * (1 - 1e-6)) and np.all(np.abs(At) <= c * np.abs(A) * (1 + 1e-6) + 1e-7)
    assert np.all(W[b.credit_mask[m]] == 1.0)
    assert np.all(r.token_adv[~m] == 0)
    # gamma_s = 0 or c = 1 give exactly GRPO (on the mixed groups; the others are all-equal, hence 0 anyway)
    for kw in ({"gamma_s": 0.0}, {"c": 1.0}):
        r0 = E.compute_advantage("sgcd", b, top_k=6, **kw)
        assert np.array_equal(r0.token_adv, g.token_adv)
    # s in [0, 1], and W = 1 wherever s = 0
    from estimators.sgcd import segment_scores, support_divergence
    bi, li = np.nonzero(m)
    d, H, _, _ = support_divergence(b.teacher_topk_logprob[bi, li], b.student_logprob_on_teacher_topk[bi, li],
                                    b.teacher_logprob_obs[bi, li], b.student_logprob_obs[bi, li],
                                    b.obs_in_topk[bi, li], div)
    s, dn, _ = segment_scores(d, H, bi * 100 + b.token_turn_idx[bi, li], li)
    assert np.all((s >= 0) & (s <= 1))
    keep_tok = r.keep_group[b.group_index[b.token_row[bi, li]]]
    assert np.all(W[(s == 0) & keep_tok] == 1.0)


# ----------------------------------------------------------------------------------------------- I9
@SET
@given(shapes(tokens=st.just(None)), st.floats(0.0, 1.0), st.booleans())
def test_I9_gvpo(shape, bval, std_norm):
    b = make_batch(shape)
    r = E.compute_advantage("gvpo", b, b=bval, std_norm=std_norm).turn_adv.astype(np.float64)
    base = E.compute_advantage("grpo" if std_norm else "dr_grpo", b).turn_adv.astype(np.float64)
    ok = b.process_ok != 0
    np.testing.assert_allclose(r[ok], base[ok], rtol=1e-6, atol=1e-7)
    fail = ~ok
    assert np.all(r[fail] <= 0)
    neg = fail & (base < -1e-6)
    np.testing.assert_allclose(np.abs(r[neg]), (1 + bval) * np.abs(base[neg]), rtol=1e-5)
    pos = fail & (base > 1e-6)
    assert np.all(r[pos] == 0)  # b = 0 included: not Dr.GRPO
    zero = fail & (base == 0)
    np.testing.assert_allclose(r[zero], np.float32(-bval), rtol=1e-6, atol=1e-30)


# ----------------------------------------------------------------------------------------------- I10
@SET
@given(shapes(), st.floats(-1.0, 1.0))
def test_I10_pvpo(shape, v0):
    b = make_batch(shape)
    tasks = np.unique(b.task_id)
    table = E.StaticValueTable({int(t): float(v0 + 0.1 * i) for i, t in enumerate(tasks)})
    a = E.compute_advantage("pvpo", b, v_table=table).turn_adv.astype(np.float64)
    dr = E.compute_advantage("dr_grpo", b).turn_adv.astype(np.float64)
    diff = a - dr
    mean_R = np.bincount(b.traj_group, b.traj_return) / b.group_n_traj
    v_rows = table.lookup(b.task_id)
    np.testing.assert_allclose(diff, (mean_R[b.group_index] - v_rows), rtol=1e-5, atol=1e-5)
    # V = mean(R) of each group gives Dr.GRPO
    table_mean = E.StaticValueTable({int(b.task_id[b.group_index == g][0]): float(mean_R[g]) for g in range(b.n_groups)})
    a2 = E.compute_advantage("pvpo", b, v_table=table_mean).turn_adv
    np.testing.assert_allclose(a2, dr, rtol=1e-5, atol=1e-5)


@SET
@given(shapes())
def test_I10_gt_injection_at_most_one_per_group_only_when_all_failed(shape):
    b = make_batch(shape)
    with_gt = set(np.unique(b.task_id).tolist())
    chosen = E.select_gt_injections(b, with_gt)
    succ = b.traj_value("success")
    all_failed = np.bincount(b.traj_group, weights=succ, minlength=b.n_groups) == 0
    chosen_dense = np.searchsorted(b.traj_ids_sorted, chosen)
    chosen_dense = b.traj_sorted_to_dense[chosen_dense]
    groups = b.traj_group[chosen_dense]
    assert len(np.unique(groups)) == len(groups)
    assert set(groups.tolist()) == set(np.flatnonzero(all_failed).tolist())
    if len(chosen) == 0:
        return
    L = b.response_mask.shape[1] if b.has_tokens else 4
    gt = E.GTTrajectory(n_turns=2, token={"response_mask": np.ones((1, min(3, L)), bool),
                                          "token_turn_idx": np.array([[0, 1, 1][:min(3, L)]]),
                                          "old_logprob": np.full((1, min(3, L)), -0.5)})
    nb = E.inject_gt(b, {int(t): gt for t in chosen})
    assert nb.n_trajectories == b.n_trajectories
    gt_traj = nb.traj_value("is_gt")
    per_group = np.bincount(nb.traj_group, weights=gt_traj, minlength=nb.n_groups)
    assert per_group.max() <= 1
    assert np.all(nb.traj_return[gt_traj] == 1.0)
    # canonical order of the group is kept: the GT trajectory is first in its all-failed group
    first = nb.traj_index[nb.canonical_order[nb.traj_start[gt_traj]]]
    assert np.all(nb.traj_ids[first] == nb.traj_ids[gt_traj])
    E.compute_advantage("pvpo", nb, v_table=E.StaticValueTable({int(t): 0.0 for t in with_gt}))


# ----------------------------------------------------------------------------------------------- I11
@SET
@given(shapes(tokens=st.sampled_from(["step", "traj"])),
       st.sampled_from(["grpo", "gigpo", "a2tgpo", "gvpo", "bipace", "hgpo"]))
def test_I11_broadcast(shape, name):
    b = make_batch(shape, emb_dim=4)
    kw = {"embedder": "identity"} if name == "bipace" else {}
    r = E.compute_advantage(name, b, **kw)
    m = b.response_mask
    assert np.array_equal(r.token_adv[m], r.turn_adv[b.token_row[m]])
    assert np.all(r.token_adv[~m] == 0)
    # sum over a turn's tokens = |y_k| * A_k
    rows = b.token_row[m]
    sums = np.bincount(rows, weights=r.token_adv[m].astype(np.float64), minlength=b.n_turns)
    cnt = np.bincount(rows, minlength=b.n_turns)
    np.testing.assert_allclose(sums, cnt * r.turn_adv.astype(np.float64), rtol=1e-6, atol=1e-6)


@SET
@given(shapes(tokens=st.just("step")))
def test_I11_two_layouts_give_the_same_token_values(shape):
    """The same tokens laid out as step rows and as trajectory rows (observation gaps between the turns) get the
    same value on every response token: token_adv, and A2TGPO's clip scale and SGCD's W where they exist."""
    step = make_batch(shape, sgcd=True, K=6)
    traj = traj_layout_from_step(step)
    assert traj.response_mask.sum() == step.response_mask.sum()
    for name, kw in (("grpo", {}), ("gigpo", {}), ("a2tgpo", {}), ("bipace", {"embedder": "identity"}),
                     ("sgcd", {"top_k": 6})):
        rs = E.compute_advantage(name, step, **kw)
        rt = E.compute_advantage(name, traj, **kw)
        assert np.array_equal(rs.turn_adv, rt.turn_adv), name
        for field in ("token_adv", "clip_scale", "token_weight", "loss_mask"):
            vs, vt = getattr(rs, field), getattr(rt, field)
            assert (vs is None) == (vt is None), (name, field)
            if vs is not None:
                assert np.array_equal(token_values_by_turn(step, vs), token_values_by_turn(traj, vt)), (name, field)
        # and in each layout every token carries its turn's value
        for r, bb in ((rs, step), (rt, traj)):
            m = bb.response_mask
            if name != "sgcd":
                assert np.array_equal(r.token_adv[m], r.turn_adv[bb.token_row[m]])


# ----------------------------------------------------------------------------------------------- I14
@SET
@given(shapes(), st.sampled_from(["success", "reward"]))
def test_I14_filters(shape, on):
    b = make_batch(shape)
    r = E.compute_advantage("dapo", b, filter_on=on)
    vals = b.traj_value("success") if on == "success" else b.traj_return
    for g in range(b.n_groups):
        members = b.traj_group == g
        v = vals[members]
        if r.keep_group[g]:
            assert v.std() > 0
            assert np.any(r.turn_adv[b.group_index == g] != 0)
        else:
            assert np.all(v == v[0])
            assert not r.turn_mask[b.group_index == g].any()
            if b.has_tokens:
                rows = np.isin(b.token_row, np.flatnonzero(b.group_index == g))
                assert not r.loss_mask[rows].any()


# ----------------------------------------------------------------------------------------------- common
@SET
@given(shapes(), st.sampled_from(sorted(set(E.available()) - {"sgcd", "pvpo"})))
def test_outputs_are_float32_finite_and_pure(shape, name):
    b = make_batch(shape, emb_dim=5)
    before = {k: v.copy() for k, v in b.to_dict().items()}
    r = E.compute_advantage(name, b)
    assert r.turn_adv.dtype == np.float32 and np.all(np.isfinite(r.turn_adv))
    assert r.turn_adv.shape == (b.n_turns,)
    if b.has_tokens:
        assert r.token_adv.dtype == np.float32 and r.token_adv.shape == b.response_mask.shape
        assert not r.loss_mask[~b.response_mask].any()
    for k, v in b.to_dict().items():
        assert np.array_equal(v, before[k], equal_nan=True), k
    for k, v in r.diagnostics.items():
        assert np.isfinite(v), (name, k)
    # all-equal rewards: every normalized outcome term is 0
    if shape.reward_kind == "equal" and name in ("grpo", "dr_grpo", "rloo", "dapo"):
        assert np.all(r.turn_adv == 0)


@pytest.mark.parametrize("name", sorted(E.available()))
def test_empty_batch(name):
    z = np.zeros(0)
    b = E.TrajectoryBatch(group_id=z, traj_id=z, turn_idx=z, reward=z, done=z.astype(bool), task_id=z,
                          obs_hash=z, valid_action=z.astype(bool), action_key=z, process_ok=z, info_gain=z,
                          success=z, embedding=np.zeros((0, 3)))
    kw = {"v_table": E.StaticValueTable({})} if name == "pvpo" else {}
    if name == "sgcd":
        with pytest.raises(E.MissingColumnError):
            E.compute_advantage(name, b)
        return
    r = E.compute_advantage(name, b, **kw)
    assert r.turn_adv.shape == (0,)
    assert r.diagnostics["n_groups"] == 0
    assert all(np.isfinite(v) for v in r.diagnostics.values())


@SET
@given(st.integers(1, 300), st.integers(1, 3), st.sampled_from([2, 7, 1000, 2**62]), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_group_labels_match_unique_rows(n, n_keys, hi, negative, seed):
    rng = np.random.default_rng(seed)
    keys = [rng.integers(0, hi, size=n) - (2**40 if negative and i == 0 else 0) for i in range(n_keys)]
    lab, n_lab = E.group_labels(*keys)
    _, inv = np.unique(np.stack(keys, 1), axis=0, return_inverse=True)
    assert n_lab == inv.max() + 1 and np.array_equal(lab, inv.reshape(-1))
