"""verl parity: the same recorded rollouts through the verl plugin's path and through the TRL adapter's path give
identical per-token advantages and loss masks, for every estimator that runs under verl.

What runs (all on CPU; a live verl trainer needs vLLM / SGLang on a GPU and is not run here):

1. **Recording.** Real group rollouts (3 tasks x 4 members) through the TRL adapter's rollout function
   :func:`adapters.episodes.play_episodes` with the tiny word-level tokenizer and per-member policies behind its
   ``generate`` call: the env's oracle, a seeded random policy, the oracle for one turn then random, and the tiny
   random LM sampling. Recordings (:data:`LABS`): TextCraft-v0 gen-depth1 with a roomy token budget and with a tight
   one that stops some episodes early (last turn truncated), and WikiSearch-v0 (gold answers: IGPO / A2TGPO). Groups
   hold wins and losses (one group all wins, one all losses), invalid-action penalties, repeated states and EOS
   tokens inside the completion.
2. **TRL path.** ``AgentGymGRPOTrainer._generate_and_score_completions`` on the task rows, its rollout function
   returning the recorded episodes: TRL pads, builds its completion mask, and the adapter builds the batch (with the
   model-side columns it computes itself, e.g. BiPACE's actor-hidden fingerprints) and puts the estimator's
   ``token_adv`` / ``loss_mask`` in TRL's ``advantages`` / ``tool_mask``. Loss mask = ``completion_mask *
   tool_mask``, what TRL's loss uses.
3. **verl path.** ``AgentGymAgentLoop.run`` replays each recorded episode against a server that returns the
   recorded action tokens (and checks that the loop rebuilt exactly the recorded context: prompt, actions,
   observation tokens); verl's own ``AgentLoopWorker`` post-processing pads the outputs into a ``DataProto``
   (``rm_scores`` at the last response token, ``extra_fields`` -> ``non_tensor_batch``); ``token_level_rewards``
   = ``rm_scores`` (the legacy trainer without a KL-in-reward); ``uid`` per prompt group; then verl's
   ``ray_trainer.compute_advantage`` with ``adv_estimator=agentgym_<name>`` (the metadata bridge). Loss mask = the
   batch's ``response_mask`` afterwards, what verl's actor loss uses (``loss_mask = response_mask``).

Estimators needing a model-side column (BiGPO / BiPACE's ``embedding``, IGPO / A2TGPO's ``info_gain``) get the
column the TRL adapter computed written into ``agentgym_turns``, as an agent loop of one's own would (the agentgym
agent loop cannot compute them). SGCD does not run under verl (test_adapters_verl.py checks its error).
Compared per row over the episode's tokens (zeros past it): advantages, loss masks, the token turn index and the
clip scale, exactly (float32 equality).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("verl", reason="the verl adapter needs the 'verl' extra: pip install 'verl[verl-core]==0.9.1'")
pytest.importorskip("verl.trainer.ppo.ray_trainer", reason="needs verl-core: pip install 'verl[verl-core]==0.9.1'")
pytest.importorskip("trl", reason="the TRL path needs trl (the verl extra installs trl 1.16)")
torch = pytest.importorskip("torch")

import agentgym  # noqa: E402
import adapters.trl as atrl  # noqa: E402
from adapters.episodes import EpisodeConfig, play_episodes  # noqa: E402
from adapters.tiny import build_tiny_model, build_tokenizer, env_vocabulary  # noqa: E402
from adapters.trl import AgentGymConfig, AgentGymGRPOTrainer, GRPOConfig, make_task_dataset  # noqa: E402
from adapters.verl import plugin  # noqa: E402,F401  (registers the estimators and the bridge)
from adapters.verl.agent_loop import AgentGymAgentLoop  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap  # noqa: E402
from verl.trainer.ppo import ray_trainer  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

N_TASKS, G = 3, 4
MAX_TURNS, PER_TURN = 4, 16
#: the recordings: (env id, env kwargs, completion token budget (actions + observations)); "tight" stops some
#: TextCraft episodes early, the others no episode
LABS = {"textcraft": ("TextCraft-v0", {"split": "gen-depth1", "invalid_action_penalty": 0.1}, 256),
        "textcraft-tight": ("TextCraft-v0", {"split": "gen-depth1", "invalid_action_penalty": 0.1}, 40),
        "wikisearch": ("WikiSearch-v0", {"invalid_action_penalty": 0.1}, 1024)}
#: per group, the policy of each member (see _ScriptedPolicy)
POLICIES = (("oracle", "oracle_then_random", "random", "lm"),
            ("random", "lm", "random", "lm"),
            ("oracle", "oracle", "oracle", "oracle"))

#: every estimator configuration that runs under verl (README "verl 0.9.1"), with its settings
CASES = [
    ("grpo", {}), ("grpo", {"episode_stats": "per_step"}), ("dr_grpo", {}), ("rloo", {}),
    ("dapo", {}), ("dapo", {"overlong_shaping": True, "overlong_max": 40, "overlong_cache": 20}),
    ("dapo", {"overlong_filter": True}),
    ("gigpo", {}), ("gigpo", {"preset": "verl-agent"}), ("hgpo", {}), ("gvpo", {}),
    ("pvpo", {"v_table": "TABLE"}),
    ("bigpo", {"embedder": "identity"}), ("bipace", {"embedder": "identity"}),
    ("bigpo", {"embedder": "hash_ngram"}), ("bipace", {"embedder": "hash_ngram"}),
    ("bigpo", {}), ("bipace", {}),  # embedder="embedding": the TRL adapter's fingerprints, written into the metadata
]
#: information gain (the TRL adapter's, written into the metadata) needs gold answers: WikiSearch only
IG_CASES = [("igpo", {}), ("igpo", {"clip_lambda": 0.5}), ("a2tgpo", {})]
_IG = ("igpo", "a2tgpo")


class _ScriptedPolicy(torch.nn.Module):
    """The model ``play_episodes`` generates with: one policy per episode. Row r of a ``generate`` call is the r-th
    unfinished episode in spec order (``play_episodes`` steps every unfinished episode once per call), whose env
    is ``pool[i]`` (the env cache passed to ``play_episodes``): ``oracle`` = the env's oracle action, ``random`` =
    a seeded random command over the vocabulary, ``oracle_then_random``, ``lm`` = the tiny LM's sample."""

    def __init__(self, tok, lm, policies, pool, seed=0):
        super().__init__()
        self._anchor = torch.nn.Parameter(torch.zeros(1))  # play_episodes reads the device from parameters()
        self.generation_config = lm.generation_config
        self.tok, self.lm, self.policies, self.pool = tok, lm, policies, pool
        self.rng = np.random.default_rng(seed)
        self.words = [w for w in tok.get_vocab() if w.isalpha()]
        self.turn = [0] * len(policies)
        self.seen: list[list[int] | None] = [None] * len(policies)  # context + action of each episode's last turn

    def _random(self) -> str:
        w = " ".join(self.rng.choice(self.words, size=int(self.rng.integers(1, 4))))
        verb = self.rng.choice(["get", "craft", "inventory", ""])
        return str(self.rng.choice([f"<action>{verb} {int(self.rng.integers(1, 10))} {w}</action>",
                                    f"<search>{w}</search>", f"<answer>{w}</answer>"]))

    def _act(self, i: int, context: list[int], max_new: int) -> list[int]:
        policy = self.policies[i]
        k = self.turn[i]
        self.turn[i] += 1
        if policy == "lm":
            ids = torch.tensor([context])
            out = self.lm.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                   do_sample=True, pad_token_id=self.tok.pad_token_id,
                                   eos_token_id=self.tok.eos_token_id)
            return out[0, len(context):].tolist()
        oracle = policy == "oracle" or (policy == "oracle_then_random" and k == 0)
        text = self.pool[i].oracle_action() if oracle else self._random()
        return (self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id])[:max_new]

    def _rows(self, contexts: list[list[int]]) -> list[int]:
        """The episode of each row: the unfinished episodes in order, skipping those play_episodes stopped for
        its token budget (their env is not done; the row's context does not extend their last turn)."""
        candidates = iter(i for i, env in enumerate(self.pool[:len(self.policies)]) if not env._done)
        rows = []
        for ctx in contexts:
            i = next(candidates)
            while self.seen[i] is not None and ctx[:len(self.seen[i])] != self.seen[i]:
                i = next(candidates)
            rows.append(i)
        return rows

    def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
        contexts = [row[m.bool()].tolist() for row, m in zip(input_ids, attention_mask)]
        acts = []
        for i, ctx in zip(self._rows(contexts), contexts):
            acts.append(self._act(i, ctx, max_new_tokens))
            # the next turn's context extends this one without the EOS (play_episodes drops a non-final one)
            a = acts[-1]
            self.seen[i] = ctx + (a[:-1] if len(a) > 1 and a[-1] == self.tok.eos_token_id else a)
        n = max(len(a) for a in acts)
        new = torch.full((len(acts), n), self.tok.pad_token_id, dtype=torch.long)
        for r, a in enumerate(acts):
            new[r, :len(a)] = torch.as_tensor(a)
        return torch.cat([input_ids, new], dim=1)


