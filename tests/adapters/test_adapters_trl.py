"""TRL adapter: two GRPO steps of a tiny random causal LM (built here, no downloads) on real agentgym envs with
each estimator (one step for the rest of the 13). Checks: the loss is finite, parameters change exactly when some
advantage the loss used was non-zero, observation tokens get zero advantage, and the advantages the trainer used
equal ``estimators.compute_advantage`` on the same batch. The model's warm-up is a seeded scripted mix (each prompt
trained on a first action every task accepts and on an invalid one, equally often), so the sampled episodes of a group differ
in their invalid-action penalties on any CPU: the two-step tests' premise, reward spread, holds by construction (a
random model's draw, which depends on the CPU's arithmetic, left it to chance).
The loss plan: every estimator's effective loss config is its spec recipe, and TRL's own loss configured by the
plan computes exactly :func:`estimators.losses.policy_loss` with that recipe (value and gradient)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

pytest.importorskip("trl", reason="the TRL adapter needs the 'trl' extra: pip install -e '.[trl]'")
torch = pytest.importorskip("torch")

import estimators  # noqa: E402
from adapters.episodes import EpisodeConfig  # noqa: E402
from adapters.tiny import build_tiny_model, build_tokenizer, env_vocabulary, oracle_warmup  # noqa: E402
from adapters.trl import (ESTIMATOR_RECIPE, TRL_LOSS_TYPE, AgentGymConfig, AgentGymGRPOTrainer,  # noqa: E402
                          GRPOConfig, loss_plan, make_task_dataset)
from estimators.losses import get_recipe, policy_loss  # noqa: E402
from estimators.pvpo import StaticValueTable  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

PROMPT_TOKENS = 64
#: a first response every task of the env accepts (no invalid-action penalty)
VALID_EVERYWHERE = {"TextCraft-v0": "<action>inventory</action>",
                    "WikiSearch-v0": "<search>Which two elements did Marie Curie discover?</search>"}
N_TASKS = 2
G = 4


def _tiny(env_id: str, out_dir, env_kwargs: dict | None = None):
    tok = build_tokenizer(env_vocabulary(env_id, 4, env_kwargs=env_kwargs))
    model = build_tiny_model(tok, hidden_size=32, seed=0)
    # behaviour cloning on a scripted mix: the first response is a valid action or an invalid one about equally
    # often, so rewards differ inside a group (the invalid-action penalty) whatever the CPU. The valid action is one
    # every task accepts: the last PROMPT_TOKENS tokens of the tasks' prompts are the same instructions, so with each
    # task's own oracle action the model learned a blend of them ("get 1 acacia"), invalid everywhere, and on some
    # CPUs no group had any spread (issue 32)
    oracle_warmup(model, tok, env_id, n_tasks=N_TASKS, steps=80, lr=2e-2, env_kwargs=env_kwargs,
                  max_prompt_tokens=PROMPT_TOKENS, invalid_response="no action",
                  valid_response=VALID_EVERYWHERE[env_id])
    # saved, so that TRL can load the reference model of recipes with a KL term from the model's path
    model.save_pretrained(out_dir)
    return tok, str(out_dir)


@pytest.fixture(scope="module")
def textcraft(tmp_path_factory):
    return _tiny("TextCraft-v0", tmp_path_factory.mktemp("tiny-textcraft"))


@pytest.fixture(scope="module")
def wikisearch(tmp_path_factory):
    pytest.importorskip("bm25s", reason="WikiSearch-v0 needs the 'retrieval' extra (bm25s)")
    return _tiny("WikiSearch-v0", tmp_path_factory.mktemp("tiny-wikisearch"))


def _trainer(tok, model_dir, env_id, estimator, tmp_path, estimator_config=None, *, steps=2, max_turns=3,
             budget=96, **ag_kwargs):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    env_kwargs = {"invalid_action_penalty": 0.1}
    ds = make_task_dataset(env_id, N_TASKS)
    args = GRPOConfig(output_dir=str(tmp_path / estimator), per_device_train_batch_size=N_TASKS * G,
                      num_generations=G, max_steps=steps, use_cpu=True, bf16=False, report_to="none",
                      save_strategy="no", learning_rate=5e-3, logging_steps=1, gradient_checkpointing=False,
                      max_completion_length=budget, seed=0, disable_tqdm=True)
    ag = AgentGymConfig(env_id=env_id, estimator=estimator, estimator_config=estimator_config or {},
                        env_kwargs=env_kwargs, record_advantages=True,
                        episode=EpisodeConfig(max_turns=max_turns, max_new_tokens=10, max_completion_tokens=budget,
                                              max_prompt_tokens=PROMPT_TOKENS), **ag_kwargs)
    return AgentGymGRPOTrainer(model, args=args, train_dataset=ds, processing_class=tok, agentgym=ag), model


def _train(tok, model_dir, env_id, estimator, tmp_path, estimator_config=None, **kw):
    trainer, model = _trainer(tok, model_dir, env_id, estimator, tmp_path, estimator_config, **kw)
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    after = list(model.parameters())
    return trainer, before, after


def _check_loss_config(trainer):
    """The trainer runs with its estimator's recipe: TRL's loss fields are the plan's."""
    plan = trainer.ag_loss_plan
    assert plan.recipe == get_recipe(ESTIMATOR_RECIPE[trainer.ag.estimator])
    r = plan.recipe
    assert (trainer.epsilon_low, trainer.epsilon_high, trainer.beta, trainer.args.delta) == \
        (r.clip_low, r.clip_high, r.kl_coef, r.c_dual)
    assert trainer.args.use_bias_correction_kl is False
    assert trainer.loss_type == TRL_LOSS_TYPE[r.agg] or plan.custom
    assert (trainer.ref_model is not None) == (r.kl_coef > 0)


