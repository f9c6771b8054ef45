"""TRL adapter: two GRPO steps of a tiny random causal LM (built here, no downloads) on real agentgym envs with
each estimator. Checks: the loss is finite, parameters change, observation tokens get zero advantage, and the
advantages the trainer used equal ``estimators.compute_advantage`` on the same batch."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

pytest.importorskip("trl", reason="the TRL adapter needs the 'trl' extra: pip install 'agentgym[trl]'")
torch = pytest.importorskip("torch")

import estimators  # noqa: E402
from adapters.episodes import EpisodeConfig  # noqa: E402
from adapters.tiny import build_tiny_model, build_tokenizer, env_vocabulary, oracle_warmup  # noqa: E402
from adapters.trl import AgentGymConfig, AgentGymGRPOTrainer, GRPOConfig, make_task_dataset  # noqa: E402

PROMPT_TOKENS = 64
N_TASKS = 2
G = 4


def _tiny(env_id: str, env_kwargs: dict | None = None):
    tok = build_tokenizer(env_vocabulary(env_id, 4, env_kwargs=env_kwargs))
    model = build_tiny_model(tok, hidden_size=32, seed=0)
    # a few behaviour-cloning steps so that some sampled actions are well-formed: rewards then differ in a group
    oracle_warmup(model, tok, env_id, n_tasks=N_TASKS, steps=40, lr=2e-2, env_kwargs=env_kwargs,
                  max_prompt_tokens=PROMPT_TOKENS)
    return tok, model


@pytest.fixture(scope="module")
def textcraft():
    return _tiny("TextCraft-v0")


@pytest.fixture(scope="module")
def wikisearch():
    pytest.importorskip("bm25s", reason="WikiSearch-v0 needs the 'retrieval' extra (bm25s)")
    return _tiny("WikiSearch-v0")


def _train(tok, base_model, env_id, estimator, tmp_path, estimator_config=None, **ag_kwargs):
    torch.manual_seed(0)
    model = copy.deepcopy(base_model)
    env_kwargs = {"invalid_action_penalty": 0.1}
    ds = make_task_dataset(env_id, N_TASKS)
    args = GRPOConfig(output_dir=str(tmp_path / estimator), per_device_train_batch_size=N_TASKS * G,
                      num_generations=G, max_steps=2, use_cpu=True, bf16=False, report_to="none",
                      save_strategy="no", learning_rate=5e-3, logging_steps=1, gradient_checkpointing=False,
                      max_completion_length=96, seed=0, disable_tqdm=True)
    ag = AgentGymConfig(env_id=env_id, estimator=estimator, estimator_config=estimator_config or {},
                        env_kwargs=env_kwargs, record_advantages=True,
                        episode=EpisodeConfig(max_turns=3, max_new_tokens=10, max_completion_tokens=96,
                                              max_prompt_tokens=PROMPT_TOKENS), **ag_kwargs)
    trainer = AgentGymGRPOTrainer(model, args=args, train_dataset=ds, processing_class=tok, agentgym=ag)
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    after = list(model.parameters())
    return trainer, before, after


def _check(trainer, before, after, estimator, estimator_config=None):
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(float(v)) for v in losses)
    assert max(float((a.detach() - b).abs().max()) for a, b in zip(after, before)) > 0, "parameters did not change"
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
    assert any(float(u["advantages"].abs().max()) > 0 for u in trainer.ag_used_advantages)
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
    assert "agentgym/credit_weight_mean" in trainer.state.log_history[-2]


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
