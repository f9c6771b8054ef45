"""Multi-turn episodes as one token sequence each, for trainers that train a whole episode as one completion.

:func:`play_episodes` resets one agentgym env per episode, tokenizes the turn-0 context as the prompt (``env.prompt()``, or the
first observation with ``first_context="observation"``: the transcript context form of :mod:`agentgym.context`), then each
turn generates the agent's response with a Hugging Face causal LM (all unfinished episodes in one ``generate``
call), steps the env with the decoded text and appends the observation, formatted by ``obs_template``, to the
completion. The completion is ``a_1 o_1 a_2 o_2 ... a_n``: model tokens have ``env_mask`` 1, observation tokens
0, and each model token carries its turn index (observation tokens -1). The completion is the text transcript's
tokens: an EOS that ends a non-final response is dropped (it is not text, and the context ``agentgym eval`` and
the warm start's SFT rows rebuild from text has none); the last response keeps it. Episodes stop when the env terminates or
truncates, or when the completion budget (``max_completion_tokens``) would be exceeded (then the last turn is
marked truncated). ``truncated`` means what it means in the runner's batch (:mod:`agentgym.rollout.records`).

:func:`episodes_to_batch` builds the :class:`estimators.TrajectoryBatch` (spec 1.1 turn table + the one-row-per-
trajectory token table) over a given completion width, so that ``token_adv`` lines up with the trainer's padded
completion tensor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from agentgym.context import eos_token_ids, non_text_token_ids, response_transcript_ids
from agentgym.rollout.records import episode_end_columns, step_columns
from agentgym.rollout.sampling import GREEDY, Sampling, generate_kwargs

logger = logging.getLogger(__name__)

__all__ = ["EpisodeConfig", "TurnData", "Episode", "play_episodes", "episodes_to_batch"]


@dataclass(frozen=True)
class EpisodeConfig:
    """Rollout settings. ``max_new_tokens``: per turn; ``max_completion_tokens``: the whole completion
    (actions + observations); ``max_turns``: passed to the env (None keeps the env's default). ``temperature``,
    ``top_k`` (0: no cut) and ``top_p`` (1.0: no cut) are the sampling distribution when ``do_sample``
    (:class:`agentgym.rollout.sampling.Sampling`; the defaults are the full temperature-1 distribution), else
    decoding is greedy."""

    max_turns: int | None = 4
    max_new_tokens: int = 32
    max_completion_tokens: int = 512
    obs_template: str = "\n{observation}\n"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    do_sample: bool = True
    max_prompt_tokens: int | None = None
    generation_kwargs: dict = field(default_factory=dict)
    first_context: str = "prompt"

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.max_completion_tokens < 1:
            raise ValueError("max_new_tokens and max_completion_tokens must be >= 1")
        self.context_form()  # checks obs_template and first_context
        Sampling(self.temperature, self.top_k, self.top_p)  # checks the sampling settings
        if self.do_sample and self.temperature == 0:
            raise ValueError("do_sample with temperature 0: set do_sample=False for greedy decoding")

    def sampling(self) -> Sampling:
        """The distribution a response is drawn from (greedy unless ``do_sample``)."""
        return Sampling(self.temperature, self.top_k, self.top_p) if self.do_sample else GREEDY

    def context_form(self):
        """The :class:`agentgym.context.ContextForm` these rollouts play in (a transcript)."""
        from agentgym.context import ContextForm

        return ContextForm(kind="transcript", obs_template=self.obs_template, first=self.first_context)


@dataclass
class TurnData:
    turn_idx: int
    obs_hash: int          # digest of the observation the agent acted on
    response: str
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    action_key: int
    valid_action: bool
    action_parsed: bool
    process_ok: int        # 1 ok, 0 error, -1 no execution
    is_final_answer: bool
    span: tuple[int, int]  # [start, end) of the action tokens inside the completion
    obs_end: int           # end of this turn's observation tokens inside the completion
    info: dict


@dataclass
class Episode:
    env_id: str
    task_id: str
    seed: int
    group_id: int
    traj_id: int
    prompt_text: str
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    token_turn: list[int] = field(default_factory=list)
    turns: list[TurnData] = field(default_factory=list)
    won: bool = False
    score: float = 0.0
    golden_answers: tuple[str, ...] = ()
    budget_truncated: bool = False
    done: bool = False
    first_observation: str = ""  # the reset observation (the state of turn 0; later turns: the previous observation)
    _last_info: dict = field(default_factory=dict, repr=False)

    @property
    def total_reward(self) -> float:
        return float(sum(t.reward for t in self.turns))

    def context_positions(self) -> list[int]:
        """Per turn, the position (in prompt + completion) of the last token before the turn's action: the
        state the agent acted on (BiPACE fingerprints are read there)."""
        return [len(self.prompt_ids) + t.span[0] - 1 for t in self.turns]

    def full_ids(self) -> list[int]:
        return list(self.prompt_ids) + list(self.completion_ids)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _generate(model: Any, contexts: list[list[int]], cfg: EpisodeConfig, pad_id: int, eos: list[int],
              suppress: Sequence[int] = (), keys: Sequence[Any] | None = None) -> list[list[int]]:
    """One batched ``generate`` over left-padded contexts; returns each row's new tokens, cut after the first
    EOS (kept) and stripped of padding. ``suppress``: token ids never generated
    (:func:`agentgym.context.non_text_token_ids`).
    ``keys``: each row's sampling stream (:func:`agentgym.rollout.sampling.generate_kwargs`)."""
    import torch

    dev = next(model.parameters()).device
    width = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(contexts), width), dtype=torch.long)
    for i, c in enumerate(contexts):
        ids[i, width - len(c):] = torch.as_tensor(c, dtype=torch.long)
        att[i, width - len(c):] = 1
    kw = dict(max_new_tokens=cfg.max_new_tokens, pad_token_id=pad_id, eos_token_id=eos or None)
    if suppress:
        kw["suppress_tokens"] = list(suppress)
    kw.update(generate_kwargs(cfg.sampling(), keys, width))
    kw.update(cfg.generation_kwargs)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model.generate(input_ids=ids.to(dev), attention_mask=att.to(dev), **kw)
    finally:
        if was_training:
            model.train()
    new = out[:, width:].cpu().tolist()
    res = []
    for row in new:
        cut = []
        for t in row:
            cut.append(int(t))
            if int(t) in eos:
                break
        # generate pads finished rows with pad_id; when pad == eos the cut above already stopped
        res.append(cut if cut else [int(row[0])])
    return res