def _check(trainer, before, after, estimator, estimator_config=None, steps=2):
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == steps and all(math.isfinite(float(v)) for v in losses)
    changed = max(float((a.detach() - b).abs().max()) for a, b in zip(after, before)) > 0
    used_nonzero = any(float((u["advantages"] * u["tool_mask"]).abs().max()) > 0 for u in trainer.ag_used_advantages)
    # with a zero advantage on every trained token the policy gradient is 0, and so is the KL's while the policy is
    # the reference (it stays so while no step moves it): the parameters change exactly when an advantage is non-zero
    assert changed == used_nonzero, "parameters changed iff some advantage was non-zero"
    if steps > 1:  # the premise of the two-step tests, guaranteed by the scripted warm-up mix (see the docstring)
        assert used_nonzero, "no reward spread in any group of any step"
    _check_loss_config(trainer)
    batch, res = trainer.ag_last_batch, trainer.ag_last_result
    # the estimator on the same batch gives exactly what the trainer put in place of TRL's advantages
    again = estimators.compute_advantage(estimator, batch, **(estimator_config or {}))
    np.testing.assert_array_equal(again.token_adv, res.token_adv)
    # observation (env) tokens: zero advantage and no loss
    env_tok = np.zeros_like(batch.response_mask)
    for b, e in enumerate(trainer.ag_last_episodes):
        n = min(len(e.env_mask), env_tok.shape[1])
        env_tok[b, :n] = np.asarray(e.env_mask[:n]) == 0
    assert env_tok.any(), "no observation tokens: the episodes were single-turn"
    assert np.all(res.token_adv[env_tok] == 0.0)
    assert not res.loss_mask[env_tok].any()
    # what the loss used (last step, TRL's shuffled rows) matches the estimator's rows
    used = trainer.ag_used_advantages[-1]
    assert sorted(used["row"].tolist()) == list(range(len(trainer.ag_last_episodes)))
    for i in range(used["advantages"].shape[0]):
        b = int(used["row"][i])
        ids = used["completion_ids"][i][used["completion_mask"][i].bool()].tolist()
        assert ids == trainer.ag_last_episodes[b].completion_ids
        np.testing.assert_allclose(used["advantages"][i].numpy(), res.token_adv[b], rtol=0, atol=0)
        np.testing.assert_array_equal(used["tool_mask"][i].numpy().astype(bool), res.loss_mask[b])
    return res


@pytest.mark.parametrize("estimator,config", [
    ("grpo", {}),
    ("gigpo", {}),
    ("bipace", {"embedder": "embedding"}),
    ("gvpo", {}),
])
def test_adapters_trl_textcraft(textcraft, tmp_path, estimator, config):
    tok, model = textcraft
    trainer, before, after = _train(tok, model, "TextCraft-v0", estimator, tmp_path, config)
    res = _check(trainer, before, after, estimator, config)
    logged = trainer.state.log_history[0]
    assert "agentgym/adv_std" in logged and "agentgym/success" in logged
    if estimator == "bipace":
        emb = trainer.ag_last_batch.embedding
        assert emb.shape[0] == trainer.ag_last_batch.n_turns
        np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
        assert "agentgym/singleton_record_frac" in logged and "agentgym/frac_rows_pace" in logged
        assert "n_step_clusters" in res.diagnostics


