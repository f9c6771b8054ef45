"""Policy losses (spec section 6): invariants I12, I13, SGCD's W-scaling (I8, last clause), worked examples."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from estimators import losses as Lo  # noqa: E402

SET = settings(max_examples=30, deadline=None)


def _rand(seed, B=3, L=6, full=False, n_turns=2):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(B, L, generator=g, dtype=torch.float64) * 2
    old = logp.detach() + 0.3 * torch.randn(B, L, generator=g, dtype=torch.float64)
    adv = torch.randn(B, L, generator=g, dtype=torch.float64)
    mask = torch.ones(B, L, dtype=torch.bool) if full else torch.rand(B, L, generator=g) < 0.7
    tti = torch.where(mask, torch.randint(0, n_turns, (B, L), generator=g).sort(-1).values, torch.full((B, L), -1))
    return logp, old, adv, mask, tti


def test_import_estimators_does_not_import_torch():
    code = "import sys, estimators, estimators.losses; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@SET
@given(st.integers(0, 10_000), st.integers(1, 5), st.integers(1, 8))
def test_I12_aggregations_with_equal_lengths(seed, B, L):
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(B, L, generator=g, dtype=torch.float64)
    mask = torch.ones(B, L, dtype=torch.bool)
    tm = Lo.agg_loss(loss, mask, "token-mean")
    assert torch.allclose(Lo.agg_loss(loss, mask, "seq-mean-token-mean"), tm)
    assert torch.allclose(Lo.agg_loss(loss, mask, "seq-mean-token-sum"), L * tm)


def test_aggregations_worked_example():
    # rows: [1, 2, (pad)] and [3, (pad), (pad)]; the third row is empty
    loss = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0], [9.0, 9.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    assert Lo.agg_loss(loss, mask, "token-mean").item() == pytest.approx((1 + 2 + 3) / 3)
    # empty rows are left out of the seq-mean denominators: mean(3, 3) and mean(1.5, 3)
    assert Lo.agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((3 + 3) / 2)
    assert Lo.agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((1.5 + 3) / 2)
    # Dr.GRPO: sum / (B * L_norm) with the fixed L_norm (the maximum response length), here 4 and 10:
    # 6 / (3 * 4) = 0.5 and 6 / (3 * 10) = 0.2; every row counts in B, the empty one included
    assert Lo.agg_loss(loss, mask, "seq-mean-token-sum-norm", l_norm=4).item() == pytest.approx(6 / 12)
    assert Lo.agg_loss(loss, mask, "seq-mean-token-sum-norm", l_norm=10).item() == pytest.approx(6 / 30)
    # the same loss padded to width 7: L_norm does not follow the padded width
    wide = torch.cat([loss, torch.full((3, 4), 9.0, dtype=torch.float64)], 1)
    wide_mask = torch.cat([mask, torch.zeros(3, 4, dtype=torch.bool)], 1)
    assert Lo.agg_loss(wide, wide_mask, "seq-mean-token-sum-norm", l_norm=4).item() == pytest.approx(6 / 12)
    # without l_norm: an error that names l_norm and what to pass, never the padded width (6/9 here)
    with pytest.raises(ValueError, match="needs l_norm.*maximum response length"):
        Lo.agg_loss(loss, mask, "seq-mean-token-sum-norm")
    # global denominators (gradient accumulation)
    assert Lo.agg_loss(loss, mask, "token-mean", global_token_count=12).item() == pytest.approx(6 / 12)
    # traj unit: rows 0 and 1 are one trajectory -> (1 + 2 + 3) / 3 tokens, one sequence
    assert Lo.agg_loss(loss, mask, "seq-mean-token-mean", seq_unit="traj",
                       row_traj_id=[7, 7, 8]).item() == pytest.approx(2.0)


@SET
@given(st.integers(0, 10_000), st.sampled_from(["token", "sequence", "turn"]), st.floats(0.0, 0.5),
       st.floats(0.0, 0.5), st.floats(1.01, 5.0), st.booleans())
def test_I13_on_policy_loss_independent_of_bounds(seed, ratio, lo, hi, c_dual, with_kappa):
    logp, _, adv, mask, tti = _rand(seed)
    kappa = torch.rand(logp.shape, dtype=torch.float64) * 2 if with_kappa else None

    def run(cl, ch, cd, k):
        lp = logp.clone().requires_grad_(True)
        cfg = Lo.PolicyLossConfig(ratio, cl, ch, dual_clip=cd, dual_clip_auto=False, agg="token-mean")
        loss, _ = Lo.policy_loss(lp, lp.detach(), adv, mask, cfg, clip_scale=k, token_turn_idx=tti)
        loss.backward()
        return loss.detach(), lp.grad

    l0, g0 = run(0.2, 0.2, None, None)
    l1, g1 = run(lo, hi, c_dual, kappa)
    assert torch.allclose(l0, l1) and torch.allclose(g0, g1)


@SET
@given(st.integers(0, 10_000))
def test_I13_turn_ratio_special_cases(seed):
    logp, old, adv, mask, _ = _rand(seed, full=False)
    # one turn per row: turn == sequence
    one_turn = torch.where(mask, torch.zeros_like(mask, dtype=torch.long), torch.full(mask.shape, -1))
    lr_turn = Lo.compute_log_ratio(logp, old, mask, "turn", one_turn)
    lr_seq = Lo.compute_log_ratio(logp, old, mask, "sequence")
    assert torch.allclose(lr_turn[mask], lr_seq[mask])
    # one token per turn: turn == token
    per_tok = torch.arange(logp.shape[1]).expand_as(logp)
    lr_turn1 = Lo.compute_log_ratio(logp, old, mask, "turn", torch.where(mask, per_tok, -1))
    lr_tok = Lo.compute_log_ratio(logp, old, mask, "token")
    assert torch.allclose(lr_turn1[mask], lr_tok[mask])


@SET
@given(st.integers(0, 10_000))
def test_I13_geometric_mean_and_stop_gradient_give_the_same_gradient(seed):
    logp, old, adv_tok, mask, tti = _rand(seed, full=True, n_turns=3)
    # one advantage per (row, turn)
    adv = torch.gather(torch.randn(logp.shape[0], 3, dtype=torch.float64), 1, tti.clamp(min=0))
    lp1 = logp.clone().requires_grad_(True)
    lr = Lo.compute_log_ratio(lp1, old, mask, "turn", tti)
    (-(adv * torch.exp(lr))[mask].sum()).backward()
    # the geometric mean written out: rho_k = exp(mean_{t in k} delta_t), one term per token of the turn
    lp2 = logp.clone().requires_grad_(True)
    total = 0
    for b in range(logp.shape[0]):
        for k in range(3):
            sel = mask[b] & (tti[b] == k)
            if sel.any():
                rho = torch.exp((lp2[b][sel] - old[b][sel]).mean())
                total = total - (adv[b][sel] * rho).sum()
    total.backward()
    assert torch.allclose(lp1.grad, lp2.grad)
    # and the coefficient on each token is rho_k * A_k
    rho_tok = torch.exp(lr.detach())
    assert torch.allclose(lp1.grad[mask], (-rho_tok * adv)[mask])


@SET
@given(st.integers(0, 10_000), st.floats(1.0, 3.0))
def test_I8_sgcd_loss_is_W_times_grpo_loss(seed, c):
    logp, old, adv, mask, _ = _rand(seed)
    W = 1 + (c - 1) * torch.rand(logp.shape, dtype=torch.float64)
    lr = Lo.compute_log_ratio(logp, old, mask, "token")
    base, _, _ = Lo.clipped_token_loss(lr, adv, 0.2, 0.2, None, 3.0)
    weighted, _, _ = Lo.clipped_token_loss(lr, adv * W, 0.2, 0.2, None, 3.0)
    assert torch.allclose(weighted, W * base)


def test_clipped_loss_worked_example():
    # rho = e^delta; A = +1 at rho = 1.5: unclipped -1.5, clipped -(1.2) -> max = -1.2 (clipped branch)
    # A = -1 at rho = 0.5: unclipped 0.5, clipped 0.8 -> 0.8; A = -1 at rho = 5: 5 vs 1.2 -> 5, dual clip min(5, 3) = 3
    lr = torch.log(torch.tensor([[1.5, 0.5, 5.0]], dtype=torch.float64))
    adv = torch.tensor([[1.0, -1.0, -1.0]], dtype=torch.float64)
    loss, clipped, lower = Lo.clipped_token_loss(lr, adv, 0.2, 0.2, None, 3.0)
    assert torch.allclose(loss, torch.tensor([[-1.2, 0.8, 3.0]], dtype=torch.float64))
    assert clipped.tolist() == [[True, True, False]] and lower.tolist() == [[False, False, True]]
    # asymmetric bounds scaled by kappa = 2: A = +1 at rho = 1.5 with eps_high = 0.28 * 2 -> 1.5 is inside
    loss2, _, _ = Lo.clipped_token_loss(lr, adv, 0.2, 0.28, torch.full((1, 3), 2.0, dtype=torch.float64), None)
    assert loss2[0, 0].item() == pytest.approx(-1.5)


def test_sequence_ratio_forward_and_gradient():
    # row mean of delta = (0.2 + 0.4) / 2 = 0.3 -> s = e^0.3 on every token; d s / d logp_t = s (stop-gradient form)
    logp = torch.tensor([[-1.0, -2.0, -3.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.2, -2.4, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False]])
    lr = Lo.compute_log_ratio(logp, old, mask, "sequence")
    assert torch.allclose(lr.detach()[0, :2], torch.tensor([0.3, 0.3], dtype=torch.float64))
    torch.exp(lr)[mask].sum().backward()
    assert torch.allclose(logp.grad[0, :2], torch.full((2,), np.exp(0.3), dtype=torch.float64))


def test_dr_grpo_recipe_needs_l_norm():
    logp, old, adv, mask, _ = _rand(3, B=2, L=5, full=True)
    # the recipe leaves L_norm to the caller: the loss raises until it is given
    assert Lo.get_recipe("dr_grpo").l_norm is None
    with pytest.raises(ValueError, match="l_norm"):
        Lo.policy_loss(logp, old, adv, mask, "dr_grpo")
    # on-policy (rho = 1): loss = sum(-A) / (B * L_norm) = sum(-A) / (2 * 8)
    total, _ = Lo.policy_loss(logp, logp, adv, mask, Lo.get_recipe("dr_grpo", l_norm=8))
    assert total.item() == pytest.approx(float(-adv.sum()) / 16)
    with pytest.raises(ValueError, match="l_norm must be > 0"):
        Lo.PolicyLossConfig(agg="seq-mean-token-sum-norm", l_norm=0)


def test_k3_kl_and_recipes():
    lp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.0, -1.5]], dtype=torch.float64)
    kl = Lo.low_var_kl(lp, ref)
    z = 0.5  # ref - logp on the second token
    assert kl[0, 0].item() == 0.0 and kl[0, 1].item() == pytest.approx(np.exp(z) - z - 1)
    assert set(Lo.RECIPES) >= {"grpo", "dr_grpo", "dapo", "gspo", "gigpo", "bipace", "a2tgpo", "gvpo", "pvpo",
                               "sgcd"}
    assert Lo.get_recipe("dapo").clip_high == 0.28 and Lo.get_recipe("dapo").agg == "token-mean"
    assert Lo.get_recipe("gspo").c_dual is None and Lo.get_recipe("grpo").c_dual == 3.0
    assert Lo.get_recipe("a2tgpo").ratio == "turn"
    with pytest.raises(ValueError):
        Lo.get_recipe("nope")
    adv = torch.ones(1, 2, dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    total, metrics = Lo.policy_loss(lp, lp, adv, mask, "gigpo", ref_logprob=ref)
    # on-policy: pg = -1 (token mean of -A); + 0.01 * mean KL
    assert total.item() == pytest.approx(-1 + 0.01 * kl.mean().item())
    assert metrics["clipfrac"] == 0.0 and "kl" in metrics
