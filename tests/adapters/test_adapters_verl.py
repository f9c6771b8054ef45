"""verl 0.9.1 plugin: registration in a fresh interpreter on ``import verl``; verl's own ``compute_advantage``
dispatching to our estimators with the per-turn metadata (through the bridge), and refusing, with the alternatives
named, estimator configs that need a model-side column the agent loop cannot supply; the agent loop playing
TextCraft-v0 episodes against a CPU generation backend (``_HFServer``: Hugging Face ``generate`` on a tiny random
Llama built here, standing in for verl's server manager) with a per-turn token budget, closing its env."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl", reason="the verl adapter needs the 'verl' extra: pip install 'verl[verl-core]==0.9.1'")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl-core: pip install 'verl[verl-core]==0.9.1'")
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]

import estimators  # noqa: E402
from adapters.tiny import build_tiny_model, build_tokenizer, env_vocabulary  # noqa: E402
from adapters.verl import plugin  # noqa: E402
from adapters.verl.agent_loop import AgentGymAgentLoop  # noqa: E402
from adapters.verl.bridge import ModelSideColumnError, build_trajectory_batch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.trainer.ppo import core_algos, ray_trainer  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402


def test_adapters_verl_plugin_registers_in_fresh_interpreter():
    env = dict(os.environ, VERL_USE_EXTERNAL_MODULES="adapters.verl.plugin",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    code = ("import verl\nfrom verl.trainer.ppo import core_algos, ray_trainer\n"
            "import estimators\n"
            "assert all('agentgym_' + n in core_algos.ADV_ESTIMATOR_REGISTRY for n in estimators.available())\n"
            "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
            "assert _agent_loop_registry['agentgym']['_target_'].endswith('AgentGymAgentLoop')\n"
            "assert getattr(ray_trainer.compute_advantage, '_agentgym_bridge', False)\nprint('OK')\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


def test_adapters_verl_plugin_loads_through_the_installed_entry_point():
    """``pip install "agentgym-kit[verl]"`` declares the ``verl.plugins`` entry point: a plain ``import verl`` (no env
    variable) registers everything, and ``VERL_USE_EXTERNAL_PLUGINS=none`` turns it off."""
    from importlib.metadata import entry_points

    if not any(ep.name == "agentgym" for ep in entry_points(group="verl.plugins")):
        pytest.skip("agentgym is not pip-installed in this venv (no verl.plugins entry point)")
    base = {k: v for k, v in os.environ.items() if k not in ("VERL_USE_EXTERNAL_MODULES", "VERL_USE_EXTERNAL_PLUGINS")}
    base["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    code = ("import verl\nfrom verl.trainer.ppo import core_algos\n"
            "print(sorted(n for n in core_algos.ADV_ESTIMATOR_REGISTRY if n.startswith('agentgym_')))\n")
    on = subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True, timeout=300)
    assert on.returncode == 0, on.stderr[-2000:]
    assert "'agentgym_bipace'" in on.stdout and "'agentgym_a2tgpo'" in on.stdout
    off = subprocess.run([sys.executable, "-c", code], env=dict(base, VERL_USE_EXTERNAL_PLUGINS="none"),
                         capture_output=True, text=True, timeout=300)
    assert off.returncode == 0 and off.stdout.strip() == "[]", (off.stdout, off.stderr[-2000:])


class _HFServer:
    """The smallest real generation backend on CPU: Hugging Face ``generate`` behind verl's
    ``server_manager.generate`` interface (token ids in, TokenOutput with log-probs out)."""

    def __init__(self, model, tok, max_new_tokens=6):
        self.model, self.tok, self.n = model, tok, max_new_tokens
        self.calls = 0
        self.max_tokens: list[int] = []

    async def generate(self, request_id, prompt_ids, sampling_params, **kw):
        self.calls += 1
        # like verl's servers: sampling_params["max_tokens"] bounds this call (popped from the dict it gets)
        n = int(sampling_params.pop("max_tokens", self.n))
        self.max_tokens.append(n)
        ids = torch.tensor([prompt_ids])
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                      do_sample=True, temperature=float(sampling_params.get("temperature", 1.0)),
                                      pad_token_id=self.tok.pad_token_id, eos_token_id=self.tok.eos_token_id,
                                      output_scores=True, return_dict_in_generate=True)
        new = out.sequences[0, len(prompt_ids):].tolist()
        lps = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.scores, new)]
        return TokenOutput(token_ids=new, log_probs=lps, stop_reason="completed")


def _loop(server, tok, **kw):
    cfg = DictConfigWrap(OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 2048,
                                                                              "response_length": 96}},
                                           "data": {}}))
    return AgentGymAgentLoop(trainer_config=cfg, server_manager=server, tokenizer=tok, processor=None,
                             dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})), **kw)


@pytest.fixture(scope="module")
def episodes():
    tok = build_tokenizer(env_vocabulary("TextCraft-v0", 2))
    model = build_tiny_model(tok, hidden_size=32, seed=0).eval()
    server = _HFServer(model, tok, max_new_tokens=12)
    loop = _loop(server, tok, max_tokens_per_turn=5)
    import agentgym

    tasks = agentgym.make("TextCraft-v0").task_ids(2)
    torch.manual_seed(0)
    outs, uids = [], []
    for g, task in enumerate(tasks):
        for _ in range(2):
            extra = {"env_id": "TextCraft-v0", "task_id": task, "seed": g, "max_turns": 3,
                     "env_kwargs": {"invalid_action_penalty": 0.1}}
            outs.append(asyncio.run(loop.run({"temperature": 1.0}, extra_info=extra, index=g)))
            uids.append(f"prompt-{g}")
    return outs, uids, server


def test_adapters_verl_agent_loop_plays_episode(episodes):
    outs, _, server = episodes
    assert server.calls >= len(outs)
    # the per-turn budget (max_tokens_per_turn=5) reached the server on every call, capped by the room left
    assert server.max_tokens and max(server.max_tokens) == 5 and min(server.max_tokens) >= 1
    for o in outs:
        turns = o.extra_fields["agentgym_turns"]
        tt = np.asarray(o.extra_fields["agentgym_token_turn"])
        assert all(int((tt == k).sum()) <= 5 for k in range(len(turns)))
        assert all(isinstance(t["obs_text"], str) and t["obs_text"] for t in turns)
        assert len(o.response_ids) == len(o.response_mask) == tt.size <= 96
        assert 1 <= len(turns) <= 3 and o.num_turns == 2 * len(turns) + 1
        m = np.asarray(o.response_mask)
        assert np.all((tt >= 0) == (m == 1))  # observation tokens: mask 0, no turn
        assert sorted(set(tt[tt >= 0].tolist())) == list(range(len(turns)))
        assert o.reward_score == pytest.approx(sum(t["reward"] for t in turns))
        assert len(o.response_logprobs) == len(o.response_ids)
    assert any((np.asarray(o.response_mask) == 0).any() for o in outs), "no observation tokens appended"


def _data(outs, uids):
    L = max(len(o.response_ids) for o in outs)
    B = len(outs)
    rew = torch.zeros(B, L)
    mask = torch.zeros(B, L, dtype=torch.long)
    for b, o in enumerate(outs):
        n = len(o.response_ids)
        mask[b, :n] = torch.as_tensor(o.response_mask)
        rew[b, n - 1] = float(o.reward_score)  # verl puts reward_score at the last response token
    nt = {"uid": np.asarray(uids, dtype=object)}
    for key in ("agentgym_turns", "agentgym_token_turn", "agentgym_success", "agentgym_task_id"):
        col = np.empty(B, dtype=object)
        for b, o in enumerate(outs):
            col[b] = o.extra_fields[key]
        nt[key] = col
    return DataProto.from_dict(tensors={"token_level_rewards": rew, "response_mask": mask}, non_tensors=nt)


@pytest.mark.parametrize("name,settings", [("gigpo", {}), ("bipace", {"embedder": "identity"}),
                                           ("bipace", {"embedder": "hash_ngram"}), ("grpo", {})])
def test_adapters_verl_compute_advantage_dispatch_with_metadata(episodes, name, settings):
    outs, uids, _ = episodes
    data = _data(outs, uids)
    cfg = OmegaConf.create({"agentgym": {name: settings}})
    out = ray_trainer.compute_advantage(data, adv_estimator=f"agentgym_{name}", config=cfg)
    adv = out.batch["advantages"].numpy()
    # the same estimator on the same batch, built from the metadata the agent loop stored
    tb = build_trajectory_batch(data.batch["token_level_rewards"], data.batch["response_mask"],
                                data.non_tensor_batch["uid"], data.non_tensor_batch)
    assert tb.n_turns == sum(len(o.extra_fields["agentgym_turns"]) for o in outs)  # per-turn rows arrived
    assert tb.n_groups == 2
    ref_cfg = dict(settings)
    if settings.get("embedder") == "hash_ngram":  # the observation texts the agent loop stored, in turn-row order
        ref_cfg["obs_text"] = [t["obs_text"] for o in outs for t in o.extra_fields["agentgym_turns"]]
    ref = estimators.compute_advantage(name, tb, **ref_cfg)
    np.testing.assert_array_equal(adv, ref.token_adv)
    assert np.all(adv[data.batch["response_mask"].numpy() == 0] == 0)


@pytest.mark.parametrize("name,settings,column", [("bipace", {}, "embedding"), ("bigpo", {}, "embedding"),
                                                  ("a2tgpo", {}, "info_gain"), ("igpo", {}, "info_gain"),
                                                  ("sgcd", {}, "teacher_topk_logprob")])
def test_adapters_verl_model_side_columns_are_a_clear_error(episodes, name, settings, column):
    """The agent loop has no actor hidden states nor gold-answer likelihoods: estimators that need them fail
    before computing, naming the column and what runs instead."""
    outs, uids, _ = episodes
    data = _data(outs, uids)
    cfg = OmegaConf.create({"agentgym": {name: settings}})
    with pytest.raises(ModelSideColumnError, match=column) as e:
        ray_trainer.compute_advantage(data, adv_estimator=f"agentgym_{name}", config=cfg)
    assert "TRL adapter" in str(e.value)
    if column == "embedding":
        assert "hash_ngram" in str(e.value)


def test_adapters_verl_agent_loop_closes_its_env(monkeypatch):
    """Every run closes the env it made, also when generation fails mid-episode."""
    import agentgym

    made, closed = [], []
    real_make = agentgym.make

    def make(env_id, **kw):  # the real env, with its close() recorded
        env = real_make(env_id, **kw)
        made.append(env)
        real_close = env.close

        def close():
            closed.append(env)
            return real_close()

        env.close = close
        return env

    tok = build_tokenizer(env_vocabulary("TextCraft-v0", 2))  # before the patch: this makes envs too
    model = build_tiny_model(tok, hidden_size=32, seed=0).eval()
    monkeypatch.setattr(agentgym, "make", make)

    class _Failing(_HFServer):
        async def generate(self, *a, **kw):
            raise RuntimeError("server went away")

    extra = {"env_id": "TextCraft-v0", "seed": 0, "max_turns": 3}
    asyncio.run(_loop(_HFServer(model, tok), tok).run({"temperature": 1.0}, extra_info=extra, index=0))
    with pytest.raises(RuntimeError, match="went away"):
        asyncio.run(_loop(_Failing(model, tok), tok).run({"temperature": 1.0}, extra_info=extra, index=0))
    assert len(made) == 2 and closed == made


def test_adapters_verl_without_bridge_no_metadata(episodes):
    """verl's own dispatch hands a custom estimator no non_tensor_batch: GiGPO then fails with a clear error on
    its missing per-turn column; the bridge is what delivers it."""
    outs, uids, _ = episodes
    data = _data(outs, uids)
    fn = core_algos.get_adv_estimator_fn("agentgym_gigpo")
    with pytest.raises(estimators.MissingColumnError, match="obs_hash"):
        fn(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
           index=data.non_tensor_batch["uid"], config=None)
    assert plugin.BRIDGE and plugin.AGENT_LOOP and "agentgym_sgcd" in core_algos.ADV_ESTIMATOR_REGISTRY


# --------------------------------------------------------------------------- the actor loss (adapters.verl.losses)
# Inputs shaped as verl's engines pass them to ``loss_fn(model_output=..., data=..., dp_group=...)`` on the legacy
# path: ``data`` a TensorDict with dense prompts / responses / attention_mask (left-padded prompts, right-padded
# responses), the (B, T) response tensors and the global batch info as non-tensor data; ``model_output["log_probs"]``
# a nested (jagged) tensor over each row's prompt + response tokens.

from functools import partial  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from adapters.verl import losses as vlosses  # noqa: E402
from estimators import losses as elosses  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.config import FSDPActorConfig  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402
from verl.workers.utils.padding import no_padding_2_padding  # noqa: E402


def _actor_cfg(**kw):
    base = dict(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1)
    base.update(kw)
    return FSDPActorConfig(**base)


def _loss_inputs(response_mask, advantages, *, seed=0, spread=0.4, entropy=False, ref=False, extra=None,
                 dp_size=1, batch_num_tokens=None, global_batch_size=None):
    """(model_output, data, log_prob leaf) for a (B, T) response mask and advantages."""
    g = torch.Generator().manual_seed(seed)
    B, T = response_mask.shape
    resp_len = [max(int(torch.nonzero(response_mask[b]).max()) + 1 if response_mask[b].any() else 1, 1)
                for b in range(B)]
    P = 4
    prompt_len = [P - (b % 2) for b in range(B)]
    attn = torch.zeros(B, P + T, dtype=torch.long)
    for b in range(B):
        attn[b, P - prompt_len[b]:P] = 1
        attn[b, P:P + resp_len[b]] = 1
    lens = [p + r for p, r in zip(prompt_len, resp_len)]
    offsets = torch.tensor([0] + np.cumsum(lens).tolist())
    values = (-torch.rand(int(offsets[-1]), generator=g) * 2.0).requires_grad_(True)
    model_output = {"log_probs": torch.nested.nested_tensor_from_jagged(values, offsets=offsets)}
    td = TensorDict({"prompts": torch.randint(0, 50, (B, P), generator=g),
                     "responses": torch.randint(0, 50, (B, T), generator=g), "attention_mask": attn,
                     "response_mask": response_mask.long(), "advantages": advantages.float()}, batch_size=[B])
    lp = no_padding_2_padding(values.detach(), td)
    td["old_log_probs"] = lp + spread * torch.randn(B, T, generator=g)
    if entropy:
        model_output["entropy"] = torch.nested.nested_tensor_from_jagged(
            torch.rand(int(offsets[-1]), generator=g) + values * 0.1, offsets=offsets)
    if ref:
        td["ref_log_prob"] = lp + 0.2 * torch.randn(B, T, generator=g)
    for k, v in (extra or {}).items():
        td[k] = v
    tu.assign_non_tensor(td, dp_size=dp_size, batch_num_tokens=batch_num_tokens,
                         global_batch_size=global_batch_size)
    return model_output, td, values


def _random_case(seed=0, B=5, T=9):
    g = torch.Generator().manual_seed(100 + seed)
    mask = (torch.rand(B, T, generator=g) > 0.25).long()
    mask[:, 0] = 1
    mask[-1] = 0  # a row without response tokens
    return mask, torch.randn(B, T, generator=g)


def _grad(loss, leaf):
    (g,) = torch.autograd.grad(loss, leaf, retain_graph=True)
    return g


_AGG_CASES = [("token-mean", {}), ("token-sum", {}), ("seq-mean-token-sum", {}), ("seq-mean-token-mean", {}),
              ("seq-mean-token-sum-norm", {}),
              ("token-mean", dict(dp_size=2, batch_num_tokens=61, global_batch_size=10)),
              ("token-sum", dict(dp_size=2, batch_num_tokens=61, global_batch_size=10)),
              ("seq-mean-token-mean", dict(dp_size=2, batch_num_tokens=61, global_batch_size=10)),
              ("seq-mean-token-sum-norm", dict(dp_size=2, batch_num_tokens=61, global_batch_size=10))]


@pytest.mark.parametrize("agg,gbi", _AGG_CASES)
def test_adapters_verl_loss_equals_verl_ppo_loss_without_extra_keys(agg, gbi):
    """No agentgym keys, token ratio: verl's own ``ppo_loss`` (vanilla), value and gradient, with the entropy
    bonus, the KL loss, rollout IS weights and verl's global batch denominators."""
    mask, adv = _random_case(seed=len(agg))
    w = torch.rand(mask.shape, generator=torch.Generator().manual_seed(7)) * 1.5
    kw = dict(clip_ratio_low=0.1, clip_ratio_high=0.15, clip_ratio_c=2.0, loss_agg_mode=agg, entropy_coeff=0.01,
              use_kl_loss=True, kl_loss_coef=0.05)
    mo, td, leaf = _loss_inputs(mask, adv, entropy=True, ref=True, extra={"rollout_is_weights": w}, **gbi)
    ref_loss, ref_m = ppo_loss(_actor_cfg(**kw), mo, td.clone())
    loss, m = vlosses.agentgym_ppo_loss(_actor_cfg(**kw), mo, td.clone())
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(_grad(loss, leaf), _grad(ref_loss, leaf), rtol=1e-5, atol=1e-7)
    assert set(ref_m) <= set(m)
    for key in ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl", "actor/entropy_loss", "kl_loss"):
        assert m[key].aggregation == ref_m[key].aggregation
        assert m[key].aggregate() == pytest.approx(ref_m[key].aggregate(), rel=1e-5, abs=1e-6), key
    assert ref_m["actor/pg_clipfrac"].aggregate() > 0  # the clip binds somewhere
    # the same through the worker-side partial (verl calls it with keywords)
    fn = vlosses.make_loss_fn(_actor_cfg(**kw))
    loss2, _ = fn(model_output=mo, data=td.clone(), dp_group=None)
    torch.testing.assert_close(loss2, ref_loss, rtol=1e-5, atol=1e-6)


