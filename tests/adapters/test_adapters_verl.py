"""verl 0.9.1 plugin: registration in a fresh interpreter on ``import verl``; verl's own ``compute_advantage``
dispatching to our estimators with the per-turn metadata (through the bridge); the agent loop playing TextCraft-v0
episodes against a CPU generation backend (Hugging Face ``generate`` on a tiny random Qwen2 built here)."""

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
from adapters.verl.bridge import build_trajectory_batch  # noqa: E402
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


class _HFServer:
    """The smallest real generation backend on CPU: Hugging Face ``generate`` behind verl's
    ``server_manager.generate`` interface (token ids in, TokenOutput with log-probs out)."""

    def __init__(self, model, tok, max_new_tokens=6):
        self.model, self.tok, self.n = model, tok, max_new_tokens
        self.calls = 0

    async def generate(self, request_id, prompt_ids, sampling_params, **kw):
        self.calls += 1
        ids = torch.tensor([prompt_ids])
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=self.n,
                                      do_sample=True, temperature=float(sampling_params.get("temperature", 1.0)),
                                      pad_token_id=self.tok.pad_token_id, eos_token_id=self.tok.eos_token_id,
                                      output_scores=True, return_dict_in_generate=True)
        new = out.sequences[0, len(prompt_ids):].tolist()
        lps = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.scores, new)]
        return TokenOutput(token_ids=new, log_probs=lps, stop_reason="completed")


@pytest.fixture(scope="module")
def episodes():
    tok = build_tokenizer(env_vocabulary("TextCraft-v0", 2))
    model = build_tiny_model(tok, hidden_size=32, seed=0).eval()
    server = _HFServer(model, tok)
    cfg = DictConfigWrap(OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 2048,
                                                                              "response_length": 96}},
                                           "data": {}}))
    loop = AgentGymAgentLoop(trainer_config=cfg, server_manager=server, tokenizer=tok, processor=None,
                             dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})))
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
    for o in outs:
        turns = o.extra_fields["agentgym_turns"]
        tt = np.asarray(o.extra_fields["agentgym_token_turn"])
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


@pytest.mark.parametrize("name", ["gigpo", "bipace", "grpo"])
def test_adapters_verl_compute_advantage_dispatch_with_metadata(episodes, name):
    outs, uids, _ = episodes
    data = _data(outs, uids)
    cfg = OmegaConf.create({"agentgym": {"bipace": {"embedder": "identity"}}})
    out = ray_trainer.compute_advantage(data, adv_estimator=f"agentgym_{name}", config=cfg)
    adv = out.batch["advantages"].numpy()
    # the same estimator on the same batch, built from the metadata the agent loop stored
    ref_cfg = {"embedder": "identity"} if name == "bipace" else {}
    tb = build_trajectory_batch(data.batch["token_level_rewards"], data.batch["response_mask"],
                                data.non_tensor_batch["uid"], data.non_tensor_batch)
    assert tb.n_turns == sum(len(o.extra_fields["agentgym_turns"]) for o in outs)  # per-turn rows arrived
    assert tb.n_groups == 2
    ref = estimators.compute_advantage(name, tb, **ref_cfg)
    np.testing.assert_array_equal(adv, ref.token_adv)
    assert np.all(adv[data.batch["response_mask"].numpy() == 0] == 0)


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