def play_episodes(model: Any, tokenizer: Any, env_id: str, specs: Sequence[tuple[Any, int, int, int]], cfg: EpisodeConfig,
                  *, env_kwargs: dict | None = None, envs: dict | None = None,
                  sampling_seed: int | Sequence[int] = 0) -> list[Episode]:
    """Play one episode per spec ``(task_id or None, seed, group_id, traj_id)`` with ``model``.

    Sampled responses draw from the stream keyed ``(*sampling_seed, traj_id, turn)`` (an integer or a tuple of
    them; :mod:`agentgym.rollout.sampling`): the same seed and trajectory ids give two models common random numbers.

    ``envs`` (optional) caches env instances by env id + kwargs across calls (constructing some envs costs
    seconds); pass the same dict each call. Env failures raise (the trainer cannot score them: a silent 0 would
    bias the estimator).
    """
    import agentgym

    kwargs = dict(env_kwargs or {})
    if cfg.max_turns is not None:
        kwargs["max_turns"] = int(cfg.max_turns)
    pool_key = (env_id, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    pool = envs.setdefault(pool_key, []) if envs is not None else []
    while len(pool) < len(specs):
        pool.append(agentgym.make(env_id, **kwargs))
    eos = eos_token_ids(tokenizer, model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos or [0])[0]
    suppress = non_text_token_ids(tokenizer, eos)
    form = cfg.context_form()
    base_key = (int(sampling_seed),) if isinstance(sampling_seed, (int, np.integer)) else \
        tuple(int(x) for x in sampling_seed)
    episodes: list[Episode] = []
    for (task_id, seed, group_id, traj_id), env in zip(specs, pool):
        options = {"task_id": str(task_id)} if task_id is not None else None
        obs0, info = env.reset(seed=int(seed), options=options)
        text = form.first_text(env)
        # the first context gets the tokenizer's special tokens (a BOS where it adds one), as an hf: policy and
        # TRL's SFT encode a prompt; observations are appended without any
        ids = list(tokenizer(text)["input_ids"])
        if cfg.max_prompt_tokens is not None and len(ids) > cfg.max_prompt_tokens:
            ids = ids[-cfg.max_prompt_tokens:]  # keep the end: the current observation and the task
        ep = Episode(env_id=env_id, task_id=str(info.get("task_id", task_id)), seed=int(seed), group_id=int(group_id),
                     traj_id=int(traj_id), prompt_text=text, prompt_ids=ids,
                     golden_answers=tuple(info.get("golden_answers") or ()), first_observation=str(obs0))
        ep._last_info = dict(info)
        episodes.append(ep)
    active = list(range(len(episodes)))
    while active:
        contexts = [episodes[i].full_ids() for i in active]
        keys = [(*base_key, episodes[i].traj_id, len(episodes[i].turns)) for i in active]
        actions = _generate(model, contexts, cfg, pad_id, eos, suppress, keys)
        still = []
        for i, act in zip(active, actions):
            ep, env = episodes[i], pool[i]
            start = len(ep.completion_ids)
            act = act[:max(cfg.max_completion_tokens - start, 1)]
            response = tokenizer.decode(act, skip_special_tokens=True)
            acted_on = ep._last_info
            obs, reward, terminated, truncated, info = env.step(response)
            finished = bool(terminated or truncated)
            obs_ids: list[int] = []
            if not finished:
                obs_ids = _encode(tokenizer, form.observation(obs))
                room = cfg.max_completion_tokens - start - len(act) - cfg.max_new_tokens
                if room < max(len(obs_ids), 0) or room <= 0:
                    # no room for this observation and one more action: stop here, truncated by budget
                    finished, truncated, obs_ids = True, True, []
                    ep.budget_truncated = True
            # Keeping a non-final EOS would train and evaluate the model on different contexts (measured: greedy
            # success of one warm start 62.5 % with EOS in the history vs 87.5 % without)
            act = response_transcript_ids(act, eos, final=finished)
            ep.completion_ids.extend(act)
            ep.env_mask.extend([1] * len(act))
            ep.token_turn.extend([len(ep.turns)] * len(act))
            end = len(ep.completion_ids)
            ep.completion_ids.extend(obs_ids)
            ep.env_mask.extend([0] * len(obs_ids))
            ep.token_turn.extend([-1] * len(obs_ids))
            valid, akey, parsed, ok = step_columns(info)  # the runner's info -> column mapping
            ep.turns.append(TurnData(
                turn_idx=len(ep.turns), obs_hash=int(acted_on.get("obs_hash", 0)), response=response,
                observation=obs, reward=float(reward), terminated=bool(terminated), truncated=bool(truncated),
                action_key=akey, valid_action=valid, action_parsed=parsed, process_ok=ok,
                is_final_answer=info.get("action_tag") == "answer", span=(start, end),
                obs_end=len(ep.completion_ids), info=dict(info)))
            ep._last_info = dict(info)
            if finished:
                ep.done = True
                ep.won, ep.score = bool(info.get("won", False)), float(info.get("score", 0.0))
            else:
                still.append(i)
        active = still
    return episodes


def episodes_to_batch(episodes: Sequence[Episode], width: int | None = None, *, embedding: np.ndarray | None = None,
                      info_gain: Sequence[np.ndarray] | None = None, sgcd_columns: dict | None = None):
    """The :class:`estimators.TrajectoryBatch` of ``episodes`` (rollout-major, one token row per episode).

    ``width``: the token table's L (default: the longest completion); tokens past an episode's completion and
    observation tokens have ``response_mask`` False. ``embedding``: ``[n_turns, D]`` in turn-row order;
    ``info_gain``: per episode, one value per turn; ``sgcd_columns``: ``[B, L(, K)]`` arrays.
    """
    from estimators import TrajectoryBatch

    L = width if width is not None else max((len(e.completion_ids) for e in episodes), default=0)
    B = len(episodes)
    rows = [(e, t) for e in episodes for t in e.turns]
    done: list[bool] = []
    truncated: list[bool] = []
    for e in episodes:  # truncated: the last row of an episode cut by the env's turn or the token budget
        last = e.turns[-1] if e.turns else None
        ends, cut = episode_end_columns(len(e.turns), bool(last and last.truncated and not last.terminated))
        done += ends
        truncated += cut
    mask = np.zeros((B, L), dtype=bool)
    tti = np.zeros((B, L), dtype=np.int32)
    for b, e in enumerate(episodes):
        n = min(len(e.completion_ids), L)
        em = np.asarray(e.env_mask[:n], dtype=bool)
        mask[b, :n] = em
        tti[b, :n] = np.where(em, np.asarray(e.token_turn[:n]), 0)
    cols: dict[str, Any] = dict(
        group_id=np.array([e.group_id for e, _ in rows], dtype=np.int64),
        task_id=np.array([e.task_id for e, _ in rows], dtype=object),
        traj_id=np.array([e.traj_id for e, _ in rows], dtype=np.int64),
        turn_idx=np.array([t.turn_idx for _, t in rows], dtype=np.int32),
        reward=np.array([t.reward for _, t in rows], dtype=np.float32),
        done=np.array(done, dtype=bool),
        truncated=np.array(truncated, dtype=bool),
        success=np.array([e.score for e, _ in rows], dtype=np.float32),
        obs_hash=np.array([t.obs_hash for _, t in rows], dtype=np.int64),
        valid_action=np.array([t.valid_action for _, t in rows], dtype=bool),
        action_key=np.array([t.action_key for _, t in rows], dtype=np.int64),
        action_parsed=np.array([t.action_parsed for _, t in rows], dtype=bool),
        process_ok=np.array([t.process_ok for _, t in rows], dtype=np.int8),
        is_final_answer=np.array([t.is_final_answer for _, t in rows], dtype=bool),
        row_traj_id=np.array([e.traj_id for e in episodes], dtype=np.int64),
        response_mask=mask,
        token_turn_idx=tti,
        response_len_tokens=np.array([min(len(e.completion_ids), L) for e in episodes], dtype=np.int64),
    )
    if embedding is not None:
        cols["embedding"] = np.asarray(embedding, dtype=np.float32)
    if info_gain is not None:
        cols["info_gain"] = np.concatenate([np.asarray(g, dtype=np.float32) for g in info_gain]) if rows else \
            np.zeros(0, np.float32)
    if sgcd_columns:
        cols.update(sgcd_columns)
    return TrajectoryBatch(**cols)