def test_adapters_trl_sgcd(textcraft, tmp_path):
    tok, model = textcraft
    cfg = {"top_k": 8}  # K is capped by the tiny vocabulary; a real model uses the default 100
    trainer, before, after = _train(tok, model, "TextCraft-v0", "sgcd", tmp_path, cfg)
    res = _check(trainer, before, after, "sgcd", cfg)
    assert res.token_weight is not None
    w = res.token_weight[res.loss_mask]
    assert np.all((w >= 1.0) & (w <= 2.0))
    assert trainer.ag_last_batch.teacher_topk_logprob.shape[2] == 8
    # Credit weights are logged for every step whose batch has a group with non-zero reward spread (a step where every
    # group's rewards are equal has no advantages to weight; with a random tiny model that depends on the env's texts).
    steps = [h for h in trainer.state.log_history if "frac_reward_zero_std" in h]
    weighted = [h for h in steps if h["frac_reward_zero_std"] < 1]
    assert weighted and all("agentgym/credit_weight_mean" in h for h in weighted)
    assert all(1.0 <= h["agentgym/credit_weight_mean"] <= 2.0 for h in weighted)


def test_adapters_trl_a2tgpo_information_gain(wikisearch, tmp_path):
    tok, model = wikisearch
    trainer, before, after = _train(tok, model, "WikiSearch-v0", "a2tgpo", tmp_path)
    res = _check(trainer, before, after, "a2tgpo")
    batch = trainer.ag_last_batch
    process = ~(batch.done | batch.is_final_answer)
    assert process.any(), "no process (search) turns: information gain was not exercised"
    assert np.isfinite(batch.info_gain[process]).all()
    assert np.abs(batch.info_gain[process]).max() > 0
    # the custom loss ran (per-token clip scales from IG are not expressible in TRL's loss)
    assert res.clip_scale is not None
    logged = trainer.state.log_history[0]
    assert "agentgym/loss/pg_loss" in logged and "agentgym/clip_scale_mean" in logged


# ------------------------------------------------------------------------------------------- the loss plan
def _recipe_of_trl(trl: dict, l_norm=None):
    """The spec recipe TRL computes with these GRPOConfig loss fields (inverse of the plan's mapping)."""
    agg = {v: k for k, v in TRL_LOSS_TYPE.items()}[trl["loss_type"]]
    assert trl["importance_sampling_level"] == "token" and trl["use_bias_correction_kl"] is False
    return estimators.losses.PolicyLossConfig("token", trl["epsilon"], trl["epsilon_high"], dual_clip=trl["delta"],
                                              agg=agg, kl_coef=trl["beta"], l_norm=l_norm)


@pytest.mark.parametrize("name", estimators.available())
def test_adapters_trl_loss_plan_is_the_spec_recipe(name):
    cfg = {"v_table": StaticValueTable({"t": 0.5})} if name == "pvpo" else {}
    plan = loss_plan(name, cfg, max_completion_length=96, completion_budget=96)
    # the recipe of the estimator's own name where the spec has one (GVPO: clip high 0.28, seq-mean-token-mean)
    want = get_recipe(name) if name in estimators.losses.RECIPES else get_recipe(ESTIMATOR_RECIPE[name])
    assert plan.recipe == want and plan.recipe_name == ESTIMATOR_RECIPE[name]
    # the adapter's loss: A2TGPO (turn ratio, per-token clip scales) and every recipe with a KL term (TRL's is not
    # clamped to [-10, 10]: test_adapters_trl_kl_is_clamped_as_the_recipe_says)
    assert plan.custom == (name == "a2tgpo" or want.kl_coef > 0)
    if not plan.custom:  # TRL's fields encode every field of the recipe (dual clip included)
        assert _recipe_of_trl(plan.trl).c_dual == want.c_dual == 3.0
        assert _recipe_of_trl(plan.trl) == dataclasses.replace(want, dual_clip=3.0)
    assert plan.trl["beta"] == want.kl_coef
    assert name in plan.describe()