class _ReplayServer:
    """verl's ``server_manager.generate`` replaying one recorded episode: turn k returns the recorded action tokens,
    after checking that the agent loop asks with exactly the recorded context and per-turn budget."""

    def __init__(self, episode):
        self.ep = episode
        self.k = 0

    async def generate(self, request_id, prompt_ids, sampling_params, **kw):
        ep = self.ep
        assert self.k < len(ep.turns), f"the agent loop asked for turn {self.k}; the record has {len(ep.turns)}"
        start, end = ep.turns[self.k].span
        assert list(prompt_ids) == ep.prompt_ids + ep.completion_ids[:start], f"context differs at turn {self.k}"
        assert end - start <= int(sampling_params["max_tokens"])
        self.k += 1
        return TokenOutput(token_ids=ep.completion_ids[start:end], log_probs=[-1.0] * (end - start),
                           stop_reason="completed")


def _verl_worker(tok, budget):
    """verl's ``AgentLoopWorker`` for its post-processing only (padding, ``rm_scores``, ``extra_fields`` ->
    ``non_tensor_batch``): its constructor needs Ray, servers and a model config, none of which that code uses."""
    w = AgentLoopWorker.__new__(AgentLoopWorker)
    w.tokenizer = tok
    w.processor = None
    w.rollout_config = SimpleNamespace(prompt_length=2048, response_length=budget)
    w.reward_loop_worker_handles = None
    w.distillation_enabled = False
    w.mm_processor_kwargs = {}
    return w


