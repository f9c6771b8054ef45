"""The CPU learning lab (issues 23 and 32): does training through agentgym improve a policy, for every estimator, with
controls, and does it transfer to tasks the policy never saw?

    python benchmarks/learning.py                          # the full lab (profile "full"), resumable, 2 processes
    python benchmarks/learning.py --profile textcraft      # TextCraft depth 1: every estimator + controls
    python benchmarks/learning.py --profile generalisation # 97 training goals, 50 held-out goals: GRPO + controls
    python benchmarks/learning.py --profile d12            # TextCraft depth 1-2: step-level credit vs GRPO
    python benchmarks/learning.py --profile wikisearch     # WikiSearch, GRPO + GiGPO + IGPO + A2TGPO + controls
    python benchmarks/learning.py --profile quick          # a smoke run of a few minutes
    python benchmarks/learning.py --profile full --report-only   # rewrite a profile's report from its runs

For each task set, seed and run (an estimator or a control):

1. a tiny random Llama, initialised from the seed (:func:`adapters.tiny.build_tiny_model`; a word-level vocabulary
   of the env's own text of the training and held-out tasks, or one token per character);
2. the warm start: ``agentgym train --warm-start --steps 0`` (the oracle's transcripts of the training tasks through
   ``agentgym eval`` and ``agentgym export-sft --per-turn --text --context-form transcript``, then TRL's
   ``SFTTrainer`` for a fixed number of epochs: no stop-at-threshold, whose stopping epoch hinges on the last bit of
   a CPU's arithmetic);
3. ``--steps`` RL steps through ``AgentGymGRPOTrainer`` (``agentgym train`` from the warm start, checkpoints at the
   evaluation steps, sampled and greedy success on the training tasks as ``eval/*`` in metrics.jsonl);
4. evaluations of the warm start and of the last checkpoint: sampled success (true temperature 1: no top-k, no top-p)
   on the training and the held-out tasks, with common random numbers (before and after draw from the same keyed
   streams, :mod:`agentgym.rollout.sampling`), and greedy success through ``agentgym eval --policy hf:`` (its grid,
   the transcript context form the training used) at every evaluation step.

Task sets are chosen from the task records, not from id ranges: a TextCraft task's goal item is what it asks for,
and each set keeps the first task of each goal item in id order (:func:`goal_tasks`). Held-out tasks share no goal
item with the training tasks.

Controls run GRPO's advantages through :func:`adapters.trl.control_advantages` in the same budget: ``zero`` (must
not learn), ``sign_flip`` (must get worse), ``shuffle`` (advantages shuffled across the batch). PVPO's static V table
is the warm start's own sampled success per training task. IGPO and A2TGPO need gold answers (information gain):
WikiSearch only. ``--jobs`` runs the (task set, seed) chains in parallel processes of one torch thread.

Every artefact (tiny model, warm start, its evaluation, V table, run) is stored with the key it was made from
(:func:`agentgym.provenance.artefact_key`: its settings, the keys of what it was made from, the package version and
a hash of the source, this script included); a rerun reuses only what the same key would make again and rebuilds
the rest, so a killed lab resumes and a changed one never reports stale runs. The report (the profile's results file
and PNG curves, the ``plot`` extra) is written from the runs of the profile alone, names the commit and the command
that made them, and is written only by a run of that profile: the ``full`` profile writes
``benchmarks/RESULTS_learning.md``, every other profile ``RESULTS.md`` in its own run directory. The hand-written
reading of a lab lives in a dated file of its own (``benchmarks/learning_analysis_*.md``).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

logger = logging.getLogger("learning")

#: the transcript starts from the env's first observation: a tiny model trained from scratch cannot use the
#: instructions and few-shot example of the env's prompt, which make TextCraft's context about 4x longer
CONTEXT_FIRST = "observation"
#: the sampling seed of every evaluation after the warm start's (common random numbers: before and after share it)
EVAL_SAMPLING_SEED = 1009


# ------------------------------------------------------------------------------------------------ task sets
@dataclass(frozen=True)
class EnvSpec:
    """One task set of the lab: its env and split, how its training and held-out tasks are chosen (``select``, a
    rule of :func:`_select` giving ``(train, heldout)`` task ids), rollout settings, the warm start (a fixed budget
    of SFT epochs; ``warm_loss_on``: the oracle's responses only or the whole transcript) and the tiny model
    (``tokenizer``: ``word`` or ``char``)."""

    name: str
    env_id: str
    split: str
    select: str
    max_turns: int
    max_new_tokens: int
    max_completion_tokens: int
    describe: str
    env_kwargs: dict = field(default_factory=dict)
    warm_epochs: int = 30
    warm_learning_rate: float = 5e-3
    warm_loss_on: str = "completion"
    tokenizer: str = "word"
    warm_counterfactual_steps: int = 0
    hidden_size: int = 128
    layers: int = 2
    select_args: dict = field(default_factory=dict)

    def tasks(self) -> tuple[tuple, tuple]:
        """``(train, heldout)`` task ids: computed once per process, and kept in ``TASK_CACHE/<name>.tasks.json``
        (keyed by the rule and the code) when :data:`TASK_CACHE` is set, so the chains of a lab compute them once."""
        args = json.dumps(self.select_args, sort_keys=True)
        if TASK_CACHE is None:
            return _select(self.name, self.select, args)
        f = TASK_CACHE / f"{self.name}.tasks.json"
        key = _key({"what": "task sets", "name": self.name, "rule": self.select, "args": self.select_args,
                    "env_id": self.env_id, "split": self.split})
        if _fresh(f, key, "task sets"):
            data = json.loads(f.read_text())
            return tuple(data["train"]), tuple(data["heldout"])
        train, held = _select(self.name, self.select, args)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"key": key, "train": train, "heldout": held}, indent=1), encoding="utf-8")
        return train, held

    def identity(self) -> dict:
        train, held = self.tasks()
        return {**asdict(self), "train_tasks": list(train), "heldout_tasks": list(held)}


#: where :meth:`EnvSpec.tasks` keeps the task sets it computed (the lab's run directory; None: nowhere)
TASK_CACHE: Path | None = None


@functools.lru_cache(maxsize=None)
def _goal_tasks(split: str, depth_ids: int) -> tuple[tuple[str, str, int], ...]:
    return tuple(_scan_goals(split, depth_ids))


def goal_tasks(split: str, *, depth_ids: int = 2000, max_actions: int | None = None) -> list[tuple[str, str, int]]:
    """TextCraft's tasks of ``split`` by goal item: ``(goal item, task id, oracle actions)`` for the first task of
    each goal in id order (scanning at most ``depth_ids`` ids of a generated split), keeping only goals whose oracle
    plan takes at most ``max_actions`` actions. The goal item comes from the task record, so the sets stay valid
    whatever ids the split gives each goal."""
    return [g for g in _goal_tasks(split, depth_ids) if max_actions is None or g[2] <= max_actions]


def _scan_goals(split: str, depth_ids: int) -> list[tuple[str, str, int]]:
    import agentgym
    from agentgym.errors import TaskError

    env = agentgym.make("TextCraft-v0", split=split, max_turns=50)
    try:
        ids = env.task_ids(depth_ids)
    except TaskError:  # a finite split smaller than the scan
        ids = env.task_ids()
    seen: dict[str, tuple[str, str, int]] = {}
    for tid in ids:
        try:
            task = env.get_task(tid)
        except TaskError:
            break
        goal = ",".join(sorted(task.targets))
        if goal in seen:
            continue
        env.reset(seed=0, options={"task_id": tid})
        n, done = 0, False
        while not done and n < 50:
            _o, _r, term, trunc, _i = env.step(env.oracle_action())
            n, done = n + 1, term or trunc
        seen[goal] = (goal, tid, n)
    return list(seen.values())


@functools.lru_cache(maxsize=None)
def _select(name: str, rule: str, args_json: str) -> tuple[tuple, tuple]:
    args = json.loads(args_json)
    if rule == "textcraft-first":  # the first n_train goals, then the next n_heldout (per depth)
        train, held = [], []
        for split, n_train, n_held, max_actions in args["parts"]:
            goals = goal_tasks(split, max_actions=max_actions)
            if len(goals) < n_train + n_held:
                raise RuntimeError(f"{name}: {split} has {len(goals)} goals that fit, {n_train + n_held} needed")
            train += [g[1] for g in goals[:n_train]]
            held += [g[1] for g in goals[n_train:n_train + n_held]]
        return tuple(train), tuple(held)
    if rule == "textcraft-items":  # every goal item; a seeded draw of n_heldout items is held out, the rest trained on
        import numpy as np

        goals = goal_tasks(args["split"], max_actions=args["max_actions"])
        order = np.random.default_rng(args["draw_seed"]).permutation(len(goals))
        held_idx = set(order[:args["n_heldout"]].tolist())
        train = tuple(g[1] for i, g in enumerate(goals) if i not in held_idx)
        held = tuple(g[1] for i, g in enumerate(goals) if i in held_idx)
        return train, held
    if rule == "wikisearch":  # the first questions, distinct by question text
        import agentgym

        env = agentgym.make("WikiSearch-v0", split=args["split"])
        ids, seen = [], set()
        for tid in env.task_ids():
            env.reset(seed=0, options={"task_id": tid})
            q = env.last_observation.strip().lower()
            if q not in seen:
                seen.add(q)
                ids.append(tid)
        n = args["n"]
        return tuple(ids[:n]), tuple(ids[n:2 * n])
    raise ValueError(f"unknown task-set rule {rule!r}")


def unseen_recipe_tasks(split: str, train: tuple, held: tuple) -> tuple:
    """The held-out TextCraft tasks whose goal's own recipe line appears in no training task's context (a held-out
    goal item may otherwise show up in a training task as a distractor recipe, which a warm start trained on the
    whole transcript has read as text)."""
    import agentgym

    env = agentgym.make("TextCraft-v0", split=split)
    seen = {line for t in train for line in env.get_task(t).context}
    out = []
    for t in held:
        task = env.get_task(t)
        goals = {g.replace("_", " ") for g in task.targets}
        own = [line for line in task.context if line.split(" using ")[0].split(" ", 2)[-1] in goals]
        if not any(line in seen for line in own):
            out.append(t)
    return tuple(out)


def _textcraft_d1() -> EnvSpec:
    return EnvSpec("textcraft-d1", "TextCraft-v0", "gen-depth1", "textcraft-first", max_turns=3, max_new_tokens=20,
                   max_completion_tokens=160, warm_epochs=30,
                   select_args={"parts": [["gen-depth1", 8, 8, 3]]},
                   describe="TextCraft-v0's generated depth-1 goals (get the ingredients, then one craft): the first 8 "
                            "goal items of `gen-depth1` in id order whose oracle plan fits 3 turns for training, the "
                            "next 8 held out; 3 turns of at most 20 tokens; warm start 30 SFT epochs (learning rate "
                            "5e-3 decaying linearly to 0)")


def _textcraft_d12() -> EnvSpec:
    # 24 tokens per turn cover every oracle action; SFT at 2e-3: at 5e-3 (the depth-1 set's rate) greedy success
    # oscillated between 0 and 33 % for 150 epochs (issue 23)
    return EnvSpec("textcraft-d12", "TextCraft-v0", "gen-depth1", "textcraft-first", max_turns=6, max_new_tokens=24,
                   max_completion_tokens=320, warm_epochs=30, warm_learning_rate=2e-3,
                   select_args={"parts": [["gen-depth1", 8, 8, 3], ["gen-depth2", 4, 4, 5]]},
                   describe="TextCraft depth 1-2: the depth-1 goals of `textcraft-d1` and the first 4 depth-2 goal "
                            "items of `gen-depth2` whose oracle plan fits 6 turns with one to spare (3-5 actions), the "
                            "next 8 + 4 held out; 6 turns of at most 24 tokens; warm start 30 SFT epochs at 2e-3")


def _textcraft_broad(tokenizer: str = "word", loss_on: str = "transcript") -> EnvSpec:
    char = tokenizer == "char"
    epochs = (30 if loss_on == "transcript" else 40) if char else BROAD_WARM_EPOCHS
    suffix = "" if (tokenizer, loss_on) == ("word", "transcript") else \
        f"-{tokenizer}" + ("-responses" if loss_on == "completion" else "")
    return EnvSpec(f"textcraft-broad{suffix}", "TextCraft-v0", "gen-depth1", "textcraft-items", max_turns=4,
                   max_new_tokens=96 if char else 24, max_completion_tokens=800 if char else 256,
                   warm_epochs=epochs, tokenizer=tokenizer, warm_loss_on=loss_on,
                   select_args={"split": "gen-depth1", "max_actions": 4, "n_heldout": 50, "draw_seed": 12345},
                   describe="every depth-1 goal item of TextCraft (147; the oracle needs 2-4 actions): 50 drawn with a "
                            "fixed seed are held out, the other 97 trained on (disjoint by goal item; a held-out "
                            "item may appear in a training task's context as a distractor recipe); 4 turns of at most "
                            f"{96 if char else 24} tokens; a {'character' if char else 'word'}-level tiny model; "
                            f"warm start {epochs} SFT epochs on "
                            + ("the whole transcripts (a language-model loss on the observations too)"
                               if loss_on == "transcript" else "the oracle's responses only"))


def _textcraft_broad_counterfactual() -> EnvSpec:
    base = _textcraft_broad("word", "completion")
    return replace(base, name="textcraft-broad-counterfactual", warm_counterfactual_steps=COUNTERFACTUAL_STEPS,
                   describe="the goals of `textcraft-broad` (97 trained, 50 held out, disjoint by goal item); 4 turns "
                            "of at most 24 tokens; a word-level tiny model whose warm start never sees the game's "
                            f"own recipes: {COUNTERFACTUAL_STEPS} steps of 16 renamed copies of the oracle's training "
                            "transcripts (item words permuted, counts redrawn, no name a held-out goal: "
                            "`--warm-start-counterfactual-steps`, adapters/counterfactual.py), so only reading the "
                            "goal's recipe line gives the actions")


#: Steps of the counterfactual warm start. Probe (seed 0, one core, 2026-12-07, figures in
#: benchmarks/learning_analysis_2026-12-07.md): held-out success rose with training success up to the last check;
#: 6000 steps of 16 transcripts take about 21 CPU-minutes
COUNTERFACTUAL_STEPS = 6000


#: SFT epochs of the word-level generalisation warm start. Probe (seed 0, one core, checks every 10 epochs,
#: benchmarks/learning_analysis_2026-12-06.md): training greedy success 17 / 27 / 36 / 47 / 96 / 54 % at epochs
#: 10-60, held-out greedy 0 / 0 / 4 / 2 / 6 / 6 %; 60 epochs take about 5 CPU-minutes
BROAD_WARM_EPOCHS = 60


def _wikisearch() -> EnvSpec:
    # An oracle search action (the question) is 13-49 tokens of the tiny tokenizer and its observation (three
    # passages) 250-540: 64 new tokens per turn and 1024 per episode let every oracle episode fit (issue 23)
    return EnvSpec("wikisearch", "WikiSearch-v0", "hotpotqa-500", "wikisearch", max_turns=3, max_new_tokens=64,
                   max_completion_tokens=1024, warm_epochs=60, select_args={"split": "hotpotqa-500", "n": 16},
                   describe="WikiSearch-v0 on `hotpotqa-500` (BM25, three passages per search, EM reward): the first "
                            "16 distinct questions for training, the next 16 held out; 3 turns of at most 64 tokens; "
                            "warm start 60 SFT epochs")


ENV_SPECS = {"textcraft-d1": _textcraft_d1, "textcraft-d12": _textcraft_d12,
             "textcraft-broad": lambda: _textcraft_broad("word", "transcript"),
             "textcraft-broad-responses": lambda: _textcraft_broad("word", "completion"),
             "textcraft-broad-char": lambda: _textcraft_broad("char", "transcript"),
             "textcraft-broad-char-responses": lambda: _textcraft_broad("char", "completion"),
             "textcraft-broad-counterfactual": _textcraft_broad_counterfactual,
             "wikisearch": _wikisearch}

# ------------------------------------------------------------------------------------------------ runs
#: run name -> (estimator, estimator config, advantage control, envs it applies to or None for all)
RUNS: dict[str, tuple[str, dict, str | None, tuple | None]] = {
    "grpo": ("grpo", {}, None, None),
    "dr_grpo": ("dr_grpo", {}, None, None),
    "rloo": ("rloo", {}, None, None),
    "dapo": ("dapo", {}, None, None),
    "gigpo": ("gigpo", {}, None, None),  # default: the 0.1 invalid-action penalty inside the step returns
    "gigpo-returns-before-penalty": ("gigpo", {"penalty_in_step_returns": "none"}, None, None),
    "hgpo": ("hgpo", {}, None, None),
    "bigpo": ("bigpo", {}, None, None),
    # BiGPO with eps from the paper's App. F search (median cluster size in [4, 8]), once at the first batch and
    # kept (agentgym train --eps-calibration once), instead of the embedder's default 0.10
    "bigpo-eps-once": ("bigpo", {}, None, None),
    "bipace": ("bipace", {}, None, None),
    "igpo": ("igpo", {}, None, ("wikisearch",)),
    "a2tgpo": ("a2tgpo", {}, None, ("wikisearch",)),
    "gvpo": ("gvpo", {}, None, None),
    "pvpo": ("pvpo", {}, None, None),
    "sgcd": ("sgcd", {}, None, None),
    "control-zero": ("grpo", {}, "zero", None),
    "control-sign_flip": ("grpo", {}, "sign_flip", None),
    "control-shuffle": ("grpo", {}, "shuffle", None),
    # the step-level estimators with GRPO's per-sequence loss aggregation (their recipes aggregate per token), and
    # GRPO with theirs: the loss recipe and the advantages, measured apart
    "gigpo-seq-mean-loss": ("gigpo", {}, None, None),
    "hgpo-seq-mean-loss": ("hgpo", {}, None, None),
    "bipace-seq-mean-loss": ("bipace", {}, None, None),
    "grpo-token-mean-loss": ("grpo", {}, None, None),
    # GRPO whose rollouts play TextCraft's counterfactual worlds (item words permuted and counts redrawn at every
    # visit, held-out goal items never shown): recall cannot win there, only reading the recipe lines
    "grpo-counterfactual-worlds": ("grpo", {}, None, ("textcraft-broad-counterfactual",)),
}
CONTROLS = ("control-zero", "control-sign_flip", "control-shuffle")
#: run name -> ``agentgym train`` settings of its own (GRPO's recipe aggregates the loss per sequence,
#: "seq-mean-token-mean"; GiGPO's per token over the batch, "token-mean")
RUN_SETTINGS: dict[str, dict] = {"gigpo-seq-mean-loss": {"loss": "grpo"}, "hgpo-seq-mean-loss": {"loss": "grpo"},
                                 "bipace-seq-mean-loss": {"loss": "grpo"}, "grpo-token-mean-loss": {"loss": "gigpo"},
                                 "bigpo-eps-once": {"eps_calibration": "once"},
                                 # HELDOUT: the task set's held-out ids (resolved by run_settings)
                                 "grpo-counterfactual-worlds": {"group_seeds": "group", "rollout_env_kwargs": {
                                     "counterfactual": {"exclude_tasks": "HELDOUT"}}}}


def run_settings(run: str, spec: "EnvSpec") -> dict:
    """The ``agentgym train`` settings of ``run`` of its own (:data:`RUN_SETTINGS`), ``"HELDOUT"`` replaced by the
    held-out task ids of ``spec``."""
    _train, held = spec.tasks()

    def fill(v):
        if v == "HELDOUT":
            return list(held)
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v

    return fill(RUN_SETTINGS.get(run, {}))
#: every estimator and control of TextCraft depth 1
TEXTCRAFT_RUNS = ("grpo", "dr_grpo", "rloo", "dapo", "gigpo", "gigpo-returns-before-penalty", "hgpo", "bigpo",
                  "bigpo-eps-once", "bipace", "gvpo", "pvpo", "sgcd", *CONTROLS)
#: depth 1-2: GRPO against the step-level estimators, each with its own loss recipe and with GRPO's
D12_RUNS = ("grpo", "gigpo", "hgpo", "bipace", "gigpo-seq-mean-loss", "hgpo-seq-mean-loss", "bipace-seq-mean-loss",
            "grpo-token-mean-loss", *CONTROLS)
GENERALISATION_RUNS = ("grpo", "gigpo", *CONTROLS)
#: the counterfactual warm start's set: the same, and GRPO on counterfactual worlds
COUNTERFACTUAL_RUNS = ("grpo", "gigpo", "grpo-counterfactual-worlds", *CONTROLS)
WIKI_RUNS = ("grpo", "gigpo", "igpo", "a2tgpo", *CONTROLS)


@dataclass(frozen=True)
class Profile:
    """What one command runs. ``steps`` RL steps of ``batch_groups`` x ``group_size`` episodes, evaluations at
    ``eval_steps`` (``eval_samples`` sampled episodes per training task), ``heldout_samples`` sampled episodes per
    held-out task before and after."""

    envs: tuple
    runs: tuple
    seeds: tuple
    steps: int
    eval_steps: tuple
    group_size: int = 4
    batch_groups: int = 4
    learning_rate: float = 1e-3
    eval_samples: int = 16
    heldout_samples: int = 16
    env_runs: dict = field(default_factory=dict)  # env -> the runs it gets (default: ``runs``)
    env_overrides: dict = field(default_factory=dict)  # env -> {field: value} of its own (steps, batch...)

    def for_env(self, env: str) -> "Profile":
        """The profile ``env`` runs with: this one with the env's overrides applied."""
        return replace(self, **self.env_overrides.get(env, {}), env_overrides={})

    def runs_of(self, env: str) -> tuple:
        return tuple(r for r in self.env_runs.get(env, self.runs) if RUNS[r][3] is None or env in RUNS[r][3])


#: The TextCraft budget: 48 steps of 4 tasks x G = 8 episodes (1,536 episodes per run). Measured on textcraft-d1
#: (issue 23): 48 x 32 episodes gave +27 and +24 points, 40 x 8 +19 and +13: more episodes per update average out
#: the update noise that the shuffle control measures.
_TC = dict(steps=48, eval_steps=(0, 16, 32, 48), group_size=8, batch_groups=4, eval_samples=16)
#: The generalisation set: 97 training tasks, so more steps (each step sees 4 of them)
_BROAD = dict(steps=96, eval_steps=(0, 48, 96), eval_samples=4)
#: WikiSearch's episodes hold retrieved passages (contexts several times longer): 20 steps of 2 x 4 episodes
_WIKI = dict(steps=20, eval_steps=(0, 10, 20), group_size=4, batch_groups=2, eval_samples=4, heldout_samples=4)

PROFILES = {
    # the whole lab, one command: every estimator and control on TextCraft depth 1, the step-level estimators
    # against GRPO on depth 1-2, and the generalisation set; 3 seeds
    "full": Profile(envs=("textcraft-d1", "textcraft-d12", "textcraft-broad"), runs=TEXTCRAFT_RUNS,
                    seeds=(0, 1, 2), **_TC,
                    env_runs={"textcraft-d12": D12_RUNS, "textcraft-broad": GENERALISATION_RUNS},
                    env_overrides={"textcraft-d12": {"eval_samples": 8}, "textcraft-broad": _BROAD}),
    # every estimator that applies to TextCraft depth 1 and the controls, 3 seeds
    "textcraft": Profile(envs=("textcraft-d1",), runs=TEXTCRAFT_RUNS, seeds=(0, 1, 2), **_TC),
    # TextCraft depth 1-2: the step-level credit question
    "d12": Profile(envs=("textcraft-d12",), runs=D12_RUNS, seeds=(0, 1, 2), **{**_TC, "eval_samples": 8}),
    # held-out goals: GRPO, GiGPO and the controls on the broad set
    "generalisation": Profile(envs=("textcraft-broad",), runs=GENERALISATION_RUNS, seeds=(0, 1, 2),
                              **{**_TC, **_BROAD}),
    # the generalisation set again, from a warm start on counterfactual (renamed) transcripts: does reading transfer?
    # And GRPO whose rollouts play counterfactual worlds, where recall cannot win: can RL itself improve reading?
    "generalisation-counterfactual": Profile(envs=("textcraft-broad-counterfactual",), runs=COUNTERFACTUAL_RUNS,
                                             seeds=(0, 1, 2), **{**_TC, **_BROAD}),
    # what transfers before any RL: the warm starts of the broad set, word- and character-level, trained on the
    # oracle's responses only or on the whole transcripts (no RL runs: the report's warm-start table)
    "transfer-warm-starts": Profile(envs=("textcraft-broad-responses", "textcraft-broad", "textcraft-broad-char",
                                          "textcraft-broad-char-responses"), runs=(), seeds=(0,), **{**_TC, **_BROAD}),
    # WikiSearch alone
    "wikisearch": Profile(envs=("wikisearch",), runs=WIKI_RUNS, seeds=(0, 1, 2), **{**_TC, **_WIKI}),
    # a minutes-long smoke run (its numbers are not checked: 8 steps move little)
    "quick": Profile(envs=("textcraft-d1",), runs=("grpo", "control-sign_flip"), seeds=(0,), steps=8,
                     eval_steps=(0, 4, 8), group_size=4, batch_groups=2, eval_samples=4, heldout_samples=4),
}

#: What the report says about the setup (see also the module docstring).
PREAMBLE = [
    "Setup. The policy is a tiny random Llama (2 layers, hidden 128), initialised from each seed and trained from "
    "scratch; its tokenizer is word-level over the env's own text (0.3-1.2M parameters) or one token per character. "
    "Its context is the transcript form starting from the env's first observation (`--context-first observation`). "
    "Training rollouts, the in-training evaluation and `agentgym eval --policy hf:` condition on the same token ids "
    "(the generated ids are kept, never re-encoded: `tests/adapters/test_learning_tokens.py`). The warm start is SFT "
    "on the oracle's transcripts of the training tasks for a fixed number of epochs. RL: groups of G episodes of each "
    "task (Adam, learning rate 1e-3, KL and clipping from each estimator's recipe). Sampling is temperature 1 over "
    "the whole vocabulary (top-k 0, top-p 1.0, recorded in every metrics row); before and after are evaluated with "
    "common random numbers (the same keyed random streams), so an unchanged model scores exactly the same.",
]


# ------------------------------------------------------------------------------------------------ caching
def _key(config: dict) -> dict:
    from agentgym.provenance import artefact_key

    return artefact_key(config, extra_files=[__file__])


def _key_digest(key: dict) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _fresh(path: Path, key: dict, what: str) -> bool:
    """True when the artefact at ``path`` (a directory holding ``key.json``, or a JSON file holding ``"key"``) was
    made by ``key``; a stale or incomplete one is deleted (to be rebuilt) and False returned."""
    from agentgym.provenance import read_key, stale_reason

    if not path.exists():
        return False
    if path.is_dir():
        stored = read_key(path / "key.json")
    else:
        data = read_key(path)
        stored = data.get("key") if data else None
    reason = stale_reason(stored, key)
    if reason is None:
        return True
    logger.info("%s at %s is stale (%s): rebuilding", what, path, reason)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    return False


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def commit_identity() -> dict:
    """The commit the code ran at, and whether tracked files differed from it."""
    return {"commit": _git("rev-parse", "HEAD") or "unknown",
            "dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}


# ------------------------------------------------------------------------------------------------ steps
def tiny_model(spec: EnvSpec, out: Path, seed: int) -> tuple[Path, dict]:
    """The seed's tiny random model for ``spec`` (reused when its key matches)."""
    from adapters.tiny import build_char_tokenizer, build_tiny_model, build_tokenizer, env_vocabulary

    d = out / spec.name / f"seed{seed}" / "tiny"
    key = _key({"what": "tiny model", "spec": spec.identity(), "seed": seed})
    if _fresh(d, key, "tiny model"):
        return d, key
    train, held = spec.tasks()
    if spec.tokenizer == "char":
        tok = build_char_tokenizer()
    else:
        tok = build_tokenizer(env_vocabulary(spec.env_id, 0, env_kwargs={"split": spec.split, **spec.env_kwargs},
                                             task_ids=list(train) + list(held)))
    model = build_tiny_model(tok, seed=seed, hidden_size=spec.hidden_size, layers=spec.layers, heads=4, kv_heads=2)
    model.save_pretrained(str(d))
    tok.save_pretrained(str(d))
    from agentgym.provenance import write_key

    write_key(d / "key.json", key)
    return d, key


def _settings(spec: EnvSpec, prof: Profile, model: Path, out: Path, seed: int, **kw):
    from adapters.train import TrainSettings

    train, _held = spec.tasks()
    base = dict(env=spec.env_id, model=str(model), split=spec.split, env_kwargs=dict(spec.env_kwargs),
                task_ids=list(train), group_size=prof.group_size, batch_groups=prof.batch_groups,
                max_turns=spec.max_turns, max_new_tokens=spec.max_new_tokens,
                max_completion_tokens=spec.max_completion_tokens, learning_rate=prof.learning_rate, seed=seed,
                cpu=True, output_dir=str(out), eval_samples=prof.eval_samples, warm_start_seed=seed,
                warm_start_max_epochs=spec.warm_epochs, warm_start_learning_rate=spec.warm_learning_rate,
                warm_start_loss_on=spec.warm_loss_on, warm_start_counterfactual_steps=spec.warm_counterfactual_steps,
                save_total_limit=None, temperature=1.0, top_k=0, top_p=1.0, context_first=CONTEXT_FIRST)
    base.update(kw)
    return TrainSettings(**base)


def warm_start(spec: EnvSpec, prof: Profile, tiny: Path, out: Path, seed: int) -> tuple[Path, dict]:
    """The seed's warm start (``agentgym train --warm-start --steps 0``); a stale one is deleted and rebuilt."""
    from adapters.train import WARM_START_KEY, run_warm_start, stale_warm_start
    from agentgym.provenance import read_key

    d = out / spec.name / f"seed{seed}"
    s = _settings(spec, prof, tiny, d, seed, warm_start=True, steps=0)
    reason = stale_warm_start(s)
    if reason is not None:
        logger.info("warm start %s is stale (%s): rebuilding", d / "warm-start", reason)
        shutil.rmtree(d / "warm-start")
    path = Path(run_warm_start(s))
    return path, read_key(path / WARM_START_KEY) or {}


def greedy_eval(spec: EnvSpec, model_dir: Path, tasks: tuple, out_file: Path) -> dict:
    """Greedy success of ``hf:model_dir`` on ``tasks`` through ``agentgym eval``'s grid (transcript form): the mean
    and the per-task scores."""
    from adapters.warm_start import _TaskListGrid
    from agentgym.eval.grid import run_grid
    from agentgym.rollout.loading import load_policy

    if out_file.exists():
        out_file.unlink()  # an evaluation of this model alone (the caller's key decides what is reused)
    # raw transcript, no chat template: what agentgym eval gives an hf: policy in the transcript form
    policy = load_policy(f"hf:{model_dir}", device="cpu", max_new_tokens=spec.max_new_tokens, batch_size=32,
                         chat_template=False, temperature=0.0)
    grid = _TaskListGrid(env_id=spec.env_id, split=spec.split, episodes=len(tasks), max_turns=spec.max_turns,
                         env_kwargs={**spec.env_kwargs, "context_form": {"kind": "transcript", "first": CONTEXT_FIRST}},
                         task_list=list(tasks), chunk=32)
    rows = run_grid(grid, policy, str(out_file), policy_name=f"hf:{model_dir.name}", transcripts=False)
    scores = {r["task_id"]: float(r.get("score") or 0.0) for r in rows if r.get("error") is None}
    if len(scores) != len(tasks):
        raise RuntimeError(f"{out_file}: {len(tasks) - len(scores)} episodes failed")
    return {"success": sum(scores.values()) / len(scores), "per_task": scores}


def sampled_eval(spec: EnvSpec, model_dir: Path, tasks: tuple, samples: int) -> dict:
    """Sampled success (temperature 1, the whole vocabulary; ``samples`` episodes per task, sampling seed
    :data:`EVAL_SAMPLING_SEED`: common random numbers across models) and greedy success, in the training's rollout
    form (:func:`adapters.task_eval.evaluate_tasks`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adapters.episodes import EpisodeConfig
    from adapters.task_eval import evaluate_tasks

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    cfg = EpisodeConfig(max_turns=spec.max_turns, max_new_tokens=spec.max_new_tokens,
                        max_completion_tokens=spec.max_completion_tokens, first_context=CONTEXT_FIRST,
                        temperature=1.0, top_k=0, top_p=1.0)
    res = evaluate_tasks(model, tok, spec.env_id, list(tasks), cfg, samples=samples, seed=EVAL_SAMPLING_SEED,
                         env_kwargs={"split": spec.split, **spec.env_kwargs})
    return {"sampled": res.sampled_success, "greedy": res.greedy_success, "per_task_sampled": res.per_task_sampled,
            "per_task_greedy": res.per_task_greedy, "sampling": res.sampling, "sampling_seed": res.seed,
            "samples": samples}


def seed_baseline(spec: EnvSpec, prof: Profile, warm: Path, warm_key: dict, out: Path, seed: int) -> dict:
    """The warm start's evaluations: greedy (``hf:``) on the training and held-out tasks, sampled on the held-out
    tasks (the *before* of every run of this seed)."""
    f = out / spec.name / f"seed{seed}" / "warm_eval.json"
    key = _key({"what": "warm start evaluation", "warm_start": _key_digest(warm_key),
                "heldout_samples": prof.heldout_samples, "spec": spec.identity()})
    if _fresh(f, key, "warm start evaluation"):
        return json.loads(f.read_text())
    train, held = spec.tasks()
    d = f.parent
    rec = {"key": key, "greedy_hf": {"train": greedy_eval(spec, warm, train, d / "eval-train-0.jsonl"),
                                     "heldout": greedy_eval(spec, warm, held, d / "eval-heldout-0.jsonl")},
           "heldout": sampled_eval(spec, warm, held, prof.heldout_samples)}
    f.write_text(json.dumps(rec, indent=1), encoding="utf-8")
    return rec


def v_table(spec: EnvSpec, prof: Profile, warm: Path, warm_key: dict, seed: int, path: Path) -> Path:
    """PVPO's static V: the warm start's sampled success per training task (8 episodes each)."""
    key = _key({"what": "PVPO V table", "warm_start": _key_digest(warm_key), "seed": seed, "spec": spec.identity()})
    if _fresh(path, key, "V table"):
        return path.with_suffix(".values.json")
    train, _held = spec.tasks()
    res = sampled_eval(spec, warm, train, 8)
    values = path.with_suffix(".values.json")
    values.write_text(json.dumps(res["per_task_sampled"]), encoding="utf-8")
    path.write_text(json.dumps({"key": key, "values": str(values)}), encoding="utf-8")
    return values


def rl_run(spec: EnvSpec, prof: Profile, warm: Path, warm_key: dict, out: Path, seed: int, run: str) -> dict:
    """One RL run from the seed's warm start and its evaluations (``run.json``; reused when its key matches)."""
    from adapters.train import run as train_run

    estimator, est_cfg, control, _ = RUNS[run]
    d = out / spec.name / f"seed{seed}" / run
    extra = run_settings(run, spec)
    key = _key({"what": "RL run", "run": run, "estimator": estimator, "estimator_config": est_cfg, "control": control,
                "settings": extra, "seed": seed, "warm_start": _key_digest(warm_key), "spec": spec.identity(),
                "profile": {k: v for k, v in asdict(prof).items() if k not in ("envs", "runs", "seeds", "env_runs",
                                                                                "env_overrides")}})
    if _fresh(d / "run.json", key, f"run {run}"):
        return json.loads((d / "run.json").read_text())
    if d.exists():  # an unfinished run (killed): start it again from nothing (metrics.jsonl is appended to)
        shutil.rmtree(d)
    est_cfg = dict(est_cfg)
    if estimator == "pvpo":
        est_cfg["v_table"] = str(v_table(spec, prof, warm, warm_key, seed,
                                         out / spec.name / f"seed{seed}" / "vtable.json"))
    interval = math.gcd(*[s for s in prof.eval_steps if s > 0]) if any(prof.eval_steps) else prof.steps
    s = _settings(spec, prof, warm, d, seed, estimator=estimator, estimator_config=est_cfg,
                  advantage_control=control, steps=prof.steps, save_steps=interval, eval_every=interval, **extra)
    t0 = time.perf_counter()
    trainer = train_run(s)
    wall = time.perf_counter() - t0
    train, held = spec.tasks()
    greedy = {}
    for step in prof.eval_steps:
        if step == 0:
            continue
        ck = d / f"checkpoint-{step}"
        if not ck.is_dir():
            raise RuntimeError(f"{ck} missing")
        greedy[str(step)] = {"train": greedy_eval(spec, ck, train, d / f"eval-train-{step}.jsonl"),
                             "heldout": greedy_eval(spec, ck, held, d / f"eval-heldout-{step}.jsonl")}
    last = d / f"checkpoint-{prof.steps}"
    heldout = sampled_eval(spec, last, held, prof.heldout_samples)
    metrics = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    evals = {str(r["step"]): r for r in metrics if "eval/sampled_success" in r}
    in_training = {k: {"sampled": r["eval/sampled_success"], "greedy": r["eval/greedy_success"],
                       "per_task_greedy": r.get("eval/per_task_greedy", {}),
                       "per_task_sampled": r.get("eval/per_task_sampled", {}),
                       "sampling": {x: r.get(f"eval/{x}") for x in ("temperature", "top_k", "top_p")}}
                   for k, r in evals.items()}
    # token-exact transcripts: the in-training greedy evaluation and agentgym eval's hf: policy play the same ids
    agree = [in_training[k]["per_task_greedy"].get(t) == v for k in greedy if k in in_training
             for t, v in greedy[k]["train"]["per_task"].items()]
    rec = {"key": key, "env": spec.name, "seed": seed, "run": run, "estimator": estimator,
           "estimator_config": RUNS[run][1], "control": control, "settings": extra, "steps": prof.steps,
           "wall_s": wall, "wall_per_step_s": wall / max(prof.steps, 1),
           "greedy_hf": greedy, "train": in_training, "heldout": heldout,
           "greedy_agreement": [sum(agree), len(agree)], "eps_used": _eps_used(metrics),
           "profile": asdict(prof), **commit_identity()}
    (d / "run.json").write_text(json.dumps(rec, indent=1), encoding="utf-8")
    del trainer
    return rec


#: The estimator diagnostics (``agentgym/*`` in metrics.jsonl) the report averages per run.
DIAGNOSTICS = ("agentgym/frac_groups_all_equal", "agentgym/singleton_record_frac", "agentgym/step_adv_std",
               "agentgym/episode_adv_std", "agentgym/eps_used")


def _eps_used(metrics: list[dict]) -> list[float]:
    return [r["agentgym/eps_used"] for r in metrics if "agentgym/eps_used" in r]


# ----------------------------------------------------------------------------------------------- report
def _mean_se(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    if n == 0:
        return float("nan"), float("nan")
    m = sum(xs) / n
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n) if n > 1 else float("nan")
    return m, se


def _fmt(m: float, se: float = float("nan")) -> str:
    if math.isnan(m):
        return "-"
    return f"{100 * m:.1f}" + ("" if math.isnan(se) else f" ± {100 * se:.1f}")


def _ms(xs: list[float]) -> str:
    return _fmt(*_mean_se(xs))


def collect(out: Path, prof: Profile) -> dict:
    """The finished runs of this profile under ``out`` made by this code (their key's code identity): env -> run ->
    [run record with its warm start's]. A run made by other code is left out (the report lists it as stale)."""
    code = _key({})["code"]
    runs: dict = {}
    for env in prof.envs:
        for seed in prof.seeds:
            d = out / env / f"seed{seed}"
            base = d / "warm_eval.json"
            ws = d / "warm-start" / "warm_start.json"
            for run in prof.runs_of(env):
                f = d / run / "run.json"
                if not f.is_file():
                    continue
                r = json.loads(f.read_text())
                if (r.get("key") or {}).get("code") != code:
                    continue
                r["baseline"] = json.loads(base.read_text()) if base.is_file() else None
                r["warm_start"] = json.loads(ws.read_text()) if ws.is_file() else None
                metrics = [json.loads(line) for line in (d / run / "metrics.jsonl").read_text().splitlines()]
                inv = [m["agentgym/invalid_action_frac"] for m in metrics if "agentgym/invalid_action_frac" in m]
                r["invalid_per_step"] = inv
                r["diagnostics"] = {k: sum(m[k] for m in metrics if k in m) / max(1, sum(k in m for m in metrics))
                                    for k in DIAGNOSTICS if any(k in m for m in metrics)}
                r["invalid_first_last"] = (sum(inv[:5]) / len(inv[:5]), sum(inv[-5:]) / len(inv[-5:])) if inv else None
                won = [m["agentgym/success"] for m in metrics if "agentgym/success" in m]
                q = max(1, len(won) // 4)
                r["rollout_success_first_last"] = (sum(won[:q]) / q, sum(won[-q:]) / q) if won else None
                runs.setdefault(env, {}).setdefault(run, []).append(r)
    return runs


def _series(r: dict, which: str) -> dict[int, float]:
    """Step -> success of one run: ``sampled``/``greedy`` (in-training, training tasks) or ``greedy_hf``."""
    if which == "greedy_hf":
        out = {0: r["baseline"]["greedy_hf"]["train"]["success"]} if r.get("baseline") else {}
        out.update({int(k): v["train"]["success"] for k, v in r["greedy_hf"].items()})
        return out
    return {int(k): v[which] for k, v in r["train"].items()}


def plot(runs: dict, out_dir: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from agentgym.errors import install_hint

        logger.warning("matplotlib missing (%s): no curves", install_hint("plot"))
        return []
    paths = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for env, by_run in runs.items():
        fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
        for k, (run, recs) in enumerate(sorted(by_run.items())):
            color = plt.cm.tab20(k % 20)
            style = "--" if run.startswith("control") else "-"
            for ax, which in ((axes[0], "greedy_hf"), (axes[1], "sampled")):
                series = [_series(r, which) for r in recs]
                steps = sorted({s for x in series for s in x})
                ys = [100 * sum(x[s] for x in series if s in x) / max(1, sum(s in x for x in series)) for s in steps]
                ax.plot(steps, ys, marker="o", label=run, color=color, linestyle=style)
            series = [r["invalid_per_step"] for r in recs if r.get("invalid_per_step")]
            if series:
                n = min(len(x) for x in series)
                mean = [sum(x[i] for x in series) / len(series) for i in range(n)]
                smooth = [100 * sum(mean[max(0, i - 4):i + 1]) / len(mean[max(0, i - 4):i + 1]) for i in range(n)]
                axes[2].plot(range(1, n + 1), smooth, label=run, color=color, linestyle=style)
        axes[0].set_title(f"{env}: greedy success, train tasks (hf: eval)", fontsize=10)
        axes[1].set_title(f"{env}: sampled success (T=1, full vocabulary), train tasks", fontsize=10)
        axes[2].set_title(f"{env}: invalid actions in RL rollouts (5-step mean)", fontsize=10)
        for ax in axes:
            ax.set_xlabel("RL step")
            ax.set_ylabel("success %" if ax is not axes[2] else "invalid actions %")
            ax.grid(alpha=0.3)
        axes[2].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        p = out_dir / f"learning_{env}.png"
        fig.savefig(p, dpi=90)
        plt.close(fig)
        paths.append(p)
    return paths


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _env_table(env: str, by_run: dict) -> list[str]:
    ep = next(iter(by_run.values()))[0].get("profile") or {}
    last = str(ep.get("steps"))
    spec = ENV_SPECS[env]()
    train, held = spec.tasks()
    lines = [f"## {env}", "", f"Tasks: {spec.describe}.", "",
             f"RL: {ep.get('steps')} steps of {ep.get('batch_groups')} tasks x G = {ep.get('group_size')} episodes, "
             f"learning rate {ep.get('learning_rate')}; training tasks evaluated at steps {ep.get('eval_steps')} "
             f"({ep.get('eval_samples')} sampled episodes per task), the {len(held)} held-out tasks before and after "
             f"({ep.get('heldout_samples')} sampled episodes per task). Δ is after − before per seed, then mean ± s.e.",
             "",
             "| run | n | train sampled before → after | Δ train sampled (per seed) | "
             "held-out sampled before → after | "
             "Δ held-out sampled (per seed) | held-out tasks won (sampled, of "
             f"{len(held)}) before → after | train greedy (hf:) before → after | held-out greedy (hf:) before → after "
             "| invalid actions, steps 1-5 → last 5 | rollout success, first → last quarter of steps | s/run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run, recs in sorted(by_run.items(), key=lambda kv: list(RUNS).index(kv[0]) if kv[0] in RUNS else 99):
        recs = sorted(recs, key=lambda r: r["seed"])
        t0 = [r["train"]["0"]["sampled"] for r in recs]
        t1 = [r["train"][last]["sampled"] for r in recs]
        h0 = [r["baseline"]["heldout"]["sampled"] for r in recs]
        h1 = [r["heldout"]["sampled"] for r in recs]
        won0 = [sum(v > 0 for v in r["baseline"]["heldout"]["per_task_sampled"].values()) for r in recs]
        won1 = [sum(v > 0 for v in r["heldout"]["per_task_sampled"].values()) for r in recs]
        g0 = [r["baseline"]["greedy_hf"]["train"]["success"] for r in recs]
        g1 = [r["greedy_hf"][last]["train"]["success"] for r in recs]
        gh0 = [r["baseline"]["greedy_hf"]["heldout"]["success"] for r in recs]
        gh1 = [r["greedy_hf"][last]["heldout"]["success"] for r in recs]
        dt = [b - a for a, b in zip(t0, t1)]
        dh = [b - a for a, b in zip(h0, h1)]
        inv0 = [r["invalid_first_last"][0] for r in recs if r.get("invalid_first_last")]
        inv1 = [r["invalid_first_last"][1] for r in recs if r.get("invalid_first_last")]
        rs0 = [r["rollout_success_first_last"][0] for r in recs if r.get("rollout_success_first_last")]
        rs1 = [r["rollout_success_first_last"][1] for r in recs if r.get("rollout_success_first_last")]
        wall = sum(r["wall_s"] for r in recs) / len(recs)
        lines.append(
            f"| {run} | {len(recs)} | {_ms(t0)} → {_ms(t1)} | {_ms(dt)} ({', '.join(f'{100 * x:+.1f}' for x in dt)}) "
            f"| {_ms(h0)} → {_ms(h1)} | {_ms(dh)} ({', '.join(f'{100 * x:+.1f}' for x in dh)}) | "
            f"{sum(won0) / len(won0):.1f} → {sum(won1) / len(won1):.1f} | {_ms(g0)} → {_ms(g1)} | "
            f"{_ms(gh0)} → {_ms(gh1)} | {_ms(inv0)} → {_ms(inv1)} | {_ms(rs0)} → {_ms(rs1)} | {wall:.0f} |")
    own = [run for run in by_run if RUN_SETTINGS.get(run)]
    if own:  # what the runs with settings of their own changed (HELDOUT: this set's held-out task ids)
        lines += ["", "Runs with `agentgym train` settings of their own: " + "; ".join(
            f"{run}: `{json.dumps(RUN_SETTINGS[run])}`" for run in sorted(own)) + "."]
    if spec.select == "textcraft-items":  # held-out goals whose recipe line no training text shows
        clean = set(unseen_recipe_tasks(spec.split, train, held))
        lines += ["", f"Held-out goals whose recipe line appears in no training task's context ({len(clean)} of "
                      f"{len(held)}; the others appear there as distractor recipes), sampled success:", "",
                  "| run | unseen-recipe held-out sampled before → after | Δ (per seed) | tasks won before → after |",
                  "|---|---|---|---|"]
        for run, recs in sorted(by_run.items(), key=lambda kv: list(RUNS).index(kv[0]) if kv[0] in RUNS else 99):
            recs = sorted(recs, key=lambda r: r["seed"])

            def sub(per):
                vals = [v for t, v in per.items() if t in clean]
                return sum(vals) / len(vals) if vals else float("nan"), sum(v > 0 for v in vals)

            b = [sub(r["baseline"]["heldout"]["per_task_sampled"]) for r in recs]
            a = [sub(r["heldout"]["per_task_sampled"]) for r in recs]
            dd = [y[0] - x[0] for x, y in zip(b, a)]
            lines.append(f"| {run} | {_ms([x[0] for x in b])} → {_ms([x[0] for x in a])} | {_ms(dd)} "
                         f"({', '.join(f'{100 * x:+.1f}' for x in dd)}) | {sum(x[1] for x in b) / len(b):.1f} → "
                         f"{sum(x[1] for x in a) / len(a):.1f} |")
    deep = [t for t in train if t.startswith("gen-d2-")]
    if deep:  # the multi-step tasks of a mixed set, apart: where step-level credit should matter
        lines += ["", f"Depth-2 training tasks alone ({len(deep)} of {len(train)}), and what the estimators saw (means "
                      "over steps and seeds of the `agentgym/*` diagnostics in metrics.jsonl): the share of groups "
                      "whose episodes all scored the same (no outcome signal), the share of turns in a singleton "
                      "step group (no step-level signal), and the std of GiGPO's step and episode advantage terms.", "",
                  "| run | depth-2 sampled before → after | Δ depth-2 (per seed) | depth-1 sampled before → after | "
                  "groups all equal | singleton turns | step adv. std | episode adv. std |",
                  "|---|---|---|---|---|---|---|---|"]
        for run, recs in sorted(by_run.items(), key=lambda kv: list(RUNS).index(kv[0]) if kv[0] in RUNS else 99):
            recs = sorted(recs, key=lambda r: r["seed"])

            def part(r, step, tasks):
                per = r["train"][step].get("per_task_sampled") or {}
                vals = [per[t] for t in tasks if t in per]
                return sum(vals) / len(vals) if vals else float("nan")

            shallow = [t for t in train if t not in deep]
            d0, d1 = [part(r, "0", deep) for r in recs], [part(r, last, deep) for r in recs]
            s0, s1 = [part(r, "0", shallow) for r in recs], [part(r, last, shallow) for r in recs]
            dd = [b - a for a, b in zip(d0, d1)]

            def diag(key):
                vals = [r["diagnostics"][key] for r in recs if key in r.get("diagnostics", {})]
                return f"{sum(vals) / len(vals):.2f}" if vals else "-"

            lines.append(f"| {run} | {_ms(d0)} → {_ms(d1)} | {_ms(dd)} ({', '.join(f'{100 * x:+.1f}' for x in dd)}) "
                         f"| {_ms(s0)} → {_ms(s1)} | {diag('agentgym/frac_groups_all_equal')} | "
                         f"{diag('agentgym/singleton_record_frac')} | {diag('agentgym/step_adv_std')} | "
                         f"{diag('agentgym/episode_adv_std')} |")
    agree = [r["greedy_agreement"] for recs in by_run.values() for r in recs]
    lines += ["", "Token-exact transcripts: the in-training greedy evaluation and `agentgym eval --policy hf:` agree on "
                  f"{sum(a for a, _ in agree)} of {sum(n for _, n in agree)} (checkpoint, training task) results.", ""]
    once = [r for r in by_run.get("bigpo-eps-once", [])]
    if once:
        lines += ["BiGPO's ε, calibrated once (App. F) per run: " +
                  ", ".join(f"seed {r['seed']}: {r['eps_used'][0]:.3f}" for r in once if r["eps_used"]), ""]
    return lines


def _warm_table(out: Path, prof: Profile, env: str) -> list[str]:
    """The warm starts of ``env`` (one row per seed): what the SFT alone reaches on the training and held-out tasks."""
    spec = ENV_SPECS[env]()
    train, held = spec.tasks()
    clean = set(unseen_recipe_tasks(spec.split, train, held)) if spec.select == "textcraft-items" else set()
    rows = []
    for seed in prof.seeds:
        d = out / env / f"seed{seed}"
        if not (d / "warm_eval.json").is_file() or not (d / "warm-start" / "warm_start.json").is_file():
            continue
        ev = json.loads((d / "warm_eval.json").read_text())
        if (ev.get("key") or {}).get("code") != _key({})["code"]:
            continue  # made by other code
        ws = json.loads((d / "warm-start" / "warm_start.json").read_text())
        per = ev["heldout"]["per_task_sampled"]
        won = sum(v > 0 for v in per.values())
        won_clean = sum(v > 0 for t, v in per.items() if t in clean)
        budget = (f"{ws['config']['counterfactual_steps']} renamed-transcript steps"
                  if ws["config"].get("counterfactual_steps") else f"{ws['epochs']} SFT epochs")
        rows.append(f"| {seed} | {budget} | {_fmt(ws['checks'][-1]['sampled_success'])} | "
                    f"{_fmt(ev['greedy_hf']['train']['success'])} | {_fmt(ev['heldout']['sampled'])} | "
                    f"{_fmt(ev['greedy_hf']['heldout']['success'])} | {won} of {len(held)}"
                    + (f" ({won_clean} of the {len(clean)} unseen-recipe goals)" if clean else "") + " |")
    if not rows:
        return []
    return [f"Warm starts of `{env}` ({spec.describe}):", "",
            "| seed | warm-start budget | train sampled | train greedy (hf:) | held-out sampled | held-out greedy (hf:) | "
            "held-out tasks won (sampled) |", "|---|---|---|---|---|---|---|", *rows, ""]


def report(out: Path, results_md: Path, prof_name: str, prof: Profile, command: str) -> str:
    runs = collect(out, prof)
    curves = plot(runs, results_md.parent / ("learning_plots" if results_md.parent.resolve() == (ROOT / "benchmarks").resolve()
                                             else "plots"))
    commits = sorted({(r.get("commit"), r.get("dirty")) for by_run in runs.values() for recs in by_run.values()
                      for r in recs}, key=str)
    lines = ["# Does it learn, and does it transfer? The CPU learning lab", "",
             f"Written by `{command}` from the runs under `{_shown(out)}` (generated; nothing in this file is "
             "written by hand). The runs were made at commit "
             + ", ".join(f"`{c}`{' (with uncommitted changes)' if d else ''}" for c, d in commits) + ". "
             "Success in %, mean ± standard error over the seeds that finished (n). *Before* is the warm start, "
             "*after* the last RL step.", "",
             f"Configuration: {json.dumps(asdict(prof))}.", ""]
    lab = out / "lab.json"
    if lab.is_file():
        info = json.loads(lab.read_text())
        lines += [f"Wall time of the lab: {info['wall_s'] / 60:.1f} min, {info['cpu_s'] / 60:.1f} CPU-minutes "
                  f"({len(info['chains'])} chains of a task set and a seed, {info['jobs']} processes of one torch "
                  f"thread on a {info['cpu_count']}-core machine; the machine was shared, so the CPU time is the "
                  "comparable figure).", ""]
    lines += [*PREAMBLE, ""]
    for env in prof.envs:
        if env in runs:
            lines += _env_table(env, runs[env])
        lines += _warm_table(out, prof, env)
    for p in curves:
        lines += [f"![{p.stem}]({p.parent.name}/{p.name})", ""]
    done = {(env, r["seed"], run) for env, by_run in runs.items() for run, recs in by_run.items() for r in recs}
    missing = [f"{env} seed {s}: {run}" + (" (made by other code: stale)"
                                          if (out / env / f"seed{s}" / run / "run.json").is_file() else "")
               for env in prof.envs for s in prof.seeds for run in prof.runs_of(env) if (env, s, run) not in done]
    if missing:
        lines += ["## Not finished", "", *[f"- {x}" for x in missing], ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- main
def default_results(prof_name: str, out: Path) -> Path:
    """Where a profile's report goes: the tracked ``benchmarks/RESULTS_learning.md`` for ``full`` (a results file is
    written only by the run it describes), ``RESULTS.md`` in the profile's run directory for every other."""
    return ROOT / "benchmarks" / "RESULTS_learning.md" if prof_name == "full" else out / "RESULTS.md"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="full", help="what to run (default: full)")
    ap.add_argument("--envs", default=None,
                    help="comma list overriding the profile's task sets (default: the profile's)")
    ap.add_argument("--runs", default=None, help="comma list overriding the profile's runs (default: the profile's)")
    ap.add_argument("--seeds", default=None, help="comma list overriding the profile's seeds (default: the profile's)")
    ap.add_argument("--steps", type=int, default=None, help="RL steps per run (default: the profile's)")
    ap.add_argument("--group-size", type=int, default=None, help="episodes per task per step (default: the profile's)")
    ap.add_argument("--batch-groups", type=int, default=None, help="tasks per step (default: the profile's)")
    ap.add_argument("--learning-rate", type=float, default=None, help="RL learning rate (default: the profile's)")
    ap.add_argument("--eval-samples", type=int, default=None,
                    help="sampled episodes per training task in the in-training evaluation (default: the profile's)")
    ap.add_argument("--out", default=None, help="run directory (default: runs/learning/PROFILE)")
    ap.add_argument("--results", default=None,
                    help="the report (default: benchmarks/RESULTS_learning.md for --profile full, OUT/RESULTS.md for "
                         "every other profile)")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the report from the runs there")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per process (default: 1, as every --jobs worker: a run's numbers then do not "
                         "depend on how the lab was split into processes)")
    ap.add_argument("--jobs", type=int, default=2,
                    help="processes running (task set, seed) chains at once, one torch thread each (default: 2, the "
                         "cores of the CI machine)")
    ap.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)  # a --jobs worker
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    prof = PROFILES[args.profile]
    over: dict = {}
    if args.envs:
        over["envs"] = tuple(args.envs.split(","))
        unknown = sorted(set(over["envs"]) - set(ENV_SPECS))
        if unknown:
            ap.error(f"unknown task set(s) {unknown}; known: {sorted(ENV_SPECS)}")
    if args.runs:
        over["runs"] = tuple(args.runs.split(","))
        over["env_runs"] = {}
        unknown = sorted(set(over["runs"]) - set(RUNS))
        if unknown:
            ap.error(f"unknown run(s) {unknown}; known: {sorted(RUNS)}")
    if args.seeds:
        over["seeds"] = tuple(int(s) for s in args.seeds.split(","))
    if args.steps:
        over["steps"] = args.steps
        # evaluations at quarters (thirds, halves) of the run: an even interval, so checkpoints fall on them
        parts = next(k for k in (4, 3, 2, 1) if args.steps % k == 0)
        over["eval_steps"] = tuple(args.steps // parts * i for i in range(parts + 1))
    for name in ("group_size", "batch_groups", "learning_rate", "eval_samples"):
        if getattr(args, name) is not None:
            over[name] = getattr(args, name)
    if over:  # a value given here holds for every task set
        over["env_overrides"] = {e: {k: v for k, v in o.items() if k not in over}
                                 for e, o in prof.env_overrides.items()}
    prof = Profile(**{**asdict(prof), **over})
    out = Path(args.out) if args.out else ROOT / "runs" / "learning" / args.profile
    global TASK_CACHE
    TASK_CACHE = out / "task_sets"
    results = Path(args.results) if args.results else default_results(args.profile, out)
    command = "python benchmarks/learning.py " + " ".join(shlex.quote(a) for a in argv if a != "--report-only")
    chains = [(env, seed) for env in prof.envs for seed in prof.seeds]
    if not args.report_only and args.jobs > 1 and len(chains) > 1:
        failed = run_parallel(argv, prof, out, chains, args.jobs)
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(report(out, results, args.profile, prof, command.strip()), encoding="utf-8")
        for chain, log in failed:
            print(f"error: {chain[0]} seed {chain[1]} failed; see {log}", file=sys.stderr)
        return 1 if failed else 0
    if not args.report_only:
        import torch

        torch.set_num_threads(args.threads)
        t0 = time.perf_counter()
        for env, seed in chains:
            run_chain(prof, out, env, seed)
        if not args.no_report:
            _write_lab_json(out, prof, chains, 1, t0)
    if not args.no_report:
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(report(out, results, args.profile, prof, command.strip()), encoding="utf-8")
        logger.info("report: %s", results)
    return 0


def run_chain(prof: Profile, out: Path, env: str, seed: int) -> None:
    """One (task set, seed) chain: the tiny model, the warm start, its evaluation, every run."""
    spec = ENV_SPECS[env]()
    eprof = prof.for_env(env)
    tiny, _ = tiny_model(spec, out, seed)
    warm, warm_key = warm_start(spec, eprof, tiny, out, seed)
    seed_baseline(spec, eprof, warm, warm_key, out, seed)
    for run in prof.runs_of(env):
        logger.info("%s seed %d: %s", env, seed, run)
        rl_run(spec, eprof, warm, warm_key, out, seed, run)


def _write_lab_json(out: Path, prof: Profile, chains: list, jobs: int, t0: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lab.json").write_text(json.dumps({
        "wall_s": time.perf_counter() - t0, "cpu_s": usage.ru_utime + usage.ru_stime + own.ru_utime + own.ru_stime,
        "jobs": jobs, "cpu_count": os.cpu_count(), "chains": [list(c) for c in chains], "profile": asdict(prof),
        **commit_identity()}, indent=2), encoding="utf-8")


def run_parallel(argv: list[str], prof: Profile, out: Path, chains: list, jobs: int) -> list:
    """``--jobs``: each (task set, seed) chain in its own process of one torch thread, ``jobs`` at a time; this
    command's arguments are passed on with ``--envs``/``--seeds`` narrowed to the chain (argparse keeps the last
    value) and ``--out`` fixed. Writes ``lab.json`` (wall and CPU time, jobs, cores, commit). Returns the failed
    chains with their log files."""
    from concurrent.futures import ThreadPoolExecutor

    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for env in prof.envs:  # the task sets once, here: the workers read them from TASK_CACHE
        ENV_SPECS[env]().tasks()

    def one(chain):
        env, seed = chain
        log = logs / f"{env}-seed{seed}.log"
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--envs", env, "--seeds", str(seed),
               "--out", str(out), "--jobs", "1", "--threads", "1", "--no-report"]
        logger.info("start %s seed %d (log: %s)", env, seed, log)
        with open(log, "w", encoding="utf-8") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
        logger.info("%s %s seed %d (%.0f s since the start)", "done" if rc == 0 else f"FAILED (rc {rc})", env,
                    seed, time.perf_counter() - t0)
        return chain, log, rc

    # the chains with the most work first, so that the short ones fill in at the end
    # (the generalisation set first: its runs are the longest)
    weight = {"textcraft-broad": 6, "textcraft-broad-char": 6, "textcraft-broad-counterfactual": 12,
              "textcraft-d12": 2}
    order = sorted(chains, key=lambda c: (-weight.get(c[0], 1) * len(prof.runs_of(c[0])), c[0], c[1]))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, order))
    _write_lab_json(out, prof, chains, jobs, t0)
    logger.info("lab: %d chains in %.1f min with %d jobs", len(chains), (time.perf_counter() - t0) / 60, jobs)
    return [((env, seed), log) for (env, seed), log, rc in results if rc != 0]


if __name__ == "__main__":
    raise SystemExit(main())