def test_adapters_trl_loss_plan_routes():
    # IGPO with A2TGPO's adaptive clip needs per-token clip scales; a forced recipe always uses the adapter's loss
    assert loss_plan("igpo", {"clip_lambda": 0.3}).custom
    forced = loss_plan("grpo", loss="gspo")
    assert forced.custom and forced.recipe == get_recipe("gspo")
    # Dr.GRPO's L_norm is the episode budget: TRL's dr_grpo only when max_completion_length is that budget
    assert not loss_plan("dr_grpo", max_completion_length=96, completion_budget=96).custom
    assert loss_plan("dr_grpo", max_completion_length=128, completion_budget=96).custom
    assert loss_plan("gigpo").custom and "unclamped" in loss_plan("gigpo").reason  # its KL term
    over = loss_plan("gigpo", overrides={"kl_coef": 0.0, "clip_high": 0.28})
    assert not over.custom and over.trl["beta"] == 0.0 and over.trl["epsilon_high"] == 0.28
    with pytest.raises(ValueError, match="no loss recipe"):
        loss_plan("nope")


def test_adapters_trl_builtin_loss_equals_the_recipe(textcraft, tmp_path):
    """TRL's own ``_compute_loss`` with the plan's GRPOConfig fields equals ``policy_loss`` with the recipe (value
    and gradient) for every estimator the plan sends to TRL, on inputs where the clip and the dual clip bind."""
    tok, model_dir = textcraft
    trainer, model = _trainer(tok, model_dir, "TextCraft-v0", "dr_grpo", tmp_path, steps=1)
    model.eval()
    g = torch.Generator().manual_seed(0)
    B, P, T = 4, 5, 7
    V = model.config.vocab_size
    comp_mask = torch.ones(B, T, dtype=torch.long)
    comp_mask[1, 5:] = 0
    comp_mask[3, 3:] = 0
    tool_mask = (torch.rand(B, T, generator=g) > 0.2).long()
    tool_mask[:, 0] = 1
    inputs = {"prompt_ids": torch.randint(4, V, (B, P), generator=g), "prompt_mask": torch.ones(B, P, dtype=torch.long),
              "completion_ids": torch.randint(4, V, (B, T), generator=g), "completion_mask": comp_mask,
              "tool_mask": tool_mask, "advantages": torch.randn(B, T, generator=g)}
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], comp_mask], 1)
    with torch.no_grad():
        lp0, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, att, T)
    # old log-probs: ratios from e^-2 to e^2 (clip and dual clip bind); reference: a KL of moderate size
    inputs["old_per_token_logps"] = lp0 + 4.0 * (torch.rand(B, T, generator=g) - 0.5)
    inputs["ref_per_token_logps"] = lp0 + 0.3 * torch.randn(B, T, generator=g)
    mask = (comp_mask * tool_mask).bool()
    inputs["num_items_in_batch"] = mask.sum()
    params = [p for p in model.parameters() if p.requires_grad]
    routed = [n for n in estimators.available()
              if not loss_plan(n, {"v_table": StaticValueTable({})} if n == "pvpo" else {}).custom]
    assert {"dr_grpo", "dapo", "gvpo", "sgcd"} <= set(routed)
    for name in routed:
        plan = loss_plan(name, {"v_table": StaticValueTable({})} if name == "pvpo" else {},
                         max_completion_length=trainer.max_completion_length,
                         completion_budget=trainer.max_completion_length)
        trainer.loss_type, trainer.beta = plan.trl["loss_type"], plan.trl["beta"]
        trainer.epsilon_low, trainer.epsilon_high = plan.trl["epsilon"], plan.trl["epsilon_high"]
        trainer.args.delta = plan.trl["delta"]
        trainer.args.use_bias_correction_kl = plan.trl["use_bias_correction_kl"]
        trl_loss = GRPOTrainer._compute_loss(trainer, model, dict(inputs))
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, att, T)
        recipe = dataclasses.replace(plan.recipe, l_norm=trainer.max_completion_length)
        ours, m = policy_loss(logps, inputs["old_per_token_logps"], inputs["advantages"], mask, recipe,
                              ref_logprob=inputs["ref_per_token_logps"])
        assert m["clipfrac"] > 0 and m["clipfrac_lower"] > 0  # both clips bind on these inputs
        torch.testing.assert_close(trl_loss, ours, rtol=1e-5, atol=1e-7, msg=name)
        g_trl = torch.autograd.grad(trl_loss, params)
        g_ours = torch.autograd.grad(ours, params)
        for a, b in zip(g_trl, g_ours):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7, msg=name)