def _padded_logprob(mo, td):
    return no_padding_2_padding(mo["log_probs"], td)


def test_adapters_verl_loss_clip_scale_equals_estimators_policy_loss():
    mask, adv = _random_case(seed=3)
    k = 1.0 + 2.0 * torch.rand(mask.shape, generator=torch.Generator().manual_seed(5))
    mo, td, leaf = _loss_inputs(mask, adv, extra={vlosses.CLIP_SCALE_KEY: k})
    cfg = dict(clip_ratio_low=0.05, clip_ratio_high=0.08, loss_agg_mode="token-mean")
    loss, m = vlosses.agentgym_ppo_loss(_actor_cfg(**cfg), mo, td.clone())
    lp = _padded_logprob(mo, td)
    ref, ref_m = elosses.policy_loss(lp, td["old_log_probs"], adv, mask.bool(),
                                     elosses.PolicyLossConfig("token", 0.05, 0.08, dual_clip=3.0, agg="token-mean"),
                                     clip_scale=k)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(_grad(loss, leaf), _grad(ref, leaf), rtol=1e-6, atol=1e-8)
    assert m["actor/pg_clipfrac"].aggregate() == pytest.approx(ref_m["clipfrac"])
    assert m["actor/agentgym_clip_scale_mean"].aggregate() > 1.0
    # the clip binds, so the scale changes the loss: without it this is verl's unscaled vanilla loss
    assert ref_m["clipfrac"] > 0
    td_plain = td.clone()
    del td_plain[vlosses.CLIP_SCALE_KEY]
    plain, plain_m = vlosses.agentgym_ppo_loss(_actor_cfg(**cfg), mo, td_plain)
    verl_plain, _ = ppo_loss(_actor_cfg(**cfg), mo, td_plain.clone())
    torch.testing.assert_close(plain, verl_plain, rtol=1e-6, atol=1e-7)
    assert abs(float(plain.detach()) - float(loss.detach())) > 1e-4
    assert plain_m["actor/pg_clipfrac"].aggregate() >= m["actor/pg_clipfrac"].aggregate()  # wider bounds


