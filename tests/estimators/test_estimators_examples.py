"""Small worked examples per estimator, computed by hand from the paper / spec equations (arithmetic in comments)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import estimators as E

from estimators_examples_kit import D, batch


def test_primitives():
    # return-to-go, gamma = 0.5: rewards (1, 0, 2) -> R2 = 2, R1 = 0 + 0.5*2 = 1, R0 = 1 + 0.5*1 = 1.5
    rtg = E.return_to_go(np.array([0.0, 2.0, 1.0, 5.0]), np.array([1, 1, 1, 2]), np.array([1, 2, 0, 0]), 0.5)
    np.testing.assert_allclose(rtg, [1.0, 2.0, 1.5, 5.0])
    # group normalization of (1, 2, 3) and a singleton (7)
    x = np.array([1.0, 2.0, 3.0, 7.0])
    lab = np.array([0, 0, 0, 1])
    np.testing.assert_allclose(E.group_normalize(x, lab, mode="mean_norm"), [-1, 0, 1, 0])
    # ddof=1: std = 1 -> (x - 2) / (1 + 1e-6)
    np.testing.assert_allclose(E.group_normalize(x, lab), [-1 / (1 + D), 0, 1 / (1 + D), 0])
    # loo: x - mean(others): 1 - 2.5, 2 - 2, 3 - 1.5
    np.testing.assert_allclose(E.group_normalize(x, lab, mode="loo"), [-1.5, 0, 1.5, 0])
    np.testing.assert_allclose(E.group_normalize(x, lab, mode="loo", singleton="raw")[3], 7.0)
    # equal values give exact zeros (0.1 three times: a naive mean leaves 1e-17 residues)
    assert np.all(E.group_normalize(np.full(3, 0.1), np.zeros(3, np.int64)) == 0)
    # broadcast: token_row -1 -> 0
    np.testing.assert_array_equal(E.broadcast_to_tokens(np.array([[0, 1, -1]]), np.array([2.0, 3.0])), [[2, 3, 0]])


def test_grpo_dr_grpo_rloo():
    # group 0: R = (1, 0, 0); mu = 1/3; deviations (2/3, -1/3, -1/3); var(ddof=1) = (4/9 + 1/9 + 1/9)/2 = 1/3
    # group 5: a singleton -> 0 (verl_compat: its raw reward 0.7)
    b = batch([(0, 1, [0, 1], {}), (0, 2, [0, 0, 0], {}), (0, 3, [0], {}), (5, 4, [0.7], {})])
    sd = math.sqrt(1 / 3)
    g = E.compute_advantage("grpo", b).turn_adv
    np.testing.assert_allclose(g, [(2 / 3) / (sd + D)] * 2 + [(-1 / 3) / (sd + D)] * 4 + [0.0], rtol=1e-6)
    assert E.compute_advantage("grpo", b, verl_compat=True).turn_adv[-1] == pytest.approx(0.7)
    np.testing.assert_allclose(E.compute_advantage("dr_grpo", b).turn_adv, [2 / 3] * 2 + [-1 / 3] * 4 + [0],
                               rtol=1e-6)
    # RLOO: 1 - (0 + 0)/2 = 1; 0 - (1 + 0)/2 = -0.5
    np.testing.assert_allclose(E.compute_advantage("rloo", b).turn_adv, [1, 1, -0.5, -0.5, -0.5, -0.5, 0])
    assert E.compute_advantage("rloo", b, verl_compat=True).turn_adv[-1] == pytest.approx(0.7)
    # verl_compat is GRPO / RLOO only (spec 2.1): Dr.GRPO refuses it, through keywords and through config=
    with pytest.raises(E.ConfigError, match="dr_grpo does not take verl_compat.*grpo and rloo only"):
        E.compute_advantage("dr_grpo", b, verl_compat=True)
    with pytest.raises(E.ConfigError, match="verl_compat"):
        E.compute_advantage("dr_grpo", b, config=E.OutcomeConfig(verl_compat=True))
    r = E.compute_advantage("grpo", b)
    assert r.diagnostics["frac_groups_all_equal"] == 0.5 and r.diagnostics["n_groups"] == 2


def test_dapo_filter_and_overlong():
    # penalty with L_max = 10, L_cache = 4: |y| = 5 -> 0; |y| = 8 -> (6 - 8)/4 = -0.5; |y| = 12 -> -1
    np.testing.assert_allclose(E.overlong_penalty(np.array([5, 6, 8, 10, 12]), 10, 4), [0, 0, -0.5, -1, -1])
    trajs = [(0, 1, [1.0], {"success": 1.0}), (0, 2, [0.0], {"success": 0.0}),
             (1, 3, [0.0], {"success": 0.0}), (1, 4, [0.0], {"success": 0.0})]
    tok = dict(row_traj_id=np.array([1, 2, 3, 4]), response_mask=np.ones((4, 2), bool),
               token_turn_idx=np.zeros((4, 2), np.int64), response_len_tokens=np.array([5, 8, 12, 5]))
    b = batch(trajs, **tok)
    r = E.compute_advantage("dapo", b)
    # group 1 has uniform success -> filtered (loss mask 0, advantage 0)
    # group 0: R = (1, 0): deviations +-.5, std(ddof=1) = sqrt(.5) -> +-.5/(.70711 + 1e-6) = +-.70711
    assert r.keep_group.tolist() == [True, False] and r.diagnostics["n_groups_filtered"] == 1
    assert not r.loss_mask[2:].any() and r.loss_mask[:2].all()
    a = 0.5 / (math.sqrt(0.5) + D)
    np.testing.assert_allclose(r.turn_adv, [a, -a, 0, 0], rtol=1e-6)
    # with shaping (L_max=10, L_cache=4): R = (1 + 0, 0 - 0.5) = (1, -0.5), group 1: (-1, 0) but filtered on success
    r2 = E.compute_advantage("dapo", b, overlong_shaping=True, overlong_max=10, overlong_cache=4)
    sd = math.sqrt(((0.75) ** 2 * 2) / 1)  # deviations +-0.75, ddof=1
    np.testing.assert_allclose(r2.turn_adv[:2], [0.75 / (sd + D), -0.75 / (sd + D)], rtol=1e-6)


def test_dapo_overlong_filter():
    # group 0: R = (1, 0, 0), success (1, 0, 0); trajectory 3 was truncated (2 turns, its last one truncated)
    trajs = [(0, 1, [1.0], {"success": 1.0, "truncated": [False]}),
             (0, 2, [0.0], {"success": 0.0, "truncated": [False]}),
             (0, 3, [0.0, 0.0], {"success": 0.0, "truncated": [False, True]})]
    tok = dict(row_traj_id=np.array([1, 2, 3]), response_mask=np.ones((3, 2), bool),
               token_turn_idx=np.array([[0, 0], [0, 0], [0, 1]]))
    b = batch(trajs, **tok)
    # GRPO on R = (1, 0, 0): mean 1/3, std(ddof=1) = sqrt(1/3) -> (2/3, -1/3, -1/3) / (sqrt(1/3) + 1e-6)
    sd = math.sqrt(1 / 3) + D
    expect = [(2 / 3) / sd, (-1 / 3) / sd, (-1 / 3) / sd, (-1 / 3) / sd]
    plain = E.compute_advantage("dapo", b)
    np.testing.assert_allclose(plain.turn_adv, expect, rtol=1e-6)
    assert plain.loss_mask.all()
    # overlong_filter: the truncated trajectory keeps its advantage (it still counts in the group statistics) but
    # leaves the loss: turn mask and token loss mask 0 on both of its turns
    r = E.compute_advantage("dapo", b, overlong_filter=True)
    np.testing.assert_allclose(r.turn_adv, expect, rtol=1e-6)
    assert r.turn_mask.tolist() == [True, True, False, False]
    assert r.loss_mask.tolist() == [[True, True], [True, True], [False, False]]
    assert r.diagnostics["frac_traj_truncated"] == pytest.approx(1 / 3)
    with pytest.raises(E.MissingColumnError, match="'truncated'"):
        E.compute_advantage("dapo", b.replace(truncated=None), overlong_filter=True)


def test_gigpo_worked_example():
    # traj 1: obs (5, 6), rewards (0, 1); traj 2: obs (5, 6, 7), rewards (0, 0, 0), its turn 1 invalid
    b = batch([(0, 1, [0, 1], {"obs_hash": [5, 6], "valid_action": [1, 1]}),
               (0, 2, [0, 0, 0], {"obs_hash": [5, 6, 7], "valid_action": [1, 0, 1]})])
    # episode: R = (1, 0): mean .5, std(ddof=1) = sqrt(.5) -> +-.5/(.70711+1e-6)
    ep = 0.5 / (math.sqrt(0.5) + D)
    # returns-to-go, gamma = .95, penalty .1 on the invalid turn: traj 1: (.95, 1); traj 2: (-.095, -.1, 0)
    # cluster 5: (.95, -.095): dev +-.5225, std = .73892 -> +-.70711; cluster 6: (1, -.1): dev +-.55, std .77782
    s5 = 0.5225 / (math.sqrt(2 * 0.5225**2) + D)
    s6 = 0.55 / (math.sqrt(2 * 0.55**2) + D)
    r = E.compute_advantage("gigpo", b)
    np.testing.assert_allclose(r.turn_adv, [ep + s5, ep + s6, -ep - s5, -ep - s6, -ep], rtol=1e-6)
    assert r.diagnostics["n_step_clusters"] == 3 and r.diagnostics["singleton_record_frac"] == pytest.approx(0.2)
    assert r.diagnostics["matched_pair_volume"] == 2
    # mean_norm, w = 2, no penalty: step returns (.95, 1) vs (0, 0, 0): +-.475, +-.5
    r2 = E.compute_advantage("gigpo", b, mode="mean_norm", step_advantage_w=2.0, invalid_action_penalty=0.0)
    np.testing.assert_allclose(r2.turn_adv, [0.5 + 0.95, 0.5 + 1.0, -0.5 - 0.95, -0.5 - 1.0, -0.5], rtol=1e-6)
    # verl-agent's per-step episode statistics: rows (1, 1, 0, 0, 0): mean .4, std(ddof=1) = sqrt(.3)
    r3 = E.compute_advantage("gigpo", b, episode_stats="per_step", step_advantage_w=0.0)
    np.testing.assert_allclose(r3.turn_adv, [0.6 / (math.sqrt(0.3) + D)] * 2 + [-0.4 / (math.sqrt(0.3) + D)] * 3,
                               rtol=1e-6)
    # penalty_in_episode_term="per_row" (verl-agent): each row's episode score is R - .1 * invalid, so the invalid
    # row of traj 2 scores 0 - .1 = -.1. per_traj statistics use one score per trajectory (its first row: 1, 0):
    # mean .5, std sqrt(.5); the invalid row gets (-.1 - .5)/(sqrt(.5) + 1e-6) instead of -ep
    r4 = E.compute_advantage("gigpo", b, penalty_in_episode_term="per_row", step_advantage_w=0.0)
    np.testing.assert_allclose(r4.turn_adv, [ep, ep, -ep, -0.6 / (math.sqrt(0.5) + D), -ep], rtol=1e-6)
    # with per_step statistics: scores (1, 1, 0, -.1, 0): mean .38, deviations (.62, .62, -.38, -.48, -.38),
    # var(ddof=1) = (2 * .3844 + 2 * .1444 + .2304) / 4 = .322
    sd = math.sqrt(0.322) + D
    r5 = E.compute_advantage("gigpo", b, penalty_in_episode_term="per_row", episode_stats="per_step",
                             step_advantage_w=0.0)
    np.testing.assert_allclose(r5.turn_adv, np.array([0.62, 0.62, -0.38, -0.48, -0.38]) / sd, rtol=1e-6)
    # the default ("none") ignores the penalty in the episode term: r3 above; without a penalty "per_row" is a no-op
    r6 = E.compute_advantage("gigpo", b, penalty_in_episode_term="per_row", invalid_action_penalty=0.0)
    np.testing.assert_array_equal(r6.turn_adv, E.compute_advantage("gigpo", b, invalid_action_penalty=0.0).turn_adv)


def test_hgpo_worked_example():
    # trajectories A obs (1, 2), B obs (3, 2), C obs (4, 5); final rewards 1, 0, 0; gamma 1, mean_norm, K = 1
    b = batch([(0, 1, [0, 1], {"obs_hash": [1, 2]}), (0, 2, [0, 0], {"obs_hash": [3, 2]}),
               (0, 3, [0, 0], {"obs_hash": [4, 5]})])
    kw = dict(gamma=1.0, mode="mean_norm", history_length=1, alpha=1.0, invalid_action_penalty=0.0)
    # level 1 (current obs): only {A1, B1} (obs 2) is not a singleton: returns (1, 0) -> +-0.5
    # level 2 (obs pair): (1,2) vs (3,2) differ -> singletons -> 0, left out of the weights
    r = E.compute_advantage("hgpo", b, **kw)
    np.testing.assert_allclose(r.turn_adv, [0, 0.5, 0, -0.5, 0, 0])
    # base level k = 0: episode term (2/3, -1/3, -1/3), weight (0+1)^1 = 1; level 1 weight (1+1)^1 = 2
    # A1 = (1 * 2/3 + 2 * .5) / 3 = .5556; B1 = (1 * -1/3 + 2 * -.5) / 3 = -.4444
    r0 = E.compute_advantage("hgpo", b, base_level=True, **kw)
    np.testing.assert_allclose(r0.turn_adv, [2 / 3, (2 / 3 + 1) / 3, -1 / 3, (-1 / 3 - 1) / 3, -1 / 3, -1 / 3],
                               rtol=1e-6)


def _unit(deg):
    return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]


def test_greedy_cosine_clusters_worked_example():
    # eps = .1: x1 at 0 deg opens cluster 0. x2 at 20 deg: 1 - cos 20 = .0603 <= .1 -> joins; centroid -> 10 deg.
    # x3 at 45 deg: 1 - cos 35 = .181 > .1 -> opens cluster 1. x4 at 28 deg: cos 18 (cluster 0) < cos 17 (cluster 1)
    # -> cluster 1 (1 - cos 17 = .044 <= .1). Against x1 itself x4 would be 1 - cos 28 = .117: the centroid moved.
    x = np.array([_unit(0), _unit(20), _unit(45), _unit(28)])
    assert E.greedy_cosine_clusters(x, 0.1).tolist() == [0, 0, 1, 1]
    # eps = 0 splits all four; eps = 2 puts everything in one cluster
    assert E.greedy_cosine_clusters(x, 0.0).tolist() == [0, 1, 2, 3]
    assert E.greedy_cosine_clusters(x, 2.0).tolist() == [0, 0, 0, 0]


def test_bigpo_and_bipace_worked_example():
    # A: turns at 0 deg, 90 deg, reward 1; B: 10 deg, 80 deg, reward 0. eps = .1: {A0, B0}, {A1, B1}
    emb = np.array([_unit(0), _unit(90), _unit(10), _unit(80)], dtype=np.float32)
    b = batch([(0, 1, [0, 1], {"obs_hash": [1, 2], "action_key": [7, 7], "valid_action": True}),
               (0, 2, [0, 0], {"obs_hash": [1, 2], "action_key": [7, 8], "valid_action": True})], embedding=emb)
    g = E.compute_advantage("gigpo", b).turn_adv
    np.testing.assert_array_equal(E.compute_advantage("bigpo", b, eps=0.1).turn_adv, g)
    # eps = .01: every record is a singleton -> A = A_ep = +-.5/(sqrt(.5)+1e-6)
    ep = 0.5 / (math.sqrt(0.5) + D)
    np.testing.assert_allclose(E.compute_advantage("bigpo", b, eps=0.01).turn_adv, [ep, ep, -ep, -ep], rtol=1e-6)
    r = E.compute_advantage("bigpo", b, eps=0.1)
    assert r.diagnostics["eps_used"] == pytest.approx(0.1) and r.diagnostics["n_clusters_per_group"] == 2
    # PACE q: cluster {A0 (R=.95), B0 (0)} same key 7 -> Q = V -> 0; cluster {A1 (1), B1 (0)} keys 7, 8 ->
    # |C=| = 1 for both -> RLOO fallback: 1 - 0 = 1, 0 - 1 = -1
    q = E.compute_advantage("bipace", b, eps=0.1).turn_adv
    np.testing.assert_allclose(q, [ep + 0, ep + 1, -ep + 0, -ep - 1], rtol=1e-6)
    # diff: cluster 0 has no different-key peer -> RLOO .95 - 0 = .95, 0 - .95; cluster 1: 1 - 0, 0 - 1
    d = E.compute_advantage("bipace", b, eps=0.1, pace="diff").turn_adv
    np.testing.assert_allclose(d, [ep + 0.95, ep + 1, -ep - 0.95, -ep - 1], rtol=1e-6)


def test_bipace_counterexample_batch():
    # four single-turn rollouts in one state, keys (a, b, b, c), R = (1, 0, 0, .5) (spec I6)
    b = batch([(0, i + 1, [r], {"obs_hash": 3, "action_key": k, "valid_action": True})
               for i, (r, k) in enumerate(zip([1.0, 0.0, 0.0, 0.5], [1, 2, 2, 3]))])
    # episode term: mean .375, deviations (.625, -.375, -.375, .125), var(ddof=1) = .6875/3
    sd = math.sqrt(0.6875 / 3)
    ep = np.array([0.625, -0.375, -0.375, 0.125]) / (sd + D)
    q = ep + np.array([1 - 0.5 / 3, -0.375, -0.375, 0.5 - 1 / 3])
    r = E.compute_advantage("bipace", b, embedder="identity")
    np.testing.assert_allclose(r.turn_adv, q, rtol=1e-6)
    assert r.diagnostics["frac_rows_fallback"] == 0.5 and r.diagnostics["frac_rows_pace"] == 0.5
    assert r.diagnostics["mean_unique_keys_per_multi_cluster"] == 3
    # diff: a vs {b, b, c}: 1 - 1/6; b vs {a, c}: 0 - .75; c vs {a, b, b}: .5 - 1/3
    d = E.compute_advantage("bipace", b, embedder="identity", pace="diff")
    np.testing.assert_allclose(d.turn_adv, ep + np.array([1 - 1 / 6, -0.75, -0.75, 0.5 - 1 / 3]), rtol=1e-6)


def test_hash_ngram_and_action_keys():
    emb = E.HashNgram()
    v = emb(["go to kitchen", "go to kitchen", "open fridge", ""])
    assert v.shape == (4, 2048) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-6)
    assert np.array_equal(v[0], v[1]) and float(v[0] @ v[2]) < 0.5
    # "abc" with n = 3 is one gram -> a one-hot
    assert np.count_nonzero(emb(["abc"])[0]) == 1
    k1, p1 = E.action_tag("Think... <action>  Go   To Kitchen </action> <action>other</action>")
    k2, p2 = E.action_tag("<action>go to kitchen</action>")
    assert p1 and p2 and k1 == k2 and 0 <= k1 < 2**62
    assert E.parse_action("<action>a <action>b</action>") == "b"
    k3, p3 = E.action_tag("no tag here", token_ids=[1, 2, 3])
    assert not p3 and k3 & E.action_keys.__globals__["FALLBACK_BIT"] and k3 == E.first_n([1, 2, 3]) | (1 << 62)
    assert E.first_n(list(range(8)) + [99]) == E.first_n(list(range(8)) + [100]) != E.first_n(range(1, 9))
    keys, parsed = E.action_keys(["<action>x</action>", "nope"], mode="action_tag")
    assert parsed.tolist() == [True, False] and keys.dtype == np.int64


def test_calibrate_eps():
    # 2 groups x 4 rollouts x 4 turns, records around 4 well-separated directions (clusters of 4 at a moderate eps)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(4, 32))
    x = centers[np.tile(np.arange(4), 8)] + 0.05 * rng.normal(size=(32, 32))
    b = batch([(g, 10 * g + i, [0, 0, 0, 1], {"obs_hash": 0}) for g in range(2) for i in range(4)],
              embedding=x.astype(np.float32))
    res = E.calibrate_eps(b)
    assert 1 <= len(res.probes) <= 6 and 0.02 <= res.eps <= 0.40
    assert res.probes[0][0] == pytest.approx(0.21)
    if res.inside_target:
        assert 4 <= res.probes[-1][1] <= 8
    r = E.compute_advantage("bigpo", b, calibrate_eps=True, invalid_action_penalty=0.0)
    assert r.diagnostics["eps_used"] == pytest.approx(res.eps)
    # passing eps_used back as eps reproduces the calibrated step exactly
    again = E.compute_advantage("bigpo", b, eps=r.diagnostics["eps_used"], invalid_action_penalty=0.0)
    np.testing.assert_array_equal(again.turn_adv, r.turn_adv)
    with pytest.raises(E.ConfigError, match="either eps or calibrate_eps"):
        E.compute_advantage("bigpo", b, calibrate_eps=True, eps=0.1)


def test_eps_calibrator_calibrates_once_and_keeps_eps():
    # step 0: 4 tight directions (clusters of 4 records at the calibrated eps); step 1: a batch on which a fresh
    # search would pick a different eps (every record 0.5 rad from the next: median size 1 until eps ~ .12)
    rng = np.random.default_rng(1)
    centers = rng.normal(size=(4, 32))
    x0 = centers[np.tile(np.arange(4), 8)] + 0.05 * rng.normal(size=(32, 32))
    trajs = [(g, 10 * g + i, [0, 0, 0, 1], {"obs_hash": 0, "action_key": 0, "valid_action": True})
             for g in range(2) for i in range(4)]
    b0 = batch(trajs, embedding=x0.astype(np.float32))
    ang = 0.5 * np.arange(32)
    b1 = batch(trajs, embedding=np.stack([np.cos(ang), np.sin(ang)], 1).astype(np.float32))
    cal = E.EpsCalibrator()
    assert cal.eps is None
    r0 = cal.compute_advantage("bipace", b0)
    search0 = E.calibrate_eps(b0)
    assert cal.eps == pytest.approx(search0.eps) == pytest.approx(r0.diagnostics["eps_used"])
    assert cal.inside_target == search0.inside_target
    # step 1 reuses the step-0 eps instead of searching again on b1
    assert E.calibrate_eps(b1).eps != pytest.approx(cal.eps)
    r1 = cal.compute_advantage("bipace", b1)
    assert r1.diagnostics["eps_used"] == pytest.approx(cal.eps) and "eps_calibration_probes" not in r1.diagnostics
    np.testing.assert_array_equal(r1.turn_adv, E.compute_advantage("bipace", b1, eps=cal.eps).turn_adv)
    # checkpoint round trip, and the calibrator owns eps
    restored = E.EpsCalibrator(**cal.state_dict())
    np.testing.assert_array_equal(restored.compute_advantage("bipace", b1).turn_adv, r1.turn_adv)
    with pytest.raises(E.ConfigError, match="sets eps itself"):
        cal.compute_advantage("bipace", b1, eps=0.2)
    with pytest.raises(E.ConfigError, match="unknown config key.*calibrate_eps"):
        E.EpsCalibrator().compute_advantage("gigpo", b0)


def test_a2tgpo_worked_example():
    # A: 2 process turns IG (.2, .4) + final, R = 1; B: 1 process turn IG .6 + final, R = 0
    nan = float("nan")
    b = batch([(0, 1, [0, 0, 1], {"info_gain": [0.2, 0.4, nan]}), (0, 2, [0, 0], {"info_gain": [0.6, nan]})])
    sig = lambda var: math.sqrt(var + 1e-8) + 1e-6  # noqa: E731
    # turn group e=1: (.2, .6): mu .4, var .04 -> I~ = -+.2/sig(.04); e=2: {.4} singleton -> 0
    i1 = 0.2 / sig(0.04)
    # outcome: (1, 0): mu .5, var .25 -> +-.5/sig(.25)
    o = 0.5 / sig(0.25)
    # D: A e1 = (-i1 + 0)/sqrt(2), A e2 = 0/1; B e1 = i1/1
    adv = [0.3 * (-i1 / math.sqrt(2)) + o, o, o, 0.3 * i1 - o, -o]
    r = E.compute_advantage("a2tgpo", b)
    np.testing.assert_allclose(r.turn_adv, adv, rtol=1e-6)
    # kappa = 1 + .3 (2 sigmoid(I~) - 1)
    s = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    np.testing.assert_allclose(r.turn_clip_scale, [1 + 0.3 * (2 * s(-i1) - 1), 1, 1, 1 + 0.3 * (2 * s(i1) - 1), 1],
                               rtol=1e-6)
    # IGPO: pooled (.2, .4, 1, .6, 0): mean .44, var .1184; r~ = (x - .44)/sig(.1184); accumulated backward
    z = (np.array([0.2, 0.4, 1.0, 0.6, 0.0]) - 0.44) / sig(0.1184)
    igpo = [z[0] + z[1] + z[2], z[1] + z[2], z[2], z[3] + z[4], z[4]]
    np.testing.assert_allclose(E.compute_advantage("igpo", b).turn_adv, igpo, rtol=1e-5)


def test_gvpo_worked_example():
    # group 0: R = (1, 0, 0) -> A_hat = (2/3, -1/3, -1/3); group 1: uniform failures R = (0, 0) -> A_hat = 0
    b = batch([(0, 1, [0, 1], {"process_ok": [0, 1]}), (0, 2, [0, 0], {"process_ok": [0, -1]}),
               (0, 3, [0], {"process_ok": [1]}), (1, 4, [0], {"process_ok": [0]}), (1, 5, [0], {"process_ok": [1]})])
    # failed with A_hat > 0 -> 0; failed with A_hat < 0 -> 1.2 * -1/3 = -.4; failed with A_hat = 0 -> -b = -.2
    r = E.compute_advantage("gvpo", b)
    np.testing.assert_allclose(r.turn_adv, [0, 2 / 3, -0.4, -1 / 3, -1 / 3, -0.2, 0], rtol=1e-6)
    assert r.diagnostics["n_fail_adv_pos"] == 1 and r.diagnostics["n_fail_adv_neg"] == 1
    # additive: A_hat - .2 on failed turns
    ra = E.compute_advantage("gvpo", b, shaping="additive")
    np.testing.assert_allclose(ra.turn_adv, [2 / 3 - 0.2, 2 / 3, -1 / 3 - 0.2, -1 / 3, -1 / 3, -0.2, 0], rtol=1e-6)


def test_pvpo_worked_example():
    # tasks: t1 acc (1, 1) -> dropped; t2 rewards (1, 0) -> V = .5; t3 acc 0 with GT -> kept, V = 0; t4 acc 0, no GT
    f = E.prerollout_filter(["t1", "t1", "t2", "t2", "t3", "t3", "t4", "t4"], [1, 1, 1, 0, 0, 0, 0, 0],
                            [1, 1, 1, 0, 0, 0, 0, 0], tasks_with_gt={"t3"})
    assert sorted(f.kept_tasks) == ["t2", "t3"] and f.dropped_acc1 == ["t1"] and f.dropped_acc0_no_gt == ["t4"]
    assert f.table.values == {"t2": 0.5, "t3": 0.0} and f.table.stats["frac_tasks_dropped_acc1"] == 0.25
    # A = R - V(task): t2 rollouts R = (1, 0) -> (.5, -.5)
    b = batch([(0, 1, [0, 1], {"task_id": "t2"}), (0, 2, [0], {"task_id": "t2"})])
    r = E.compute_advantage("pvpo", b, v_table=f.table, current_step=10)
    np.testing.assert_allclose(r.turn_adv, [0.5, 0.5, -0.5])
    assert r.diagnostics["v_table_age_steps"] == 10 and r.diagnostics["mean_v_hat"] == 0.5
    # static update at step 500 recomputes V for kept tasks only
    assert E.StaticValueTable.should_update(500) and not E.StaticValueTable.should_update(499)
    t2 = f.table.updated(["t2", "t2", "t9"], [1, 1, 1], step=500)
    assert t2.values == {"t2": 1.0, "t3": 0.0} and t2.age(510) == 10
    # v_update_every (the periodic extension): every 300 steps, on top of the one-shot list or instead of it
    steps = range(0, 1001)
    assert [s for s in steps if E.StaticValueTable.should_update(s, v_update_every=300)] == [300, 500, 600, 900]
    assert [s for s in steps if E.StaticValueTable.should_update(s, (), v_update_every=300)] == [300, 600, 900]
    assert [s for s in steps if E.StaticValueTable.should_update(s, (), v_update_every=None)] == []
    # a training loop that follows the schedule: the table's age restarts at each update
    table = f.table
    for step in range(0, 701):
        if E.StaticValueTable.should_update(step, (), v_update_every=300):
            table = table.updated(["t2", "t3"], [step / 1000, 0.0], step=step)
    assert table.built_at_step == 600 and table.age(700) == 100 and table.values["t2"] == pytest.approx(0.6)
    bad = batch([(0, 1, [1], {"task_id": "t4"})])
    with pytest.raises(E.BatchValidationError, match="task_id"):
        E.compute_advantage("pvpo", bad, v_table=f.table)


def test_sgcd_support_kl_and_segmenter():
    # teacher top-2 (.5, .3), student on them (.4, .4), sampled token inside the top-2; tails .2 and .2
    d, H, tt, ts = E.support_divergence(np.log([[0.5, 0.3]]), np.log([[0.4, 0.4]]), np.log([0.5]), np.log([0.4]),
                                        np.array([True]))
    # reverse KL = .4 ln(.4/.5) + .4 ln(.4/.3) + .2 ln(.2/.2) = .025815
    assert d[0] == pytest.approx(0.4 * math.log(0.8) + 0.4 * math.log(4 / 3))
    assert H[0] == pytest.approx(-(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2)))
    assert tt[0] == pytest.approx(0.2) and ts[0] == pytest.approx(0.2)
    # forward KL swaps the roles: .5 ln(.5/.4) + .3 ln(.3/.4)
    fk, *_ = E.support_divergence(np.log([[0.5, 0.3]]), np.log([[0.4, 0.4]]), np.log([0.5]), np.log([0.4]),
                                  np.array([True]), "fkl")
    assert fk[0] == pytest.approx(0.5 * math.log(1.25) + 0.3 * math.log(0.75))
    # a sampled token outside the top-K is its own atom: teacher (.5, .3) + obs .1 -> tail .1
    _, _, tt2, _ = E.support_divergence(np.log([[0.5, 0.3]]), np.log([[0.4, 0.4]]), np.log([0.1]), np.log([0.1]),
                                        np.array([False]))
    assert tt2[0] == pytest.approx(0.1)
    # segmenter: d~ = (0, 1, .5, .2, .9, 0) (range 1); H = (1, 1, 1.4, 2, 1, 1)
    # t1 opens (d~ 1 > .1, H_o = 1); t2 H 1.4 <= 1.5 stays (s = 1); t3 H 2 > 1.5 ends it and re-opens (d~ .2 > .1,
    # H_o = 2); t4, t5 H 1 <= 3 stay with s = .2
    d = np.array([0, 1, 0.5, 0.2, 0.9, 0.0])
    H = np.array([1, 1, 1.4, 2.0, 1, 1])
    s, dn, diag = E.segment_scores(d, H, np.zeros(6, np.int64), np.arange(6))
    np.testing.assert_allclose(s, [0, 1, 1, 0.2, 0.2, 0.2], rtol=1e-7)
    assert diag["n_segments_per_response"] == 2 and diag["frac_tokens_in_segments"] == pytest.approx(5 / 6)
    np.testing.assert_allclose(E.sgcd_weights(s, 1.0, 2.0), [1, 2, 2, 1.2, 1.2, 1.2], rtol=1e-7)


def test_sgcd_worked_example_multi_token():
    # one group: traj 1 (R = 1, one response of 4 tokens) and traj 2 (R = 0, two turns: 3 tokens, then 2 tokens);
    # step rows, K = 2, every sampled token inside the teacher's top-2. Token kinds (teacher top-2 | student top-2;
    # tails .2 / .05): Z (.5, .3 | .5, .3): d = 0; A (.5, .3 | .4, .4): d = .4 ln .8 + .4 ln(4/3) = .025815;
    # B (.5, .3 | .3, .5): d = .3 ln .6 + .5 ln(5/3) = .102165; O (.9, .05 | .8, .15): d = .8 ln(.8/.9) + .15 ln 3 =
    # .070565, a low-entropy token. Teacher entropy: H = -(.5 ln .5 + .3 ln .3 + .2 ln .2) = 1.0297 for Z, A, B and
    # H_O = -(.9 ln .9 + 2 * .05 ln .05) = .3944.
    Z, A, Bk = ((0.5, 0.3), (0.5, 0.3)), ((0.5, 0.3), (0.4, 0.4)), ((0.5, 0.3), (0.3, 0.5))
    O = ((0.9, 0.05), (0.8, 0.15))
    responses = [(0, [Z, A, Bk, Z]), (0, [O, A, Z]), (1, [A, Bk])]  # (turn, tokens) of rows 0, 1, 2
    tk = np.tile(np.log([0.5, 0.3]), (3, 4, 1))
    sk = tk.copy()
    mask = np.zeros((3, 4), bool)
    tti = np.full((3, 4), -1)
    for row, (turn, toks) in enumerate(responses):
        for pos, (t, st_) in enumerate(toks):
            tk[row, pos], sk[row, pos], mask[row, pos], tti[row, pos] = np.log(t), np.log(st_), True, turn
    credit = np.zeros((3, 4), bool)
    credit[2, 1] = True  # the B token of traj 2's second response: an answer literal SGCD must not emphasize
    b = batch([(0, 1, [1.0], {}), (0, 2, [0.0, 0.0], {})], row_traj_id=np.array([1, 2, 2]), response_mask=mask,
              token_turn_idx=tti, teacher_topk_logprob=tk, student_logprob_on_teacher_topk=sk,
              teacher_logprob_obs=tk[..., 0], student_logprob_obs=sk[..., 0], obs_in_topk=np.ones((3, 4), bool),
              credit_mask=credit)
    r = E.compute_advantage("sgcd", b, top_k=2)
    dA, dB, dO = 0.4 * math.log(0.8) + 0.4 * math.log(4 / 3), 0.3 * math.log(0.6) + 0.5 * math.log(5 / 3), \
        0.8 * math.log(0.8 / 0.9) + 0.15 * math.log(3)
    # row 0: d = (0, dA, dB, 0) -> d~ = d / (dB + 1e-8) = (0, .2527, 1, 0). t1 opens a segment (.2527 > .1) with
    # H_o = 1.0297; t2, t3 have H = 1.0297 <= 1.5 H_o, so they stay in it: s = (0, .2527, .2527, .2527) and
    # W = 1 + s (t3 is weighted although its own d is 0).
    s0 = dA / (dB + 1e-8)
    # row 1: d = (dO, dA, 0) -> d~ = (1, dA / dO = .3658, 0) (up to the 1e-8). t0 opens (H_o = .3944); t1 has
    # H = 1.0297 > 1.5 * .3944 = .5916, which ends it, and re-opens one (.3658 > .1, H_o = 1.0297) that t2 stays in:
    # s = (1, .3658, .3658), W = clip(1 + s, 1, 2).
    s1 = dA / (dO + 1e-8)
    # row 2 (a separate turn, so its own normalization): d~ = (0, 1); t1 would open a segment, but credit_mask -> 0
    W = [[1, 1 + s0, 1 + s0, 1 + s0], [1 + dO / (dO + 1e-8), 1 + s1, 1 + s1, 1], [1, 1, 1, 1]]
    np.testing.assert_allclose(r.token_weight, W, rtol=1e-6)  # float32 inputs and output
    # GRPO: R = (1, 0): +-.5 / (sqrt(.5) + 1e-6) = +-.70711 for every turn of the trajectory; A_t = A_i * W_t
    a = 0.5 / (math.sqrt(0.5) + D)
    np.testing.assert_allclose(r.turn_adv, [a, -a, -a], rtol=1e-6)
    np.testing.assert_allclose(r.token_adv, np.where(mask, np.array(W) * np.array([[a], [-a], [-a]]), 0.0),
                               rtol=1e-6)
    assert r.token_weight.max() > 1.99 and r.loss_mask.tolist() == mask.tolist()
    # segments: 1, 2 and 1 (the credit-masked one still counts as opened) -> 4/3 per response; W > 1 on 6 of 9
    assert r.diagnostics["n_segments_per_response"] == pytest.approx(4 / 3)
    assert r.diagnostics["frac_tokens_W_gt1"] == pytest.approx(6 / 9)
    # gamma_s = .5 halves s: W = 1 + s / 2 wherever W was > 1
    r_half = E.compute_advantage("sgcd", b, top_k=2, gamma_s=0.5)
    np.testing.assert_allclose(r_half.token_weight, 1 + (np.array(W) - 1) / 2, rtol=1e-6)


def test_sgcd_estimator_small():
    # two single-turn rollouts R = (1, 0) -> GRPO +-.5/(sqrt(.5) + 1e-6); one token each, K = 2
    tok = dict(row_traj_id=np.array([1, 2]), response_mask=np.ones((2, 1), bool), token_turn_idx=np.zeros((2, 1)),
               teacher_topk_logprob=np.log([[[0.5, 0.3]], [[0.5, 0.3]]]),
               student_logprob_on_teacher_topk=np.log([[[0.4, 0.4]], [[0.5, 0.3]]]),
               teacher_logprob_obs=np.log([[0.5], [0.5]]), student_logprob_obs=np.log([[0.4], [0.5]]),
               obs_in_topk=np.ones((2, 1), bool))
    b = batch([(0, 1, [1.0], {}), (0, 2, [0.0], {})], **tok)
    r = E.compute_advantage("sgcd", b, top_k=2)
    a = 0.5 / (math.sqrt(0.5) + D)
    # a single-token response has range 0 -> d~ = 0 -> s = 0 -> W = 1
    np.testing.assert_allclose(r.token_adv[:, 0], [a, -a], rtol=1e-6)
    assert np.all(r.token_weight == 1) and r.diagnostics["frac_responses_all_d_zero"] == 1.0