@pytest.fixture(scope="module", params=sorted(LABS))
def lab(request, tmp_path_factory):
    env_id, kwargs, budget = LABS[request.param]
    tok = build_tokenizer(env_vocabulary(env_id, N_TASKS, env_kwargs=kwargs))
    lm = build_tiny_model(tok, hidden_size=32, seed=0).eval()
    tasks = list(agentgym.make(env_id, **kwargs).task_ids(N_TASKS))
    ds = make_task_dataset(env_id, task_ids=tasks, env_kwargs=kwargs)
    rows = [dict(r) for r in ds for _ in range(G)]  # TRL's RepeatSampler order: each prompt G times in a row
    episode = EpisodeConfig(max_turns=MAX_TURNS, max_new_tokens=PER_TURN, max_completion_tokens=budget)

    # 1. the recording: a real group rollout through the TRL adapter's rollout function
    envs: dict = {}
    pool_kwargs = dict(kwargs, max_turns=MAX_TURNS)  # the key play_episodes caches envs under
    pool = [agentgym.make(env_id, **pool_kwargs) for _ in rows]
    envs[(env_id, tuple(sorted((k, repr(v)) for k, v in pool_kwargs.items())))] = pool
    policies = [p for group in POLICIES for p in group]
    torch.manual_seed(0)
    specs = [(r["task_id"], r["seed"], b // G, b) for b, r in enumerate(rows)]
    recorded = play_episodes(_ScriptedPolicy(tok, lm, policies, pool), tok, env_id, specs, episode,
                             env_kwargs=kwargs, envs=envs)

    # 2. the TRL adapter, its rollout replaced by the recording
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), per_device_train_batch_size=len(rows),
                      num_generations=G, max_steps=1, use_cpu=True, bf16=False, report_to="none",
                      save_strategy="no", gradient_checkpointing=False, max_completion_length=budget, seed=0,
                      disable_tqdm=True)
    ag = AgentGymConfig(env_id=env_id, env_kwargs=kwargs, episode=episode, loss_overrides={"kl_coef": 0.0})
    model = build_tiny_model(tok, hidden_size=32, seed=1)
    trainer = AgentGymGRPOTrainer(model, args=args, train_dataset=ds, processing_class=tok, agentgym=ag)
    model.train()

    def replay(model, tokenizer, env_id, specs_, cfg, **kw):
        assert [(s[0], s[1]) for s in specs_] == [(s[0], s[1]) for s in specs]
        eps = copy.deepcopy(recorded)
        for e, s in zip(eps, specs_):
            e.group_id, e.traj_id = int(s[2]), int(s[3])
        return eps

    mp = pytest.MonkeyPatch()
    mp.setattr(atrl, "play_episodes", replay)

    # 3. the verl agent loop replaying the recording, then verl's post-processing
    vtok = copy.deepcopy(tok)  # verl's post-processing sets padding_side on the tokenizer it gets
    cfg = DictConfigWrap(OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 2048,
                                                                              "response_length": budget}},
                                           "data": {}}))
    outs = []
    for r, e in zip(rows, recorded):
        server = _ReplayServer(e)
        loop = AgentGymAgentLoop(trainer_config=cfg, server_manager=server, tokenizer=vtok, processor=None,
                                 dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})),
                                 max_tokens_per_turn=PER_TURN)
        extra = {"env_id": env_id, "task_id": r["task_id"], "seed": r["seed"], "max_turns": MAX_TURNS,
                 "env_kwargs": kwargs}
        outs.append(asyncio.run(loop.run({"temperature": 1.0}, extra_info=extra, index=r["seed"])))
        assert server.k == len(e.turns)  # every recorded action replayed, no turn more
    worker = _verl_worker(vtok, budget)
    internal = [asyncio.run(worker._agent_loop_postprocess(o, False, raw_prompt=[])) for o in outs]
    uids = np.asarray([f"uid-{r['task_id']}" for r in rows], dtype=object)
    yield SimpleNamespace(tok=tok, rows=rows, recorded=recorded, trainer=trainer, ag=ag, outs=outs,
                          internal=internal, worker=worker, uids=uids, tasks=tasks, name=request.param)
    mp.undo()