def test_adapters_verl_loss_turn_ratio_equals_estimators_policy_loss():
    mask, adv = _random_case(seed=4)
    B, T = mask.shape
    tti = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):  # 1-3 turns per row, contiguous
        cuts = sorted(torch.randint(1, T, (b % 3,), generator=torch.Generator().manual_seed(b)).tolist())
        for c in cuts:
            tti[b, c:] += 1
    k = 1.0 + torch.rand(B, T, generator=torch.Generator().manual_seed(9))
    mo, td, leaf = _loss_inputs(mask, adv, spread=0.05, extra={vlosses.TURN_IDX_KEY: tti, vlosses.CLIP_SCALE_KEY: k})
    cfg = dict(clip_ratio_low=3e-3, clip_ratio_high=4e-3, loss_agg_mode="token-mean")
    loss, _ = vlosses.agentgym_ppo_loss(_actor_cfg(**cfg), mo, td.clone(), ratio="turn")
    lp = _padded_logprob(mo, td)
    ref, ref_m = elosses.policy_loss(lp, td["old_log_probs"], adv, mask.bool(),
                                     elosses.get_recipe("a2tgpo", kl_coef=0.0), clip_scale=k, token_turn_idx=tti)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(_grad(loss, leaf), _grad(ref, leaf), rtol=1e-6, atol=1e-8)
    tok, _ = vlosses.agentgym_ppo_loss(_actor_cfg(**cfg), mo, td.clone(), ratio="token")
    assert abs(float(tok.detach()) - float(loss.detach())) > 1e-6  # the turn ratio is a different objective
    td_no = td.clone()
    del td_no[vlosses.TURN_IDX_KEY]
    with pytest.raises(ValueError, match="agentgym_token_turn_idx"):
        vlosses.agentgym_ppo_loss(_actor_cfg(**cfg), mo, td_no, ratio="turn")
    with pytest.raises(ValueError, match="vanilla"):
        vlosses.agentgym_ppo_loss(_actor_cfg(policy_loss={"loss_mode": "gspo"}), mo, td.clone())


