"""``AgentGymAgentLoop``: verl 0.9.1 agent loop that plays an agentgym env multi-turn (registered as ``agentgym``).

Dataset rows select it with ``agent_name = "agentgym"`` (or ``actor_rollout_ref.rollout.agent.default_agent_loop
= agentgym``) and carry in ``extra_info``: ``env_id``, optional ``task_id``, ``seed``, ``env_kwargs``,
``max_turns``, ``max_tokens_per_turn``. ``run()`` resets the env, tokenizes ``env.prompt()`` (through the
tokenizer's chat template when it has one and ``use_chat_template`` is on), then each turn asks
``server_manager.generate`` for the action with ``sampling_params["max_tokens"]`` = the per-turn budget
(``max_tokens_per_turn`` from the row or the agent loop config, capped by what is left of
``rollout.response_length``), steps the env in an executor thread, and appends the observation (``obs_template``)
with ``response_mask`` 0. The response is cut at ``rollout.response_length``: the episode stops, its last turn
truncated, when the next observation and one more whole action (``max_tokens_per_turn``) would not fit, the rule of
the TRL adapter's rollout (:func:`adapters.episodes.play_episodes`); the env is closed when the episode ends (or
fails). Per-turn metadata goes to ``extra_fields`` (see :mod:`adapters.verl.bridge`), including the text of
the observation each action was taken on (``obs_text``, for BiGPO / BiPACE's ``hash_ngram`` embedder);
``reward_score`` is the episode return.

The loop has no access to the actor's hidden states or to likelihoods of text it did not generate, so it does not
write the model-side columns ``embedding`` (``actor_hidden`` fingerprints), ``info_gain`` (IGPO / A2TGPO) or SGCD's
teacher/student scores; :mod:`adapters.verl.bridge` names the alternatives when an estimator needs them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from agentgym.context import eos_token_ids, response_transcript_ids

logger = logging.getLogger(__name__)

__all__ = ["AgentGymAgentLoop", "AGENT_NAME"]

AGENT_NAME = "agentgym"


@register(AGENT_NAME)
class AgentGymAgentLoop(AgentLoopBase):
    """One agentgym episode per ``run`` (see the module docstring)."""

    obs_template = "\n{observation}\n"
    use_chat_template = False
    max_tokens_per_turn: int | None = None

    def __init__(self, *args: Any, obs_template: str | None = None, use_chat_template: bool | None = None,
                 max_tokens_per_turn: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if obs_template is not None:
            self.obs_template = obs_template
        if use_chat_template is not None:
            self.use_chat_template = use_chat_template
        if max_tokens_per_turn is not None:
            self.max_tokens_per_turn = int(max_tokens_per_turn)
        self.response_length = int(self.rollout_config.get("response_length", 1024))

    def _encode_prompt(self, text: str) -> list[int]:
        if self.use_chat_template and getattr(self.tokenizer, "chat_template", None):
            return list(self.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                                           add_generation_prompt=True))
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        import agentgym

        loop = asyncio.get_running_loop()  # the loop this run is on (verl's workers and tests may differ)
        extra = dict(kwargs.get("extra_info") or {})
        env_id = extra.get("env_id") or kwargs.get("env_id")
        if not env_id:
            raise ValueError("AgentGymAgentLoop needs extra_info['env_id']")
        env_kwargs = dict(extra.get("env_kwargs") or {})
        if extra.get("max_turns") is not None:
            env_kwargs["max_turns"] = int(extra["max_turns"])
        seed = int(extra.get("seed", kwargs.get("index", 0) or 0))
        task_id = extra.get("task_id")
        per_turn = extra.get("max_tokens_per_turn", self.max_tokens_per_turn)
        per_turn = int(per_turn) if per_turn is not None else None
        if per_turn is not None and per_turn < 1:
            raise ValueError(f"max_tokens_per_turn must be >= 1, got {per_turn}")
        env = await loop.run_in_executor(None, lambda: agentgym.make(env_id, **env_kwargs))
        try:
            return await self._play(env, loop, seed, task_id, sampling_params, per_turn)
        finally:
            await loop.run_in_executor(None, env.close)

    async def _play(self, env, loop, seed: int, task_id, sampling_params: dict[str, Any],
                    per_turn: int | None) -> AgentLoopOutput:
        obs, info = await loop.run_in_executor(
            None, lambda: env.reset(seed=seed, options={"task_id": str(task_id)} if task_id is not None else None))
        prompt_ids = self._encode_prompt(env.prompt())
        response: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        token_turn: list[int] = []
        turns: list[dict] = []
        acted_on = dict(info)
        acted_text = str(obs)
        last: dict = dict(info)
        while True:
            room = self.response_length - len(response)
            if room <= 0:
                break
            # a fresh dict per call: verl's servers pop max_tokens from the one they get
            params = dict(sampling_params, max_tokens=min(room, per_turn) if per_turn is not None else room)
            out = await self.server_manager.generate(request_id=uuid.uuid4().hex, prompt_ids=prompt_ids + response,
                                                     sampling_params=params)
            act = list(out.token_ids)[:room]
            lp = list(out.log_probs or [])[:len(act)]
            text = self.tokenizer.decode(act, skip_special_tokens=True)
            obs, reward, term, trunc, last = await loop.run_in_executor(None, env.step, text)
            k = len(turns)
            ok = last.get("process_ok")
            finished = bool(term or trunc)
            obs_ids: list[int] = []
            if not finished:
                obs_ids = list(self.tokenizer(self.obs_template.format(observation=obs),
                                              add_special_tokens=False)["input_ids"])
                # no room for the observation and one more whole action (the per-turn budget; one token without
                # one): stop here, truncated. The TRL adapter's rollout (adapters.episodes) stops by the same rule,
                # so a recorded episode replays the same in both (tests/adapters/test_adapters_verl_parity.py)
                room = self.response_length - len(response) - len(act) - (per_turn if per_turn is not None else 1)
                if room < max(len(obs_ids), 1):
                    finished, trunc, obs_ids = True, True, []
            # the EOS ending a non-final response is not text: the next turn's context has none, as in the TRL
            # adapter's rollout and the transcripts agentgym eval rebuilds
            act = response_transcript_ids(act, eos_token_ids(self.tokenizer), final=finished)
            lp = lp[:len(act)]
            response += act
            mask += [1] * len(act)
            token_turn += [k] * len(act)
            logprobs += lp + [0.0] * (len(act) - len(lp))
            turns.append({"obs_hash": int(acted_on.get("obs_hash", 0)), "action_key": int(last.get("action_key", 0)),
                          "reward": float(reward), "valid_action": bool(last.get("action_valid", True)),
                          "action_parsed": last.get("action") is not None,
                          "process_ok": -1 if ok is None else int(bool(ok)),
                          "is_final_answer": last.get("action_tag") == "answer", "truncated": bool(trunc and not term),
                          "obs_text": acted_text})
            response += obs_ids
            mask += [0] * len(obs_ids)
            token_turn += [-1] * len(obs_ids)
            logprobs += [0.0] * len(obs_ids)
            acted_on, acted_text = dict(last), str(obs)
            if finished:
                break
        total = float(sum(t["reward"] for t in turns))
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=response, response_mask=mask,
            response_logprobs=logprobs if logprobs else None, reward_score=total, num_turns=2 * len(turns) + 1,
            metrics=AgentLoopMetrics(),
            extra_fields={"agentgym_turns": turns, "agentgym_token_turn": token_turn,
                          "agentgym_success": float(last.get("score", 0.0)), "agentgym_won": bool(last.get("won")),
                          "agentgym_task_id": str(last.get("task_id", task_id)),
                          "agentgym_golden_answers": list(last.get("golden_answers") or [])})