def test_verl_parity_recording_is_varied(lab):
    """The recording exercises what parity could break on: wins and losses inside a group, all-win and all-loss
    groups, invalid-action penalties, several turns, responses that ended with EOS (dropped from the completion
    after a non-final turn, kept after the last one)."""
    won = np.asarray([e.won for e in lab.recorded]).reshape(N_TASKS, G)
    assert won[0].any() and not won[0].all() and not won[1].any() and won[2].all()
    assert any(t.reward < 0 for e in lab.recorded for t in e.turns)
    assert max(len(e.turns) for e in lab.recorded) >= 2
    eos = lab.tok.eos_token_id
    assert any(e.completion_ids[e.turns[-1].span[1] - 1] == eos and len(e.turns) > 1 for e in lab.recorded)
    assert all(e.completion_ids[t.span[1] - 1] != eos or t.span[1] - t.span[0] == 1
               for e in lab.recorded for t in e.turns[:-1])
    # the tight budget stops some episodes early (their last turn truncated), the roomy one none
    stopped = [e.budget_truncated and e.turns[-1].truncated for e in lab.recorded]
    assert any(stopped) if lab.name == "textcraft-tight" else not any(stopped)


def test_verl_parity_agent_loop_rebuilds_the_recording(lab):
    """The agent loop, fed the recorded actions, reproduces the recorded episode token for token and turn for
    turn (the replay server checked every context)."""
    for e, o in zip(lab.recorded, lab.outs):
        assert o.prompt_ids == e.prompt_ids and o.response_ids == e.completion_ids
        assert o.response_mask == e.env_mask and o.extra_fields["agentgym_token_turn"] == e.token_turn
        turns = o.extra_fields["agentgym_turns"]
        assert [t["reward"] for t in turns] == pytest.approx([t.reward for t in e.turns])
        assert [t["obs_hash"] for t in turns] == [t.obs_hash for t in e.turns]
        assert [t["action_key"] for t in turns] == [t.action_key for t in e.turns]
        assert [t["valid_action"] for t in turns] == [t.valid_action for t in e.turns]
        assert o.extra_fields["agentgym_success"] == e.score
        assert o.reward_score == pytest.approx(e.total_reward)


def _verl_data(lab, turn_extra=None):
    """The batch verl's legacy trainer hands ``compute_advantage``; ``turn_extra[b][k]`` is merged into turn k of
    row b's ``agentgym_turns`` (columns an agent loop of one's own would write)."""
    data = lab.worker._postprocess(lab.internal)
    data.non_tensor_batch["uid"] = lab.uids
    data.batch["token_level_rewards"] = data.batch["rm_scores"]  # no KL in the reward
    if turn_extra is not None:
        turns = np.empty(len(lab.rows), dtype=object)
        for b, row in enumerate(data.non_tensor_batch["agentgym_turns"]):
            turns[b] = [dict(t, **turn_extra[b][k]) for k, t in enumerate(row)]
        data.non_tensor_batch["agentgym_turns"] = turns
    return data