def _synthetic_outs(seed=0):
    """Agent-loop-shaped outputs (2 prompt groups x 2 trajectories, 2-3 turns each, observation tokens with mask 0,
    per-turn ``info_gain``) for the ``_data`` helper: A2TGPO needs the information gain, which the agent loop
    itself does not compute."""
    rng = np.random.default_rng(seed)
    outs, uids = [], []
    for g in range(2):
        for j in range(2):
            n_turns = 2 + (g + j) % 2
            mask, tt, turns = [], [], []
            for t in range(n_turns):
                a = int(rng.integers(2, 5))
                mask += [1] * a
                tt += [t] * a
                if t < n_turns - 1:
                    mask += [0] * 2
                    tt += [-1] * 2
                turns.append({"obs_hash": 100 * g + t, "action_key": t, "reward": 0.0, "valid_action": True,
                              "info_gain": float(rng.normal())})
            success = float(rng.random() > 0.5)
            turns[-1]["reward"] = success
            outs.append(SimpleNamespace(response_ids=[1] * len(mask), response_mask=mask, reward_score=success,
                                        extra_fields={"agentgym_turns": turns, "agentgym_token_turn": tt,
                                                      "agentgym_success": success,
                                                      "agentgym_task_id": f"task-{g}"}))
            uids.append(f"prompt-{g}")
    return outs, uids