def test_adapters_trl_kl_is_clamped_as_the_recipe_says(textcraft, tmp_path):
    """GRPO's recipe has a k3 KL term clamped to [-10, 10] (spec 6.3, verl's ``low_var_kl``). Where a token the
    policy has made rare was likely under the reference (z = ref - log pi of 12-15), TRL's unclamped term is
    ~1e5 times larger and its gradient swamps the policy gradient; the adapter's loss is the recipe's."""
    tok, model_dir = textcraft
    trainer, model = _trainer(tok, model_dir, "TextCraft-v0", "grpo", tmp_path, steps=1)
    assert trainer._ag_custom_loss and trainer.beta == 0.001  # TRL still computes reference log-probs
    model.eval()  # the loss's "eval" mode: one batch, no accumulation window
    trainer.ag.record_advantages = False  # hand-made inputs: no rollout rows to record
    g = torch.Generator().manual_seed(1)
    B, P, T = 4, 5, 7
    V = model.config.vocab_size
    comp_mask = torch.ones(B, T, dtype=torch.long)
    comp_mask[2, 4:] = 0
    inputs = {"prompt_ids": torch.randint(4, V, (B, P), generator=g), "prompt_mask": torch.ones(B, P, dtype=torch.long),
              "completion_ids": torch.randint(4, V, (B, T), generator=g), "completion_mask": comp_mask,
              "advantages": torch.randn(B, T, generator=g)}
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], comp_mask], 1)
    with torch.no_grad():
        lp0, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, att, T)
    ref = lp0 + 0.3 * torch.randn(B, T, generator=g)
    ref[0, 1] = lp0[0, 1] + 15.0  # two tokens far more likely under the reference: the clamp binds there
    ref[3, 2] = lp0[3, 2] + 12.0
    inputs.update(old_per_token_logps=lp0.clone(), ref_per_token_logps=ref, num_items_in_batch=comp_mask.sum())
    params = [p for p in model.parameters() if p.requires_grad]
    ours = trainer._compute_loss(model, dict(inputs))
    logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, att, T)
    want, m = policy_loss(logps, lp0, inputs["advantages"], comp_mask, get_recipe("grpo"), ref_logprob=ref)
    torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-7)
    assert m["kl"] <= 10.0 and trainer._metrics["eval"]["kl"][-1] == pytest.approx(m["kl"])
    assert len(trainer._metrics["eval"]["entropy"]) == 1
    trl_loss = GRPOTrainer._compute_loss(trainer, model, dict(inputs))  # TRL's own: the unclamped KL
    assert float(trl_loss) > float(ours) + 0.001 * 1e4
    g_ours = torch.cat([x.flatten() for x in torch.autograd.grad(ours, params)])
    g_trl = torch.cat([x.flatten() for x in torch.autograd.grad(trl_loss, params)])
    assert g_trl.norm() > 100 * g_ours.norm()


# ------------------------------------------------------------------- one-step smoke runs of the other estimators
@pytest.mark.parametrize("estimator,config", [
    ("dr_grpo", {}),
    ("rloo", {}),
    ("dapo", {}),
    ("hgpo", {}),
    ("bigpo", {"embedder": "embedding"}),
    ("pvpo", "v_table"),
])
def test_adapters_trl_one_step(textcraft, tmp_path, estimator, config):
    tok, model_dir = textcraft
    if config == "v_table":  # PVPO's static value table over the training tasks
        ds = make_task_dataset("TextCraft-v0", N_TASKS)
        config = {"v_table": StaticValueTable({t: 0.5 for t in ds["task_id"]})}
    trainer, before, after = _train(tok, model_dir, "TextCraft-v0", estimator, tmp_path, config, steps=1,
                                    max_turns=2, budget=48)
    res = _check(trainer, before, after, estimator, config, steps=1)
    if estimator == "bigpo":
        assert trainer.ag_last_batch.embedding.shape[0] == trainer.ag_last_batch.n_turns
        assert "n_step_clusters" in res.diagnostics
    if estimator == "dapo":  # dynamic sampling: a group with one success value trains nothing
        batch = trainer.ag_last_batch
        for gid in np.unique(batch.group_id):
            in_group = batch.group_id == gid
            rows = np.isin(batch.row_traj_id, batch.traj_id[in_group])
            flat = len(np.unique(batch.success[in_group])) == 1
            assert flat == (not res.loss_mask[rows].any())


