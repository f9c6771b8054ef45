"""The upstream conventions the estimators offer by name (spec 2.2): verl-agent's GiGPO as a whole
(``GiGPOConfig.verl_agent()`` / ``preset="verl-agent"``), the invalid-action penalty kept out of the step returns,
verl-agent's per-step episode statistics for GRPO/RLOO, raw observation strings as anchors, and GSPO's clamp.

Hand-computed values carry their arithmetic in comments. The verl-agent reference below is a literal plain-Python
transcription of verl-agent's ``gigpo/core_gigpo.py`` (``compute_step_discounted_returns``,
``episode_norm_reward`` with ``compute_mean_std_cross_steps=True``, ``build_step_group``, ``step_norm_reward``) and of
its trainer's order of operations (returns from the env rewards, then ``apply_invalid_action_penalty`` on each
row's episode score), as published in langfengQ/verl-agent (read at the fork johnhaofu/verl-agent@c23d5862).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

import estimators as E
from estimators.configs import ConfigError

from estimators_examples_kit import D, batch


def _example():
    # traj 1: obs (5, 6), rewards (0, 1), both valid; traj 2: obs (5, 6, 7), rewards (0, 0, 0), its turn 1 invalid
    return batch([(0, 1, [0, 1], {"obs_hash": [5, 6], "valid_action": [1, 1]}),
                  (0, 2, [0, 0, 0], {"obs_hash": [5, 6, 7], "valid_action": [1, 0, 1]})])


def test_penalty_kept_out_of_the_step_returns():
    b = _example()
    # returns-to-go of the env rewards (gamma .95): traj 1 (.95, 1), traj 2 (0, 0, 0): the penalty never enters
    # cluster 5: (.95, 0) -> +-.475 / (sqrt(2 * .475^2) + 1e-6); cluster 6: (1, 0) -> +-.5 / (sqrt(.5) + 1e-6)
    s5 = 0.475 / (math.sqrt(2 * 0.475**2) + D)
    s6 = 0.5 / (math.sqrt(0.5) + D)
    ep = 0.5 / (math.sqrt(0.5) + D)  # episode term as in the default (R = 1, 0)
    r = E.compute_advantage("gigpo", b, penalty_in_step_returns="none")
    np.testing.assert_allclose(r.turn_adv, [ep + s5, ep + s6, -ep - s5, -ep - s6, -ep], rtol=1e-6)
    # (two-member clusters normalise to +-1/sqrt(2) whatever the returns; mean_norm shows the returns themselves)
    # default, penalized returns: traj 2 (-.095, -.1, 0) -> cluster 5: (.95, -.095) +-.5225, cluster 6: (1, -.1)
    # +-.55; without the penalty in the returns: (.95, 0) +-.475 and (1, 0) +-.5
    d = E.compute_advantage("gigpo", b, mode="mean_norm")
    np.testing.assert_allclose(d.turn_adv, [0.5 + 0.5225, 0.5 + 0.55, -0.5 - 0.5225, -0.5 - 0.55, -0.5], rtol=1e-6)
    n = E.compute_advantage("gigpo", b, mode="mean_norm", penalty_in_step_returns="none")
    np.testing.assert_allclose(n.turn_adv, [0.5 + 0.475, 0.5 + 0.5, -0.5 - 0.475, -0.5 - 0.5, -0.5], rtol=1e-6)
    # without a penalty the option changes nothing
    np.testing.assert_array_equal(
        E.compute_advantage("gigpo", b, invalid_action_penalty=0.0, penalty_in_step_returns="none").turn_adv,
        E.compute_advantage("gigpo", b, invalid_action_penalty=0.0).turn_adv)


def test_verl_agent_preset_by_hand():
    b = _example()
    # episode scores per row, R - .1 * invalid: (1, 1, 0, -.1, 0); statistics over the 5 step rows: mean .38,
    # deviations (.62, .62, -.38, -.48, -.38), var(ddof=1) = (2 * .3844 + 2 * .1444 + .2304) / 4 = .322
    ep = np.array([0.62, 0.62, -0.38, -0.48, -0.38]) / (math.sqrt(0.322) + D)
    # step term from the unpenalized returns, as in test_penalty_kept_out_of_the_step_returns; cluster 7 is a
    # singleton (0)
    s5 = 0.475 / (math.sqrt(2 * 0.475**2) + D)
    s6 = 0.5 / (math.sqrt(0.5) + D)
    want = ep + np.array([s5, s6, -s5, -s6, 0.0])
    cfg = E.GiGPOConfig.verl_agent()
    assert (cfg.gamma, cfg.step_advantage_w, cfg.mode, cfg.invalid_action_penalty) == (0.95, 1.0, "mean_std_norm", 0.1)
    assert (cfg.episode_stats, cfg.penalty_in_episode_term, cfg.penalty_in_step_returns, cfg.episode_singleton) == \
        ("per_step", "per_row", "none", "raw")
    np.testing.assert_allclose(E.compute_advantage("gigpo", b, config=cfg).turn_adv, want, rtol=1e-6)
    # the same by name, through the config keys a trainer config carries
    np.testing.assert_array_equal(E.compute_advantage("gigpo", b, preset="verl-agent").turn_adv,
                                  E.compute_advantage("gigpo", b, config=cfg).turn_adv)
    # overrides on top of the preset: verl-agent's yaml default mode
    m = E.compute_advantage("gigpo", b, preset="verl-agent", mode="mean_norm")
    np.testing.assert_allclose(m.turn_adv, [0.62 + 0.475, 0.62 + 0.5, -0.38 - 0.475, -0.48 - 0.5, -0.38], rtol=1e-6)
    assert E.GiGPOConfig.verl_agent(mode="mean_norm").mode == "mean_norm"


def test_presets_are_checked():
    b = _example()
    with pytest.raises(ConfigError, match="no preset 'verl'"):
        E.compute_advantage("gigpo", b, preset="verl")
    with pytest.raises(ConfigError, match="has no preset"):
        E.compute_advantage("grpo", b, preset="verl-agent")
    with pytest.raises(ConfigError, match="unknown config key"):
        E.GiGPOConfig.verl_agent(gama=0.9)
    with pytest.raises(ConfigError):
        E.GiGPOConfig(penalty_in_step_returns="sometimes")
    with pytest.raises(ConfigError):
        E.GiGPOConfig(episode_singleton="one")


def test_episode_singleton_raw_gives_the_score():
    # one trajectory with one row in its group: verl-agent's mean 0 / std 1 gives the raw score; the default 0
    b = batch([(0, 1, [1.0], {"obs_hash": [1], "valid_action": [1]}),
               (1, 2, [0.0, 1.0], {"obs_hash": [1, 2], "valid_action": [1, 1]}),
               (1, 3, [0.0, 0.0], {"obs_hash": [3, 4], "valid_action": [1, 1]})])
    raw = E.compute_advantage("gigpo", b, episode_singleton="raw", step_advantage_w=0.0)
    zero = E.compute_advantage("gigpo", b, step_advantage_w=0.0)
    assert raw.turn_adv[0] == pytest.approx(1.0 / (1.0 + D), rel=1e-7) and zero.turn_adv[0] == 0.0
    np.testing.assert_array_equal(raw.turn_adv[1:], zero.turn_adv[1:])


# ------------------------------------------------------------------------------------------ verl-agent transcription
def _verl_agent_gigpo(rows, gamma=0.95, kappa=0.1, w=1.0, remove_std=False, eps=1e-6):
    """verl-agent's GiGPO on ``rows`` = list of (uid, traj_uid, turn, reward, valid, anchor_obs, episode_reward).

    Plain Python, in verl-agent's order: step returns from the env rewards; then the penalty on each row's episode
    score; episode statistics over every step row of the uid (compute_mean_std_cross_steps=True; singleton: mean 0,
    std 1); step groups of exactly equal anchor observations within a uid; step statistics (singleton: mean =
    the value, std 1, so 0)."""
    n = len(rows)
    # compute_step_discounted_returns: per trajectory, reversed cumulative discounted sum (float32 in verl-agent)
    by_traj = defaultdict(list)
    for i, r in enumerate(rows):
        by_traj[r[1]].append(i)
    returns = [0.0] * n
    for idx in by_traj.values():
        idx.sort(key=lambda i: rows[i][2])
        running = 0.0
        for i in reversed(idx):
            running = rows[i][3] + gamma * running
            returns[i] = running
    # apply_invalid_action_penalty, then episode_norm_reward(compute_mean_std_cross_steps=True)
    scores = [r[6] - (kappa if not r[4] else 0.0) for r in rows]
    id2score = defaultdict(list)
    for i, r in enumerate(rows):
        id2score[r[0]].append(scores[i])

    def stats(vals, singleton_mean):
        if len(vals) == 1:
            return singleton_mean(vals), 1.0
        m = sum(vals) / len(vals)
        return m, math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))

    ep = []
    for i, r in enumerate(rows):
        m, s = stats(id2score[r[0]], lambda v: 0.0)
        ep.append(scores[i] - m if remove_std else (scores[i] - m) / (s + eps))
    # build_step_group (exact match within a uid) + step_norm_reward
    groups = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r[0], r[5])].append(i)
    st = [0.0] * n
    for idx in groups.values():
        vals = [returns[i] for i in idx]
        m, s = stats(vals, lambda v: v[0])
        for i in idx:
            st[i] = returns[i] - m if remove_std else (returns[i] - m) / (s + eps)
    return [ep[i] + w * st[i] for i in range(n)]


def _random_rows(rng, n_groups=6, G=4, max_turns=6, n_states=5):
    rows, tid = [], 0
    for g in range(n_groups):
        for _ in range(G):
            T = int(rng.integers(1, max_turns + 1))
            success = float(rng.integers(0, 2))
            for t in range(T):
                rew = success if t == T - 1 else 0.0
                rows.append((g, tid, t, rew, bool(rng.random() > 0.25), f"room {int(rng.integers(n_states))}",
                             success))
            tid += 1
    return rows


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("mode", ["mean_std_norm", "mean_norm"])
def test_verl_agent_preset_equals_a_transcription_of_verl_agent(seed, mode):
    rng = np.random.default_rng(seed)
    rows = _random_rows(rng)
    perm = rng.permutation(len(rows))  # any row order
    rows = [rows[i] for i in perm]
    b = E.TrajectoryBatch(group_id=[r[0] for r in rows], traj_id=[r[1] for r in rows],
                          turn_idx=[r[2] for r in rows], reward=[r[3] for r in rows],
                          done=[r[2] == max(q[2] for q in rows if q[1] == r[1]) for r in rows],
                          valid_action=[r[4] for r in rows], obs_hash=[r[5] for r in rows])
    got = E.compute_advantage("gigpo", b, preset="verl-agent", mode=mode).turn_adv
    want = _verl_agent_gigpo(rows, remove_std=(mode == "mean_norm"))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------ GRPO / RLOO per step
def test_grpo_and_rloo_per_step_statistics():
    # group 0: traj 1 (2 turns, R = 1), traj 2 (3 turns, R = 0): step rows carry (1, 1, 0, 0, 0)
    b = batch([(0, 1, [0, 1], {}), (0, 2, [0, 0, 0], {})])
    # GRPO per step: mean .4, std(ddof=1) = sqrt(.3): (.6, .6, -.4, -.4, -.4) / (sqrt(.3) + 1e-6)
    g = E.compute_advantage("grpo", b, episode_stats="per_step")
    np.testing.assert_allclose(g.turn_adv, np.array([0.6, 0.6, -0.4, -0.4, -0.4]) / (math.sqrt(0.3) + D), rtol=1e-6)
    # per trajectory (default): R = (1, 0): +-.5 / (sqrt(.5) + 1e-6)
    d = E.compute_advantage("grpo", b)
    np.testing.assert_allclose(d.turn_adv, np.array([1, 1, -1, -1, -1]) * 0.5 / (math.sqrt(0.5) + D), rtol=1e-6)
    # RLOO per step (verl-agent: one row left out): row of traj 1: 1 - (1 + 0 + 0 + 0) / 4 = .75; of traj 2:
    # 0 - (1 + 1 + 0 + 0) / 4 = -.5
    r = E.compute_advantage("rloo", b, episode_stats="per_step")
    np.testing.assert_allclose(r.turn_adv, [0.75, 0.75, -0.5, -0.5, -0.5], rtol=1e-6)
    # Dr.GRPO per step: deviations from the row mean .4
    dr = E.compute_advantage("dr_grpo", b, episode_stats="per_step")
    np.testing.assert_allclose(dr.turn_adv, [0.6, 0.6, -0.4, -0.4, -0.4], rtol=1e-6)
    # one row per trajectory: both statistics agree
    one = batch([(0, 1, [1], {}), (0, 2, [0], {}), (0, 3, [0.5], {})])
    for name in ("grpo", "rloo", "dr_grpo"):
        np.testing.assert_allclose(E.compute_advantage(name, one, episode_stats="per_step").turn_adv,
                                   E.compute_advantage(name, one).turn_adv, rtol=1e-12)
    # a single-row group: 0, or the raw reward with verl_compat
    single = batch([(0, 1, [0.7], {})])
    assert E.compute_advantage("grpo", single, episode_stats="per_step").turn_adv[0] == 0.0
    assert E.compute_advantage("grpo", single, episode_stats="per_step", verl_compat=True).turn_adv[0] == \
        pytest.approx(0.7)
    with pytest.raises(ConfigError):
        E.OutcomeConfig(episode_stats="per_token")


# ------------------------------------------------------------------------------------------ raw observation strings
def test_observation_strings_are_digested_once_and_group_like_digests():
    texts = ["You see a drawer 1.", "You see a drawer 1.", "Nothing happens.", "you see a drawer 1."]
    d = E.digest_strings(texts)
    assert d.dtype == np.int64 and (d >= 0).all()
    assert d[0] == d[1] and len({int(d[0]), int(d[2]), int(d[3])}) == 3  # exact text: case matters
    np.testing.assert_array_equal(d, E.digest_strings(np.array(texts)))  # numpy str arrays too
    assert E.digest_strings(["a"], namespace="x")[0] != E.digest_strings(["a"])[0]
    # a batch given strings clusters exactly like one given any injective relabelling
    rng = np.random.default_rng(3)
    rows = _random_rows(rng)
    cols = dict(group_id=[r[0] for r in rows], traj_id=[r[1] for r in rows], turn_idx=[r[2] for r in rows],
                reward=[r[3] for r in rows], done=[r[2] == max(q[2] for q in rows if q[1] == r[1]) for r in rows],
                valid_action=[r[4] for r in rows])
    by_text = E.TrajectoryBatch(**cols, obs_hash=[r[5] for r in rows])
    by_id = E.TrajectoryBatch(**cols, obs_hash=[int(r[5].split()[1]) * 7 + 3 for r in rows])
    np.testing.assert_array_equal(E.compute_advantage("gigpo", by_text).turn_adv,
                                  E.compute_advantage("gigpo", by_id).turn_adv)
    with pytest.raises(E.BatchValidationError, match="mixed"):
        E.TrajectoryBatch(**cols, obs_hash=["a"] + [1] * (len(rows) - 1))


# ------------------------------------------------------------------------------------------ step partition
def test_pair_partition_is_exact_including_the_fallback(monkeypatch):
    from estimators import primitives as P

    rng = np.random.default_rng(0)

    def same(a, na, b, nb):
        return na == nb and len(np.unique(np.stack([a, b], 1), axis=0)) == na

    for trial in range(200):
        n = int(rng.integers(1, 500))
        first = np.sort(rng.integers(0, max(1, n // 10), size=n))
        kind = trial % 3
        key = (rng.integers(0, 4, size=n) if kind == 0 else rng.integers(-2**63, 2**63 - 1, size=n) if kind == 1
               else rng.integers(0, 2**62, size=max(1, n // 5))[rng.integers(0, max(1, n // 5), size=n)])
        a, na = P.pair_partition(first, int(first.max()) + 1, key)
        assert same(a, na, *P.group_labels(first, key))
    # packed collisions: with 1,000 groups only 22 bits of each key's mix are packed, so a few hundred distinct
    # keys per group collide; and with a constant mix every key of a group collides. Both stay exact.
    first = np.repeat(np.arange(1000), 200)
    key = rng.integers(-2**63, 2**63 - 1, size=first.size)
    a, na = P.pair_partition(first, 1000, key)
    assert same(a, na, *P.group_labels(first, key)) and na == first.size
    monkeypatch.setattr(P, "_mix64", lambda x: np.zeros_like(x))
    first = np.array([0, 0, 0, 1, 1, 1])
    key = np.array([7, 8, 7, 7, 9, 9])
    a, na = P.pair_partition(first, 2, key)
    assert same(a, na, *P.group_labels(first, key)) and na == 4
    # more groups than 16 bits hold: group_labels' path
    first = np.arange(70_000) // 2
    key = np.arange(70_000) % 3
    assert same(*P.pair_partition(first, 35_000, key), *P.group_labels(first, key))


# ------------------------------------------------------------------------------------------ GSPO
def test_gspo_sequence_ratio_matches_verl_forward():
    torch = pytest.importorskip("torch")
    from estimators import losses as Lo

    # verl averages the raw per-token deltas (no +-20 clamp): (30 + -30 + 0) / 3 = 0 -> ratio 1 on every token
    logp = torch.tensor([[0.0, -60.0, -1.0]], dtype=torch.float64)
    old = torch.tensor([[-30.0, -30.0, -1.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    assert torch.allclose(Lo.compute_log_ratio(logp, old, mask, "sequence"), torch.zeros(1, 3, dtype=torch.float64))
    # the token ratio keeps verl's +-20 clamp
    assert Lo.compute_log_ratio(logp, old, mask, "token")[0].tolist() == [20.0, -20.0, 0.0]
    # above a log-ratio of 10 the forward value is 10, as in verl; for A < 0 the gradient flows here
    # (e^10 * d log pi), where verl's clamp of the whole token expression passes none (see the docstring)
    lp = torch.tensor([[0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    old2 = torch.full((1, 2), -12.0, dtype=torch.float64)
    lr = Lo.compute_log_ratio(lp, old2, torch.ones(1, 2, dtype=torch.bool), "sequence")
    assert torch.allclose(lr.detach(), torch.full((1, 2), 10.0, dtype=torch.float64))
    loss, _, _ = Lo.clipped_token_loss(lr, -torch.ones(1, 2, dtype=torch.float64), 3e-4, 4e-4)
    loss.sum().backward()
    assert torch.allclose(lp.grad, torch.full((1, 2), math.exp(10.0), dtype=torch.float64))
    # verl's form, for the record: clamp(log pi - sg(log pi) + sg(l_b), max=10) passes no gradient here
    lp2 = lp.detach().clone().requires_grad_(True)
    verl = torch.clamp(lp2 - lp2.detach() + torch.full((1, 2), 12.0, dtype=torch.float64), max=10.0)
    (torch.exp(verl)).sum().backward()
    assert torch.count_nonzero(lp2.grad) == 0
