"""TRL adapter (supported: ``trl>=1.16,<1.17``): train a policy on an agentgym env with any registered estimator.

:class:`AgentGymGRPOTrainer` subclasses ``trl.GRPOTrainer`` at the seams described in docs/trainers.md
section 2:

* its ``rollout_func`` plays the dataset rows' tasks multi-turn (:func:`adapters.episodes.play_episodes`): one
  completion per (repeated) prompt, the G members of a group reset with the same task and seed, observation
  tokens returned as ``env_mask`` 0 (so TRL masks them out of the loss), turn spans kept;
* ``_generate_and_score_completions`` calls TRL, then builds the :class:`estimators.TrajectoryBatch` (turn table +
  token table over TRL's padded completion width, plus the model-side columns the estimator needs: ``actor_hidden``
  fingerprints for BiGPO / BiPACE, information gain for IGPO / A2TGPO, teacher/student scores for SGCD), runs
  ``estimators.compute_advantage`` and replaces TRL's ``advantages`` with the estimator's ``token_adv`` ``[B, T]``
  and TRL's token mask with the estimator's ``loss_mask`` (dynamic-sampling filters drop whole groups);
* the loss follows each estimator's spec 6.5 recipe (:data:`ESTIMATOR_RECIPE`, :func:`loss_plan`, logged at
  start): the trainer sets GRPOConfig's ``loss_type`` / ``epsilon`` / ``epsilon_high`` / ``delta`` (dual clip) /
  ``beta`` from it, and TRL's own loss computes the recipe wherever it can express it exactly
  (:data:`TRL_LOSS_TYPE`); ``_compute_loss`` switches to :func:`estimators.losses.policy_loss` with the recipe only
  where it cannot: per-token clip scales (A2TGPO, IGPO with ``clip_lambda`` > 0), the turn-level ratio, and a KL
  term (TRL's k3 is unclamped, the spec's is clamped to [-10, 10]).

The reward TRL logs is the episode return (sum of env rewards). Single process only for now (groups must not
straddle processes; the constructor checks it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agentgym.errors import MissingDependencyError

from .episodes import EpisodeConfig, episodes_to_batch, play_episodes

logger = logging.getLogger(__name__)

try:  # the module is only importable with the trl extra
    import torch
    from trl import GRPOConfig, GRPOTrainer
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("trl", "trl", "the TRL adapter (adapters.trl)") from e

__all__ = ["AgentGymConfig", "AgentGymGRPOTrainer", "ADVANTAGE_CONTROLS", "control_advantages", "make_task_dataset", "env_return_reward", "GRPOConfig",
           "SUPPORTED_TRL", "ESTIMATOR_RECIPE", "TRL_LOSS_TYPE", "LossPlan", "loss_plan"]

SUPPORTED_TRL = (">=1.16", "<1.17")

_FINGERPRINT_ESTIMATORS = ("bigpo", "bipace")
_IG_ESTIMATORS = ("a2tgpo", "igpo")


def _check_trl_version() -> None:
    import trl
    from packaging.version import Version

    v = Version(trl.__version__)
    if not (Version("1.16") <= v < Version("1.17")):
        logger.warning("adapters.trl is tested with trl %s,%s; found %s (private hooks change often)",
                       *SUPPORTED_TRL, trl.__version__)


# ------------------------------------------------------------------------------------------ loss recipes
#: The spec 6.5 recipe (``estimators.losses.RECIPES``) each estimator trains with. Estimators without a recipe of
#: their own take the one of the method they extend: RLOO and IGPO (fixed clip: "the standard clipped policy
#: objective" of the A²TGPO paper, Sec. 3) train with GRPO's, HGPO with GiGPO's.
ESTIMATOR_RECIPE: dict[str, str] = {
    "grpo": "grpo", "dr_grpo": "dr_grpo", "rloo": "grpo", "dapo": "dapo", "gigpo": "gigpo", "hgpo": "gigpo",
    "bigpo": "bigpo", "bipace": "bipace", "igpo": "grpo", "a2tgpo": "a2tgpo", "gvpo": "gvpo", "pvpo": "pvpo",
    "sgcd": "sgcd",
}

#: spec 6.4 aggregation -> the TRL 1.16 ``loss_type`` that computes exactly it: "dapo" divides by the generation
#: batch's active tokens (token-mean), "grpo" averages each row's token mean over the rows (seq-mean-token-mean),
#: "dr_grpo" divides by rows x ``max_completion_length`` (seq-mean-token-sum-norm with L_norm the completion
#: budget). TRL's ``delta`` (clamp of the ratio at delta) equals the spec's dual clip c_dual in value and gradient
#: (for A < 0 the loss is -A min(max(r, clip(r)), delta); for A > 0 it changes nothing while delta > 1 + eps_high),
#: and ``beta`` adds beta x k3 KL before the same aggregation, but unclamped where the spec clamps it to [-10, 10]
#: (and multiplied by the ratio unless ``use_bias_correction_kl`` is off). That clamp binds in practice (a GRPO run
#: of 1,500 steps on the lab's tiny model logged a mean unclamped KL of 50-100, a few tokens at e^z ~ 1e5), so a
#: recipe with a KL term never goes to TRL's loss (:func:`loss_plan`). One more difference: TRL's "grpo" also counts
#: rows without trained tokens in its row mean, the spec leaves them out; here every row holds generated tokens
#: unless a dynamic-sampling filter zeroed its group (DAPO, whose recipe is token-mean).
TRL_LOSS_TYPE: dict[str, str] = {"token-mean": "dapo", "seq-mean-token-mean": "grpo",
                                 "seq-mean-token-sum-norm": "dr_grpo"}



@dataclass(frozen=True)
class LossPlan:
    """How one estimator's loss is computed: ``recipe`` (the spec 6.5 recipe, overrides applied), ``custom``
    (True: :func:`estimators.losses.policy_loss` in ``_compute_loss``; False: TRL's own loss, configured by
    ``trl`` to compute exactly the recipe) and ``trl`` (the GRPOConfig loss fields; set in both cases: ``beta``
    also decides whether TRL computes reference log-probs)."""

    estimator: str
    recipe_name: str
    recipe: Any
    custom: bool
    trl: dict
    reason: str
    l_norm: int | None = None  # the effective L_norm of seq-mean-token-sum-norm (the recipe's, else the budget)

    def describe(self) -> str:
        r = self.recipe
        dual = f"dual clip {r.c_dual}" if r.c_dual is not None else "no dual clip"
        rec = (f"recipe {self.recipe_name!r}: {r.ratio} ratio, clip {r.clip_low}/{r.clip_high}, {dual}, {r.agg}, "
               f"KL {r.kl_coef}")
        trl = ", ".join(f"{k}={v!r}" for k, v in self.trl.items())
        route = "adapter policy_loss" if self.custom else "TRL's loss"
        return f"loss for {self.estimator}: {rec} -> {route} ({self.reason}); GRPOConfig {trl}"


def loss_plan(estimator: str, estimator_config: dict | None = None, *, loss: str | None = None,
              overrides: dict | None = None, max_completion_length: int | None = None,
              completion_budget: int | None = None) -> LossPlan:
    """The loss of ``estimator`` (see :data:`ESTIMATOR_RECIPE`, :data:`TRL_LOSS_TYPE`).

    ``loss`` names a recipe to use instead (always through the adapter's ``policy_loss``); ``overrides`` replace
    recipe fields (e.g. ``{"kl_coef": 0.0}`` to train without a reference model). TRL computes the loss itself
    when it can express the recipe exactly: a token ratio, per-row sequences, one of the three aggregations of
    :data:`TRL_LOSS_TYPE`, no per-token clip scales (A2TGPO, and IGPO with ``clip_lambda`` > 0, have them), for
    Dr.GRPO L_norm equal to TRL's ``max_completion_length`` (the recipe's L_norm defaults to the episode's
    ``completion_budget``), and no KL term (TRL's k3 is not clamped to [-10, 10] as the recipe's is: GRPO's,
    GiGPO's, BiPACE's and PVPO's recipes, which have one, use the adapter's loss; TRL still computes the reference
    log-probs, ``beta`` is set)."""
    from estimators import make_config
    from estimators.losses import get_recipe

    if estimator not in ESTIMATOR_RECIPE:
        raise ValueError(f"no loss recipe for estimator {estimator!r}; known: {sorted(ESTIMATOR_RECIPE)}")
    name = loss or ESTIMATOR_RECIPE[estimator]
    recipe = get_recipe(name, **dict(overrides or {}))
    cfg = make_config(estimator, **dict(estimator_config or {}))
    trl = {"loss_type": TRL_LOSS_TYPE.get(recipe.agg, "dapo"), "epsilon": recipe.clip_low,
           "epsilon_high": recipe.clip_high, "delta": recipe.c_dual, "beta": recipe.kl_coef,
           "use_bias_correction_kl": False, "importance_sampling_level": "token"}
    l_norm = recipe.l_norm if recipe.l_norm is not None else completion_budget
    if loss is not None:
        reason = f"loss={loss!r} forces the adapter's loss"
    elif recipe.ratio != "token":
        reason = f"TRL has no {recipe.ratio}-level ratio of this form"
    elif float(getattr(cfg, "clip_lambda", 0.0) or 0.0) > 0:
        reason = "per-token clip scales (clip_lambda > 0)"
    elif recipe.agg not in TRL_LOSS_TYPE or recipe.seq_unit != "row":
        reason = f"TRL has no {recipe.agg} aggregation over {recipe.seq_unit}s"
    elif recipe.agg == "seq-mean-token-sum-norm" and l_norm is not None and max_completion_length is not None \
            and int(l_norm) != int(max_completion_length):
        reason = f"L_norm {l_norm} differs from TRL's max_completion_length {max_completion_length}"
    elif recipe.kl_coef > 0:
        # TRL adds exp(z) - z - 1 unclamped; the recipe's k3 (spec 6.3, verl's low_var_kl) clamps it to [-10, 10].
        # The two agree only while every token's KL is small: one sampled token the policy has since made rare
        # (z = 12) gives TRL a KL of ~1.6e5 whose gradient outweighs the whole policy-gradient term.
        reason = "TRL's k3 KL is unclamped; the recipe clamps it to [-10, 10]"
    else:
        return LossPlan(estimator, name, recipe, False, trl, "TRL expresses the recipe exactly", l_norm)
    return LossPlan(estimator, name, recipe, True, trl, reason, l_norm)


def _apply_loss_plan(args: Any, plan: LossPlan) -> None:
    """Set ``args``' loss fields from ``plan``; warn where a value set by hand (not GRPOConfig's default) is
    replaced."""
    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    for key, value in plan.trl.items():
        old = getattr(args, key)
        if old != value and old != defaults.get(key):
            logger.warning("GRPOConfig.%s=%r replaced by %r from the %s recipe (change the recipe with "
                           "AgentGymConfig.loss_overrides)", key, old, value, plan.recipe_name)
        setattr(args, key, value)


@dataclass
class AgentGymConfig:
    """What the adapter adds to a ``GRPOConfig``.

    * ``env_id`` / ``env_kwargs``: the env (``agentgym.make(env_id, **env_kwargs)``);
    * ``estimator`` / ``estimator_config``: ``estimators.compute_advantage(estimator, batch, **estimator_config)``;
    * ``episode``: rollout settings (:class:`adapters.episodes.EpisodeConfig`);
    * ``fingerprint_layer``: hidden-state layer of the ``actor_hidden`` embedder (BiGPO / BiPACE with the
      ``embedding`` embedder), negative = from the end;
    * ``answer_open`` / ``answer_close``: the answer wrapper for information gain (p_k scores ``" {gold}
      {answer_close}"`` after ``"{context}{answer_open}"``);
    * ``summarizer``: SGCD credit reference (default :class:`adapters.summarizers.RuleBasedSummarizer`);
      ``reference_template`` wraps it after the prompt for the teacher pass; ``sgcd_top_k`` is K (default: the
      estimator's ``top_k``, 100);
    * ``loss``: None = the estimator's recipe (:func:`loss_plan`: TRL's loss where it expresses the recipe
      exactly, else the adapter's), or a recipe name of ``estimators.losses.RECIPES`` to force the adapter's loss
      with that recipe; ``loss_overrides`` replace recipe fields (``{"kl_coef": 0.0}``: no reference model). The
      trainer overwrites the GRPOConfig loss fields (``loss_type``, ``epsilon``, ``epsilon_high``, ``delta``,
      ``beta``, ``use_bias_correction_kl``) with the plan's;
    * ``eps_calibration``: BiGPO / BiPACE's eps from App. F's search, ``"once"`` (at the first batch, then kept) or
      ``"each-batch"`` (:data:`EPS_CALIBRATIONS`); None = the estimator config's eps;
    * ``advantage_control``: a control of the learning lab applied to the estimator's advantages before the loss
      (:data:`ADVANTAGE_CONTROLS`): ``"zero"`` (all zero: nothing may be learned), ``"sign_flip"`` (negated: success
      must fall), ``"shuffle"`` (each episode gets the mean advantage of another episode of the batch, a seeded
      permutation, spread over its own trained tokens); None = the estimator's advantages;
    * ``group_seeds``: the seed each group resets with: ``"task"`` (task k's row seed at every visit, the default)
      or ``"group"`` (a seed drawn from the run's seed, the step and the group's place in the batch, shared by its
      G members), for envs whose episodes draw from the reset seed and should draw anew at each visit
      (TextCraft's counterfactual worlds);
    * ``record_advantages``: keep what each loss call used (``trainer.ag_used_advantages``: dicts of
      ``advantages``, ``row`` (episode index in ``ag_last_episodes``), ``completion_ids``, ``completion_mask``,
      ``tool_mask``, rows in TRL's shuffled order).
    """

    env_id: str
    estimator: str = "grpo"
    estimator_config: dict = field(default_factory=dict)
    env_kwargs: dict = field(default_factory=dict)
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    fingerprint_layer: int = -1
    answer_open: str = "<answer>"
    answer_close: str = "</answer>"
    summarizer: Any = None
    reference_template: str = "\nCredit reference: {reference}\n"
    sgcd_top_k: int | None = None
    loss: str | None = None
    loss_overrides: dict = field(default_factory=dict)
    record_advantages: bool = False
    advantage_control: str | None = None
    eps_calibration: str | None = None
    group_seeds: str = "task"

    def __post_init__(self) -> None:
        from estimators import BiGPOConfig, make_config

        if self.advantage_control not in (None, *ADVANTAGE_CONTROLS):
            raise ValueError(f"advantage_control must be None or one of {ADVANTAGE_CONTROLS}, got "
                             f"{self.advantage_control!r}")
        est = make_config(self.estimator, **self.estimator_config)  # unknown estimator / keys fail here, not mid-run
        if self.group_seeds not in GROUP_SEEDS:
            raise ValueError(f"group_seeds must be one of {GROUP_SEEDS}, got {self.group_seeds!r}")
        if self.eps_calibration not in (None, *EPS_CALIBRATIONS):
            raise ValueError(f"eps_calibration must be None or one of {EPS_CALIBRATIONS}, got "
                             f"{self.eps_calibration!r}")
        if self.eps_calibration is not None:
            if not isinstance(est, BiGPOConfig):
                raise ValueError(f"eps_calibration applies to BiGPO and BiPACE (a clustering eps), not "
                                 f"{self.estimator!r}")
            clash = sorted({"eps", "calibrate_eps"} & set(self.estimator_config))
            if clash:
                raise ValueError(f"eps_calibration sets eps itself; remove {clash} from the estimator config")


#: The advantage controls of :class:`AgentGymConfig` (see ``advantage_control`` there).
ADVANTAGE_CONTROLS = ("zero", "sign_flip", "shuffle")
#: How :class:`AgentGymConfig` calibrates BiGPO / BiPACE's eps (``eps_calibration``): ``"once"`` runs App. F's search
#: on the first batch and keeps its eps for the whole run (:class:`estimators.EpsCalibrator`, as the paper does;
#: checkpoints carry it), ``"each-batch"`` searches on every batch (the estimator's ``calibrate_eps=True``).
EPS_CALIBRATIONS = ("once", "each-batch")
#: How a group's reset seed is chosen (:class:`AgentGymConfig` ``group_seeds``).
GROUP_SEEDS = ("task", "group")


def control_advantages(token_adv: np.ndarray, loss_mask: np.ndarray, control: str | None,
                       rng: np.random.Generator | None = None) -> np.ndarray:
    """``token_adv`` ``[B, T]`` under a control of :data:`ADVANTAGE_CONTROLS` (None: unchanged)."""
    if control is None:
        return token_adv
    if control == "zero":
        return np.zeros_like(token_adv)
    if control == "sign_flip":
        return -token_adv
    if control == "shuffle":
        mask = np.asarray(loss_mask, dtype=bool)
        counts = mask.sum(axis=1)
        means = np.where(counts > 0, (token_adv * mask).sum(axis=1) / np.maximum(counts, 1), 0.0)
        perm = (rng or np.random.default_rng(0)).permutation(len(means))
        return np.where(mask, means[perm][:, None], 0.0).astype(token_adv.dtype)
    raise ValueError(f"unknown advantage control {control!r}; choose from {ADVANTAGE_CONTROLS}")


def env_return_reward(prompts, completions, ag_return=None, **kwargs) -> list[float]:
    """TRL reward function: the episode return computed by the rollout (one float per completion)."""
    if ag_return is None:
        raise ValueError("env_return_reward needs the 'ag_return' field the agentgym rollout adds")
    return [float(r) for r in ag_return]


def make_task_dataset(env_id: str, n_tasks: int | None = None, *, env_kwargs: dict | None = None, seed: int = 0,
                      task_ids: Sequence[str] | None = None):
    """A ``datasets.Dataset`` with one row per task: ``prompt`` (a readable tag; the real prompt comes from the
    env), ``task_id`` and ``seed``. Tasks come from ``env.task_ids(n_tasks)`` unless ``task_ids`` is given; a split
    with fewer than ``n_tasks`` tasks is refused (``ValueError``), never silently shortened."""
    import agentgym
    from datasets import Dataset

    if task_ids is None:
        env = agentgym.make(env_id, **dict(env_kwargs or {}))
        try:
            ids = list(env.task_ids(n_tasks))
        except TypeError:
            ids = list(env.task_ids())
        if n_tasks is not None and len(ids) < n_tasks:
            # taking fewer tasks than asked would change the experiment without a word
            raise ValueError(f"{env_id} has {len(ids)} tasks here ({env_kwargs or {}}), fewer than the {n_tasks} "
                             "asked for: ask for at most that many or choose a larger split")
        task_ids = ids[:n_tasks] if n_tasks is not None else ids
    rows = [{"prompt": f"{env_id}:{t}", "task_id": str(t), "seed": int(seed + k)} for k, t in enumerate(task_ids)]
    if not rows:
        raise ValueError(f"no tasks for {env_id}")
    return Dataset.from_list(rows)


class AgentGymGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` over agentgym envs with an agentgym estimator (see the module docstring).

    Use like ``GRPOTrainer``: ``AgentGymGRPOTrainer(model, args=GRPOConfig(...), train_dataset=make_task_dataset(
    ...), processing_class=tokenizer, agentgym=AgentGymConfig(...))``. ``reward_funcs`` defaults to the episode
    return; ``rollout_func`` is set by the adapter. After each generation ``ag_last_batch`` /
    ``ag_last_result`` hold the batch and the estimator's result; ``ag_last_episodes`` the episodes.
    """

    def __init__(self, model, args=None, *, agentgym: AgentGymConfig, train_dataset=None, processing_class=None,
                 reward_funcs=None, **kwargs):
        if "rollout_func" in kwargs:
            raise ValueError("AgentGymGRPOTrainer sets rollout_func itself")
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        _check_trl_version()
        if args is None:
            args = GRPOConfig(output_dir="agentgym-grpo")
        self.ag_loss_plan = loss_plan(agentgym.estimator, agentgym.estimator_config, loss=agentgym.loss,
                                      overrides=agentgym.loss_overrides,
                                      max_completion_length=args.max_completion_length,
                                      completion_budget=agentgym.episode.max_completion_tokens)
        _apply_loss_plan(args, self.ag_loss_plan)
        logger.info("%s", self.ag_loss_plan.describe())
        self.ag = agentgym
        self._ag_inputs: list[dict] | None = None
        self._ag_envs: dict = {}
        self._ag_traj_counter = 0
        self._ag_group_counter = 0
        self.ag_last_batch = None
        self.ag_last_result = None
        self.ag_last_episodes: list = []
        self.ag_used_advantages: list = []
        super().__init__(model=model, reward_funcs=reward_funcs or [env_return_reward], args=args,
                         train_dataset=train_dataset, processing_class=processing_class,
                         rollout_func=self._ag_rollout, **kwargs)
        if self.accelerator.num_processes > 1:
            raise NotImplementedError("AgentGymGRPOTrainer runs in one process for now (groups would straddle "
                                      "processes); launch without accelerate/torchrun multi-process")
        if self.tools:
            raise ValueError("tools are not supported together with agentgym rollouts")
        self._ag_custom_loss = self.ag_loss_plan.custom
        from estimators import EpsCalibrator

        self.ag_eps_calibrator = EpsCalibrator() if agentgym.eps_calibration == "once" else None

    # ------------------------------------------------------------------------------------------ rollout
    def _ag_rollout(self, prompts: list, trainer: Any) -> dict:
        rows = self._ag_inputs
        if rows is None or len(rows) != len(prompts):
            raise RuntimeError("agentgym rollout called without its dataset rows")
        mode = "train" if self.model.training else "eval"
        G = self.num_generations if mode == "train" else self.num_generations_eval
        for start in range(0, len(rows), G):  # TRL repeats each prompt G times in a row: one group
            keys = {(str(r.get("task_id")), int(r.get("seed", 0))) for r in rows[start:start + G]}
            if len(keys) != 1:
                raise RuntimeError(f"rows {start}..{start + G - 1} are not one group (tasks/seeds {sorted(keys)}); "
                                   "the adapter expects TRL's RepeatSampler order")
        specs = []
        for i, row in enumerate(rows):
            group = self._ag_group_counter + i // G
            seed = int(row.get("seed", 0))
            if self.ag.group_seeds == "group":  # a new draw at each visit, shared by the group's G members; keyed
                # by the step (restored on --resume) and the group's place in the batch
                seed = int(np.random.default_rng([int(self.args.seed), 2, int(self.state.global_step), i // G])
                           .integers(2**31 - 1))
            specs.append((row.get("task_id"), seed, group, self._ag_traj_counter + i))
        self._ag_group_counter += (len(rows) + G - 1) // G
        self._ag_traj_counter += len(rows)
        tok = self.processing_class
        model = self.accelerator.unwrap_model(self.model)
        # each episode's tokens from its own stream (agentgym.rollout.sampling), keyed by the run's seed and step:
        # independent of the global torch generator, and the same after a resume
        episodes = play_episodes(model, tok, self.ag.env_id, specs, self.ag.episode, env_kwargs=self.ag.env_kwargs,
                                 envs=self._ag_envs,
                                 sampling_seed=(int(self.args.seed), 1, int(self.state.global_step)))
        self.ag_last_episodes = episodes
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": None,
            "env_mask": [e.env_mask for e in episodes],
            "ag_return": [e.total_reward for e in episodes],
            "ag_success": [e.score for e in episodes],
            "ag_turns": [len(e.turns) for e in episodes],
        }

    # ------------------------------------------------------------------------- model-side batch columns
    def _ag_model(self):
        return self.accelerator.unwrap_model(self.model)

    def _ag_needs_fingerprints(self) -> bool:
        if self.ag.estimator not in _FINGERPRINT_ESTIMATORS:
            return False
        return self.ag.estimator_config.get("embedder", "embedding") == "embedding"

    def _ag_fingerprints(self, episodes) -> np.ndarray:
        from .hooks import hidden_fingerprints

        return hidden_fingerprints(self._ag_model(), [e.full_ids() for e in episodes], layer=self.ag.fingerprint_layer,
                                   positions=[e.context_positions() for e in episodes])

    def _ag_information_gain(self, episodes) -> list[np.ndarray]:
        from .hooks import information_gain

        tok = self.processing_class
        enc = lambda s: list(tok(s, add_special_tokens=False)["input_ids"])  # noqa: E731
        opener = enc(self.ag.answer_open)
        contexts, answers, finals = [], [], []
        for e in episodes:
            if not e.golden_answers:
                raise ValueError(f"information gain needs gold answers (info['golden_answers']); {e.env_id} task "
                                 f"{e.task_id} has none")
            full = e.full_ids()
            P = len(e.prompt_ids)
            contexts.append([e.prompt_ids + opener] + [full[:P + t.obs_end] + opener for t in e.turns])
            answers.append([enc(" " + g + " " + self.ag.answer_close) for g in e.golden_answers])
            n = len(e.turns)
            finals.append([t.is_final_answer or k == n - 1 for k, t in enumerate(e.turns)])
        return information_gain(self._ag_model(), contexts, answers, final_turns=finals)

    def _ag_sgcd_columns(self, episodes, width: int) -> dict:
        from .hooks import teacher_student_scores
        from .summarizers import EpisodeSummary, RuleBasedSummarizer

        summarizer = self.ag.summarizer or RuleBasedSummarizer()
        tok = self.processing_class
        teacher_prompts = []
        for e in episodes:
            ref = summarizer(EpisodeSummary(
                task=e.prompt_text, responses=[t.response for t in e.turns],
                observations=[t.observation for t in e.turns], rewards=[t.reward for t in e.turns],
                valid=[t.valid_action for t in e.turns], won=e.won, score=e.score, golden_answers=e.golden_answers))
            ref_ids = list(tok(self.ag.reference_template.format(reference=ref), add_special_tokens=False)["input_ids"])
            teacher_prompts.append(e.prompt_ids + ref_ids)
        sc = teacher_student_scores(self._ag_model(), [e.prompt_ids for e in episodes], teacher_prompts,
                                    [e.completion_ids for e in episodes], top_k=self._ag_sgcd_k())
        self.ag_last_scores = sc
        cols = sc.columns()
        out = {}
        for name, arr in cols.items():
            L = arr.shape[1]
            if L < width:
                pad = [(0, 0), (0, width - L)] + [(0, 0)] * (arr.ndim - 2)
                arr = np.pad(arr, pad)
            out[name] = arr[:, :width]
        return out

    def _ag_sgcd_k(self) -> int:
        if self.ag.sgcd_top_k is not None:
            return int(self.ag.sgcd_top_k)
        return int(self.ag.estimator_config.get("top_k", 100))

    def _ag_estimator_config(self, episodes) -> dict:
        """The estimator's settings for this batch: BiGPO / BiPACE with ``embedder="hash_ngram"`` get the text of
        the observation each turn acted on (``obs_text``, in turn-row order), as the verl bridge fills it in."""
        cfg = dict(self.ag.estimator_config)
        if self.ag.eps_calibration == "each-batch":
            cfg["calibrate_eps"] = True
        if self.ag.estimator in _FINGERPRINT_ESTIMATORS and cfg.get("embedder") == "hash_ngram" \
                and cfg.get("obs_text") is None:
            cfg["obs_text"] = [text for e in episodes
                               for text in [e.first_observation] + [t.observation for t in e.turns[:-1]]]
        return cfg

    def _ag_build_batch(self, episodes, width: int):
        kw: dict[str, Any] = {}
        if self._ag_needs_fingerprints():
            kw["embedding"] = self._ag_fingerprints(episodes)
        if self.ag.estimator in _IG_ESTIMATORS:
            kw["info_gain"] = self._ag_information_gain(episodes)
        if self.ag.estimator == "sgcd":
            kw["sgcd_columns"] = self._ag_sgcd_columns(episodes, width)
        return episodes_to_batch(episodes, width, **kw)

    # --------------------------------------------------------------------------------- advantages
    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        from estimators import compute_advantage

        self._ag_inputs = inputs
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            self._ag_inputs = None
        episodes = self.ag_last_episodes
        dev = out["completion_ids"].device
        width = int(out["completion_ids"].size(1))
        batch = self._ag_build_batch(episodes, width)
        if self.ag_eps_calibrator is not None:  # eps searched on the first batch, then kept
            res = self.ag_eps_calibrator.compute_advantage(self.ag.estimator, batch,
                                                           **self._ag_estimator_config(episodes))
        else:
            res = compute_advantage(self.ag.estimator, batch, **self._ag_estimator_config(episodes))
        self.ag_last_batch, self.ag_last_result = batch, res
        token_adv = control_advantages(np.asarray(res.token_adv), np.asarray(res.loss_mask),
                                       self.ag.advantage_control,
                                       np.random.default_rng([int(self.args.seed), int(self._ag_group_counter)]))
        out["advantages"] = torch.as_tensor(token_adv, dtype=torch.float32, device=dev)
        cm = out["completion_mask"]
        out["tool_mask"] = torch.as_tensor(res.loss_mask, device=dev).to(cm.dtype)
        out["num_items_in_batch"] = (cm * out["tool_mask"]).sum()
        out["ag_token_turn_idx"] = torch.as_tensor(batch.token_turn_idx, dtype=torch.long, device=dev)
        # the episode index of each row: survives TRL's shuffle and split, so a loss call knows its episodes
        out["ag_row"] = torch.arange(len(episodes), device=dev)
        if res.clip_scale is not None:
            out["ag_clip_scale"] = torch.as_tensor(res.clip_scale, dtype=torch.float32, device=dev)
        self._ag_log(episodes, res)
        return out

    def _ag_log(self, episodes, res) -> None:
        mode = "train" if self.model.training else "eval"
        m = self._metrics[mode]
        for k, v in sorted(res.diagnostics.items()):
            if np.isfinite(v):
                m[f"agentgym/{k}"].append(float(v))
        for k, v in self.ag.episode.sampling().identity().items():  # the rollouts' distribution, on every row
            m[f"agentgym/{k}"].append(float(v))
        m["agentgym/success"].append(float(np.mean([e.score for e in episodes])) if episodes else 0.0)
        m["agentgym/won"].append(float(np.mean([e.won for e in episodes])) if episodes else 0.0)
        m["agentgym/turns"].append(float(np.mean([len(e.turns) for e in episodes])) if episodes else 0.0)
        m["agentgym/invalid_action_frac"].append(
            float(np.mean([not t.valid_action for e in episodes for t in e.turns])) if episodes else 0.0)
        if res.loss_mask is not None and res.loss_mask.any():
            lm = res.loss_mask
            if res.clip_scale is not None:
                cs = res.clip_scale[lm]
                m["agentgym/clip_scale_mean"].append(float(cs.mean()))
                m["agentgym/clip_scale_min"].append(float(cs.min()))
                m["agentgym/clip_scale_max"].append(float(cs.max()))
            if res.token_weight is not None:
                w = res.token_weight[lm]
                m["agentgym/credit_weight_mean"].append(float(w.mean()))
                m["agentgym/credit_weight_max"].append(float(w.max()))
                m["agentgym/credit_weight_frac_gt1"].append(float(np.mean(w > 1.0)))

    # ------------------------------------------------------------------------ checkpointed adapter state
    #: In each checkpoint folder: the adapter's own state (the calibrated eps), restored by ``--resume``.
    AG_STATE_FILE = "agentgym_state.json"

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.ag_eps_calibrator is not None:
            folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
            (folder / self.AG_STATE_FILE).write_text(json.dumps(
                {"eps_calibrator": self.ag_eps_calibrator.state_dict()}), encoding="utf-8")

    def _load_rng_state(self, checkpoint):
        super()._load_rng_state(checkpoint)  # called once, when training resumes from ``checkpoint``
        f = Path(checkpoint) / self.AG_STATE_FILE if checkpoint else None
        if self.ag_eps_calibrator is not None and f is not None and f.is_file():
            from estimators import EpsCalibrator

            self.ag_eps_calibrator = EpsCalibrator(**json.loads(f.read_text(encoding="utf-8"))["eps_calibrator"])

    # --------------------------------------------------------------------------------------- loss
    def _compute_loss(self, model, inputs):
        if self.ag.record_advantages:
            tm = inputs.get("tool_mask")
            self.ag_used_advantages.append({
                "advantages": inputs["advantages"].detach().cpu().clone(),
                "row": inputs["ag_row"].detach().cpu().clone(),
                "completion_ids": inputs["completion_ids"].detach().cpu().clone(),
                "completion_mask": inputs["completion_mask"].detach().cpu().clone(),
                "tool_mask": None if tm is None else tm.detach().cpu().clone()})
        if not self._ag_custom_loss:
            return super()._compute_loss(model, inputs)
        from estimators.losses import policy_loss

        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        att = torch.cat([prompt_mask, completion_mask], dim=1)
        logps, entropies = self._get_per_token_logps_and_entropies(model, ids, att, completion_ids.size(1),
                                                                   compute_entropy=True)[:2]
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        mask = completion_mask * inputs["tool_mask"] if "tool_mask" in inputs else completion_mask
        cfg = self.ag_loss_plan.recipe  # TRL's beta (reference log-probs) was set from its kl_coef
        if cfg.agg == "seq-mean-token-sum-norm" and cfg.l_norm is None:
            # Dr.GRPO's fixed L_norm (spec 6.4): the plan's (the completion budget), not the batch's padded width
            cfg = dataclasses.replace(cfg, l_norm=self.ag_loss_plan.l_norm)
        mode = "train" if self.model.training else "eval"
        # TRL's "dapo"-style normalizer: the generation batch's active tokens, rescaled to one accumulation window
        norm = inputs["num_items_in_batch"].clamp(min=1.0).float() / self.accelerator.num_processes
        if mode == "train":
            norm = norm * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        n_seq = None
        if cfg.agg != "token-mean":
            n_seq = float(mask.shape[0] * (self.current_gradient_accumulation_steps if mode == "train" else 1))
        loss, metrics = policy_loss(
            logps, old, inputs["advantages"], mask, cfg, clip_scale=inputs.get("ag_clip_scale"),
            token_turn_idx=inputs.get("ag_token_turn_idx"), ref_logprob=inputs.get("ref_per_token_logps"),
            global_token_count=float(norm) if cfg.agg == "token-mean" else None, global_seq_count=n_seq)
        for k, v in metrics.items():
            self._metrics[mode][f"agentgym/loss/{k}"].append(float(v))
        # TRL's own loss logs these two; keep them under the same names on this route (``kl``: the recipe's clamped k3)
        m = mask.to(entropies.dtype)
        self._metrics[mode]["entropy"].append(float((entropies.detach() * m).sum() / m.sum().clamp(min=1.0)))
        if "kl" in metrics:
            self._metrics[mode]["kl"].append(metrics["kl"])
        return loss