def test_adapters_trl_igpo_information_gain(wikisearch, tmp_path):
    tok, model_dir = wikisearch
    trainer, before, after = _train(tok, model_dir, "WikiSearch-v0", "igpo", tmp_path, steps=1, budget=96)
    _check(trainer, before, after, "igpo", steps=1)
    # IGPO's fixed clip takes GRPO's recipe, whose KL term TRL would not clamp: the adapter's loss
    assert trainer.ag_loss_plan.custom and trainer.ag_loss_plan.recipe_name == "grpo"
    batch = trainer.ag_last_batch
    process = ~(batch.done | batch.is_final_answer)
    assert process.any() and np.isfinite(batch.info_gain[process]).all()


# ----------------------------------------------------------------------- a new reset seed per group (group_seeds)
def test_adapters_trl_group_seeds_draw_a_new_world_at_each_visit(textcraft, tmp_path):
    """``group_seeds="group"``: the G members of a group share one reset seed, and each visit of a task draws
    another (here TextCraft's counterfactual worlds: the same task shows other names at its next visit); the
    default keeps the task's row seed at every visit. ``agentgym train --rollout-env-kwargs`` reaches the rollouts
    only: the warm start and the evaluation play ``--env-kwargs``."""
    from adapters.train import TrainSettings, build_trainer, training_env_kwargs

    tok, model_dir = textcraft
    seen: dict[str, list] = {}
    for mode in ("group", "task"):
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        args = GRPOConfig(output_dir=str(tmp_path / mode), per_device_train_batch_size=N_TASKS * G,
                          num_generations=G, max_steps=2, use_cpu=True, bf16=False, report_to="none",
                          save_strategy="no", learning_rate=1e-3, logging_steps=1, seed=0, disable_tqdm=True,
                          max_completion_length=24)
        ag = AgentGymConfig(env_id="TextCraft-v0", env_kwargs={"counterfactual": True}, group_seeds=mode,
                            episode=EpisodeConfig(max_turns=1, max_new_tokens=8, max_completion_tokens=24,
                                                  max_prompt_tokens=PROMPT_TOKENS))
        trainer = AgentGymGRPOTrainer(model, args=args, train_dataset=make_task_dataset("TextCraft-v0", N_TASKS),
                                      processing_class=tok, agentgym=ag)
        visits = []
        rollout = trainer.rollout_func  # TRL calls it once per generation batch

        def recording(prompts, tr, _rollout=rollout, _visits=visits, _trainer=trainer):
            out = _rollout(prompts, tr)
            _visits.extend(_trainer.ag_last_episodes)
            return out

        trainer.rollout_func = recording
        trainer.train()
        seen[mode] = visits
    for mode, episodes in seen.items():
        groups: dict[int, list] = {}
        for e in episodes:
            groups.setdefault(e.group_id, []).append(e)
        assert len(groups) == 2 * N_TASKS
        for members in groups.values():  # one world per group
            assert len({(e.task_id, e.seed, e.first_observation) for e in members}) == 1
        by_task: dict[str, set] = {}
        for members in groups.values():
            by_task.setdefault(members[0].task_id, set()).add((members[0].seed, members[0].first_observation))
        assert all(len(v) == 2 for v in by_task.values()) == (mode == "group")
        assert all(len(v) == 1 for v in by_task.values()) == (mode == "task")
    with pytest.raises(ValueError, match="group_seeds"):
        AgentGymConfig(env_id="TextCraft-v0", group_seeds="episode")
    import shutil

    with_tok = tmp_path / "model"
    shutil.copytree(model_dir, with_tok)
    tok.save_pretrained(str(with_tok))
    s = TrainSettings(model=str(with_tok), env="TextCraft-v0", split="gen-depth1", n_tasks=2, cpu=True,
                      output_dir=str(tmp_path / "train"), rollout_env_kwargs={"counterfactual": True},
                      group_seeds="group")
    trainer = build_trainer(s)
    assert trainer.ag.env_kwargs["counterfactual"] is True and trainer.ag.group_seeds == "group"
    assert "counterfactual" not in training_env_kwargs(s)