def _settings(lab, settings, tmp_path):
    """(TRL estimator config, verl ``algorithm.agentgym.<name>`` settings)."""
    if settings.get("v_table") == "TABLE":  # PVPO: a value per task; verl reads it from a JSON file path
        import json

        from adapters.train import load_v_table

        path = tmp_path / "v_table.json"
        path.write_text(json.dumps({t: 0.25 * (k + 1) for k, t in enumerate(lab.tasks)}))
        return dict(settings, v_table=load_v_table(str(path))), dict(settings, v_table=str(path))
    return dict(settings), dict(settings)


def _ids(cases):
    return [f"{n}-{'-'.join(f'{k}={v}' for k, v in s.items())}" for n, s in cases]


@pytest.mark.parametrize("name,settings", CASES, ids=_ids(CASES))
def test_verl_parity_advantages_and_loss_masks(lab, name, settings, tmp_path):
    _check_parity(lab, name, settings, tmp_path)


@pytest.mark.parametrize("lab", ["wikisearch"], indirect=True)
@pytest.mark.parametrize("name,settings", IG_CASES, ids=_ids(IG_CASES))
def test_verl_parity_information_gain_estimators(lab, name, settings, tmp_path):
    assert all(e.golden_answers for e in lab.recorded)
    _check_parity(lab, name, settings, tmp_path)


def _check_parity(lab, name, settings, tmp_path):
    trl_settings, verl_settings = _settings(lab, settings, tmp_path)
    # TRL: the adapter's advantage step on the recorded episodes (the estimator is read from trainer.ag)
    lab.trainer.ag = dataclasses.replace(lab.ag, estimator=name, estimator_config=trl_settings)
    out = lab.trainer._generate_and_score_completions(copy.deepcopy(lab.rows))
    t_adv = out["advantages"].numpy()
    t_mask = (out["completion_mask"] * out["tool_mask"]).numpy().astype(bool)
    # verl: agent-loop metadata -> verl's compute_advantage -> the bridge
    extra = None
    if name in ("bigpo", "bipace") and settings.get("embedder", "embedding") == "embedding":
        emb = iter(lab.trainer.ag_last_batch.embedding.tolist())  # [n_turns, D] in turn-row order
        extra = [[{"embedding": next(emb)} for _ in e.turns] for e in lab.recorded]
    if name in _IG:
        gain = iter(lab.trainer.ag_last_batch.info_gain.tolist())
        extra = [[{"info_gain": next(gain)} for _ in e.turns] for e in lab.recorded]
    data = _verl_data(lab, extra)
    algo = OmegaConf.create({"adv_estimator": f"agentgym_{name}", "agentgym": {name: verl_settings}})
    data = ray_trainer.compute_advantage(data, adv_estimator=f"agentgym_{name}", gamma=1.0, lam=1.0, num_repeat=G,
                                         norm_adv_by_std_in_grpo=True, config=algo)
    v_adv = data.batch["advantages"].numpy()
    v_mask = data.batch["response_mask"].numpy().astype(bool)
    assert v_adv.dtype == t_adv.dtype == np.float32
    # what the turn-level ratio and A2TGPO's adaptive clip read: the turn of each token, the clip scale
    t_turn, v_turn = out["ag_token_turn_idx"].numpy(), data.batch["agentgym_token_turn_idx"].numpy()
    t_clip = out["ag_clip_scale"].numpy() if "ag_clip_scale" in out else None
    v_clip = data.batch["agentgym_clip_scale"].numpy() if "agentgym_clip_scale" in data.batch.keys() else None
    assert (t_clip is None) == (v_clip is None)
    if name == "a2tgpo" or settings.get("clip_lambda", 0) > 0:  # the clip scale is in use: kappa != 1 somewhere
        assert t_clip is not None and (t_clip[t_mask] != 1.0).any()
    for b, e in enumerate(lab.recorded):
        n = len(e.completion_ids)
        np.testing.assert_array_equal(v_adv[b, :n], t_adv[b, :n], err_msg=f"advantages differ in row {b}")
        np.testing.assert_array_equal(v_mask[b, :n], t_mask[b, :n], err_msg=f"loss masks differ in row {b}")
        np.testing.assert_array_equal(v_turn[b, :n], t_turn[b, :n], err_msg=f"token turns differ in row {b}")
        if t_clip is not None:
            np.testing.assert_array_equal(v_clip[b, :n], t_clip[b, :n], err_msg=f"clip scales differ in row {b}")
        for adv, mask in ((t_adv, t_mask), (v_adv, v_mask)):  # past the episode: padding only
            assert not adv[b, n:].any() and not mask[b, n:].any()
    assert np.abs(t_adv).max() > 0  # the estimator produced a signal on this recording