def test_adapters_verl_a2tgpo_bridge_to_loss_end_to_end():
    """verl's compute_advantage (through the bridge) runs agentgym_a2tgpo and writes the clip scale and the token
    turn index into the batch; the actor loss reads both from the batch as verl hands it over."""
    outs, uids = _synthetic_outs()
    data = _data(outs, uids)
    out = ray_trainer.compute_advantage(data, adv_estimator="agentgym_a2tgpo", config=None)
    b = out.batch
    mask = b["response_mask"]
    assert vlosses.CLIP_SCALE_KEY in b.keys() and vlosses.TURN_IDX_KEY in b.keys()
    k, tti, adv = b[vlosses.CLIP_SCALE_KEY], b[vlosses.TURN_IDX_KEY], b["advantages"]
    assert k.shape == tti.shape == mask.shape
    assert (k[mask.bool()] != 1.0).any()  # process turns get kappa = 1 + lambda tanh(I/2) != 1
    for r, o in enumerate(outs):
        tt = np.asarray(o.extra_fields["agentgym_token_turn"])
        np.testing.assert_array_equal(tti[r, :tt.size].numpy()[tt >= 0], tt[tt >= 0])
    res = core_algos.get_adv_estimator_fn("agentgym_a2tgpo").last_result  # the estimator's own result
    np.testing.assert_array_equal(k.numpy(), np.asarray(res.clip_scale, dtype=np.float32))
    extra = {vlosses.CLIP_SCALE_KEY: k, vlosses.TURN_IDX_KEY: tti}
    mo, td, leaf = _loss_inputs(mask, adv, spread=0.05, extra=extra)
    cfg = _actor_cfg(clip_ratio_low=3e-3, clip_ratio_high=4e-3)
    loss, m = vlosses.agentgym_ppo_loss(cfg, mo, td.clone(), ratio="turn")
    g = _grad(loss, leaf)
    assert torch.isfinite(loss) and torch.isfinite(g).all() and g.abs().sum() > 0
    ref, _ = elosses.policy_loss(_padded_logprob(mo, td), td["old_log_probs"], adv, mask.bool(),
                                 elosses.get_recipe("a2tgpo", kl_coef=0.0), clip_scale=k, token_turn_idx=tti)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-7)
    assert m["actor/agentgym_clip_scale_mean"].aggregate() != 1.0


def test_adapters_verl_install_loss_on_worker_group_stand_in():
    """``install_loss`` on a stand-in for the actor worker group (a live Ray worker group is not run here): it
    converts the trainer's OmegaConf actor section like the worker does, and the installed function pickles
    (Ray ships it to every rank) and computes verl's loss on plain inputs."""
    import cloudpickle

    class _WG:
        def set_loss_fn(self, loss_fn):
            self.loss_fn = loss_fn

    wg = _WG()
    section = OmegaConf.create({"_target_": "verl.workers.config.FSDPActorConfig", "strategy": "fsdp",
                                "ppo_micro_batch_size_per_gpu": 1, "rollout_n": 1, "clip_ratio_low": 0.1})
    fn = vlosses.install_loss(wg, section, ratio="turn")
    assert wg.loss_fn is fn and isinstance(fn, partial) and fn.keywords["ratio"] == "turn"
    assert isinstance(fn.keywords["config"], FSDPActorConfig) and fn.keywords["config"].clip_ratio_low == 0.1
    fn2 = cloudpickle.loads(cloudpickle.dumps(fn))
    mask, adv = _random_case(seed=1)
    mo, td, _ = _loss_inputs(mask, adv, extra={vlosses.TURN_IDX_KEY: torch.zeros_like(mask)})
    loss, _ = fn2(model_output=mo, data=td, dp_group=None)
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match="ratio"):
        vlosses.install_loss(wg, section, ratio="segment")


def test_adapters_verl_v1_trainer_refuses_a_loss_mask_it_would_drop():
    """verl's v1 trainer writes back only advantages and returns: the bridge installed in its module runs the
    estimators, and one that keeps tokens out of the loss (DAPO's dynamic-sampling filter) raises, naming the legacy
    trainer, where the legacy trainer's copy applies the mask through response_mask."""
    from verl.trainer.ppo.v1 import utils as v1

    assert getattr(v1.compute_advantage, "_agentgym_bridge", None) == "v1"
    assert getattr(ray_trainer.compute_advantage, "_agentgym_bridge", None) == "legacy"
    outs, uids = _synthetic_outs()
    for o in outs:  # group 0 all failed (filtered), group 1 one win
        o.extra_fields["agentgym_success"] = float(o is outs[2])
        o.extra_fields["agentgym_turns"][-1]["reward"] = float(o is outs[2])
    keys = [f"{u}_{b}_0" for b, u in enumerate(uids)]
    with pytest.raises(ValueError, match="use_v1=false"):
        v1.compute_advantage_for_multi_trajectories(_data(outs, uids), batch_keys=keys, adv_estimator="agentgym_dapo")
    legacy = ray_trainer.compute_advantage(_data(outs, uids), adv_estimator="agentgym_dapo")
    assert not legacy.batch["response_mask"][:2].any() and legacy.batch["response_mask"][2:].any()
    # no filtered group: the v1 path runs the estimator as the legacy one does
    ok = v1.compute_advantage_for_multi_trajectories(_data(outs, uids), batch_keys=keys, adv_estimator="agentgym_dapo",
                                                     config=OmegaConf.create({"agentgym": {"dynamic_sampling": False}}))
    ref = ray_trainer.compute_advantage(_data(outs, uids), adv_estimator="agentgym_dapo",
                                        config=OmegaConf.create({"agentgym": {"dynamic_sampling": False}}))
    torch.testing.assert_close(ok.batch["advantages"], ref.batch["advantages"], rtol=0, atol=0)
