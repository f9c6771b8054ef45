"""``agentgym train``: train a policy on an agentgym env with any registered estimator, through the TRL adapter.

    agentgym train --env TextCraft-v0 --estimator bipace --model Qwen/Qwen2.5-1.5B-Instruct --steps 200 \\
        --group-size 8 --batch-groups 4 --output-dir runs/tc-bipace
    agentgym train --config run.toml             # the same settings from a file (TOML or JSON); flags override it
    agentgym train --config run.toml --resume     # continue from the last checkpoint in --output-dir
    agentgym train --save-tiny-model /tmp/tiny --env TextCraft-v0   # a tiny random model for CPU smoke runs

Config files use the flag names with underscores (``group_size = 8``; ``estimator_config = {eps = 0.1}``;
``env_kwargs = {split = "demo"}``). The loss is the estimator's spec recipe (``adapters.trl.loss_plan``, logged at
start); ``--epsilon``, ``--epsilon-high``, ``--beta`` and ``--loss-type`` (``dapo`` = token-mean, ``grpo`` =
seq-mean-token-mean, ``dr_grpo`` = seq-mean-token-sum-norm) override its clip bounds, KL coefficient and
aggregation. PVPO's static value table comes from a JSON file ``{task_id: V}``: ``--set v_table=vtable.json``. Each logging step writes TRL's metrics plus the estimator's diagnostics
(``agentgym/*``: singleton fraction, cluster sizes, PACE row mix, clip-scale and credit-weight stats, success,
turns, invalid-action fraction) to the log and to ``<output_dir>/metrics.jsonl``. Checkpoints go to
``<output_dir>/checkpoint-N`` every ``--save-steps`` steps and at the end; ``--resume`` (or ``--resume PATH``)
restarts from the latest (or the given) one, including optimizer, scheduler and RNG state.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from agentgym.context import CONTEXT_FORMS, DEFAULT_CONTEXT_FORM, DEFAULT_OBS_TEMPLATE, FIRST_CONTEXTS
from agentgym.errors import DataNotFoundError, MissingDependencyError, TaskError

if TYPE_CHECKING:
    from .episodes import EpisodeConfig

logger = logging.getLogger(__name__)

__all__ = ["TrainSettings", "SettingsError", "HELP", "parse_settings", "build_trainer", "training_tasks",
           "training_env_kwargs", "episode_config", "run_warm_start", "warm_start_key", "stale_warm_start",
           "WARM_START_KEY", "load_v_table", "run", "main"]


class SettingsError(ValueError):
    """A setting is unusable (found while building the trainer): ``agentgym train`` reports it and exits 2."""


@dataclass
class TrainSettings:
    """Every ``agentgym train`` setting (flag ``--group-size`` = field ``group_size``; :data:`HELP` says what each
    does)."""

    env: str = "TextCraft-v0"
    model: str = ""
    estimator: str = "grpo"
    estimator_config: dict = field(default_factory=dict)
    split: str | None = None
    env_kwargs: dict = field(default_factory=dict)
    rollout_env_kwargs: dict = field(default_factory=dict)
    group_seeds: str = "task"
    n_tasks: int | None = 16
    task_ids: list | None = None
    context_form: str = DEFAULT_CONTEXT_FORM
    context_first: str = "prompt"
    group_size: int = 4
    batch_groups: int = 2
    steps: int = 10
    output_dir: str = "runs/agentgym"
    learning_rate: float = 1e-6
    beta: float | None = None
    loss: str | None = None
    loss_type: str | None = None
    epsilon: float | None = None
    epsilon_high: float | None = None
    num_iterations: int = 1
    max_turns: int = 8
    max_new_tokens: int = 256
    max_completion_tokens: int = 2048
    max_prompt_tokens: int | None = None
    obs_template: str = DEFAULT_OBS_TEMPLATE
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    fingerprint_layer: int = -1
    invalid_action_penalty: float | None = None
    summarizer_url: str | None = None
    summarizer_model: str | None = None
    advantage_control: str | None = None
    eps_calibration: str | None = None
    eval_every: int = 0
    eval_n_tasks: int | None = None
    eval_samples: int = 4
    warm_start: bool = False
    warm_start_target: float | None = None
    warm_start_max_epochs: int = 60
    warm_start_eval_every: int = 0
    warm_start_learning_rate: float = 5e-3
    warm_start_lr_schedule: str = "linear"
    warm_start_loss_on: str = "completion"
    warm_start_seed: int = 0
    warm_start_counterfactual_steps: int = 0
    save_steps: int = 50
    save_total_limit: int | None = 3
    logging_steps: int = 1
    seed: int = 0
    cpu: bool = False
    bf16: bool = False
    gradient_checkpointing: bool = False
    resume: str | None = None
    save_tiny_model: str | None = None


#: The help text of every setting (``--help`` adds each default).
HELP: dict[str, str] = {
    "env": "agentgym env id",
    "model": "Hugging Face model id or local directory (required, except with --save-tiny-model)",
    "estimator": "advantage estimator (estimators registry name: grpo, dr_grpo, rloo, dapo, gigpo, hgpo, bigpo, "
                 "bipace, igpo, a2tgpo, gvpo, pvpo, sgcd)",
    "estimator_config": "estimator config as a JSON object (see also --set)",
    "split": "env split (default: the env's default split)",
    "env_kwargs": "extra env constructor kwargs as a JSON object",
    "group_seeds": "the seed a group of the RL rollouts resets with: 'task' (task k resets with --seed + k at every "
                   "visit) or 'group' (each group a new seed drawn from --seed, the step and the group's place in the "
                   "batch, shared by its G members; for episodes that draw from the seed, e.g. TextCraft's "
                   "counterfactual worlds)",
    "rollout_env_kwargs": "env constructor kwargs of the RL rollouts only, over --env-kwargs (a JSON object), e.g. "
                          "TextCraft's counterfactual worlds '{\"counterfactual\": {\"exclude_tasks\": [...]}}'; "
                          "the warm start and the --eval-every evaluation play --env-kwargs alone",
    "n_tasks": "training tasks: the first N task ids of the split (env.task_ids(N)); every step draws --batch-groups "
               "of them without replacement, reshuffled each pass (TRL's sampler, seeded by --seed)",
    "task_ids": "training tasks by id instead of --n-tasks: a JSON list or a comma-separated string",
    "context_form": "what the model sees each turn (agentgym.context): transcript = the first prompt, then each "
                    "response and observation appended, trained as one sequence; 'agentgym eval' uses the same "
                    "default for text policies ('prompt', the env's prompt rebuilt each turn, cannot be trained "
                    "yet)",
    "context_first": "what the transcript starts from: the env's first prompt (instructions, task, first "
                     "observation) or its first observation only (for small models trained from scratch); evaluate "
                     "with --env-arg context_form=\"{'kind': 'transcript', 'first': 'observation'}\"",
    "group_size": "episodes per task per step (G, TRL's num_generations)",
    "batch_groups": "tasks per step (the batch holds batch_groups x group_size episodes)",
    "steps": "optimizer steps (one generation batch each)",
    "output_dir": "checkpoints, metrics.jsonl, agentgym_train.json and the final model",
    "learning_rate": "RL learning rate",
    "beta": "KL coefficient (overrides the estimator's recipe)",
    "loss": "force the adapter's loss with this recipe of estimators.losses.RECIPES (default: the estimator's)",
    "loss_type": "aggregation as a TRL loss type: dapo | grpo | dr_grpo (overrides the recipe's)",
    "epsilon": "lower clip bound (overrides the recipe's)",
    "epsilon_high": "upper clip bound (overrides the recipe's)",
    "num_iterations": "optimizer passes over each generation batch (TRL's num_iterations)",
    "max_turns": "turns per episode (the env's max_turns)",
    "max_new_tokens": "tokens per response",
    "max_completion_tokens": "tokens per episode completion (responses + observations)",
    "max_prompt_tokens": "keep the last N tokens of the first prompt (default: all)",
    "obs_template": "how an observation is appended to the transcript (must hold {observation})",
    "temperature": "sampling temperature of the rollouts and of the sampled evaluations",
    "top_k": "sample among the k most likely tokens only (0: no cut; with --temperature 1 and --top-p 1 the full "
             "distribution), rollouts and sampled evaluations",
    "top_p": "nucleus sampling of the rollouts and sampled evaluations (1.0: no cut)",
    "fingerprint_layer": "hidden layer of BiGPO/BiPACE's actor fingerprints (negative: from the end)",
    "invalid_action_penalty": "the env's invalid-action penalty (env kwarg; default: the env's, 0)",
    "summarizer_url": "OpenAI-compatible server of SGCD's credit summarizer (default: the rule-based one)",
    "summarizer_model": "model name at --summarizer-url",
    "advantage_control": "a learning-lab control instead of the estimator's advantages: zero, sign_flip or shuffle "
                         "(advantages shuffled across the batch's episodes); None = the estimator's",
    "eps_calibration": "BiGPO / BiPACE: eps from the paper's App. F search (median cluster size in [4, 8]): 'once' "
                       "searches on the first batch and keeps it for the run (as the paper; checkpoints carry it), "
                       "'each-batch' on every batch; None = the estimator config's eps (default 0.10 for hidden "
                       "states)",
    "eval_every": "evaluate every N steps, at step 0 and at the end (0 = never): greedy and sampled success on a "
                  "fixed task set, logged to metrics.jsonl as eval/*",
    "eval_n_tasks": "the evaluation tasks: the first N training tasks (None: all of them)",
    "eval_samples": "sampled episodes per evaluation task (at --temperature; one greedy episode per task besides)",
    "warm_start": "first fine-tune --model on oracle transcripts of the training tasks (TRL SFTTrainer, in the "
                  "context form) for --warm-start-max-epochs epochs; saved to OUTPUT_DIR/warm-start, RL then starts "
                  "from it (--steps 0: the warm start only)",
    "warm_start_target": "stop the warm start early once sampled success on the training tasks reaches this (None: "
                         "the fixed budget; a threshold makes the run hinge on one noisy comparison)",
    "warm_start_max_epochs": "SFT epochs over the oracle rows (the budget; at most this many with a target)",
    "warm_start_eval_every": "SFT epochs between success checks (0: one check, at the end)",
    "warm_start_learning_rate": "SFT learning rate",
    "warm_start_loss_on": "what the SFT loss covers: completion (the oracle's responses) or transcript (every token, "
                          "the observations too: a language-model objective on the env's text)",
    "warm_start_lr_schedule": "SFT learning-rate schedule: constant, linear (decays to 0 at the end of the budget, so "
                              "the last epochs settle instead of oscillating) or cosine",
    "warm_start_seed": "seed of the warm start (SFT order and its success checks)",
    "warm_start_counterfactual_steps": "TextCraft depth 1: instead of the SFT epochs, this many steps on renamed "
                                       "copies of the oracle's transcripts (item words permuted, counts redrawn: "
                                       "only reading the goal's recipe line gives the actions; "
                                       "adapters.counterfactual); 0 = off",
    "save_steps": "checkpoint every N steps (and at the end)",
    "save_total_limit": "checkpoints kept",
    "logging_steps": "log every N steps",
    "seed": "seed of the RL run (task order, sampling)",
    "cpu": "train on the CPU even when a GPU is present",
    "bf16": "bfloat16 mixed precision",
    "gradient_checkpointing": "recompute activations in the backward pass (less memory)",
    "resume": "resume from the latest checkpoint in --output-dir, or from PATH",
    "save_tiny_model": "write a tiny random Llama model + word-level tokenizer for --env/--split to PATH and exit",
}

_FIELDS = {f.name: f for f in fields(TrainSettings)}
_JSON_FIELDS = ("estimator_config", "env_kwargs", "rollout_env_kwargs")
_INT = {"n_tasks": int, "max_prompt_tokens": int, "save_total_limit": int, "eval_n_tasks": int}
_FLOAT = ("beta", "epsilon", "epsilon_high", "invalid_action_penalty", "warm_start_target")


def _default_text(f) -> str:
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return "{}"
    return repr(f.default) if isinstance(f.default, str) else str(f.default)


def _task_ids(value: str) -> list:
    value = value.strip()
    if value.startswith("["):
        out = json.loads(value)
        if not isinstance(out, list):
            raise ValueError("--task-ids: a JSON list or a comma-separated string")
        return [str(t) for t in out]
    return [t.strip() for t in value.split(",") if t.strip()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentgym train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__,
                                argument_default=argparse.SUPPRESS)
    p.add_argument("--config", help="TOML or JSON file with settings (flags override it; default: none)")
    for name, f in _FIELDS.items():
        flag = "--" + name.replace("_", "-")
        text = f"{HELP[name]} (default: {_default_text(f)})"
        if name == "resume":
            p.add_argument(flag, nargs="?", const="latest", help=text)
        elif isinstance(f.default, bool):
            p.add_argument(flag, action="store_true", help=text)
        elif name in _JSON_FIELDS:
            p.add_argument(flag, type=json.loads, help=text)
        elif name == "task_ids":
            p.add_argument(flag, type=_task_ids, help=text)
        elif name == "context_form":
            p.add_argument(flag, choices=CONTEXT_FORMS, help=text)
        elif name == "context_first":
            p.add_argument(flag, choices=FIRST_CONTEXTS, help=text)
        elif name == "advantage_control":
            p.add_argument(flag, choices=("zero", "sign_flip", "shuffle"), help=text)
        elif name == "group_seeds":
            p.add_argument(flag, choices=("task", "group"), help=text)
        elif name == "warm_start_loss_on":
            p.add_argument(flag, choices=("completion", "transcript"), help=text)
        elif name == "warm_start_lr_schedule":
            p.add_argument(flag, choices=("constant", "linear", "cosine"), help=text)
        elif name == "eps_calibration":
            p.add_argument(flag, choices=("once", "each-batch"), help=text)
        else:
            p.add_argument(flag, type=_INT.get(name) or (int if type(f.default) is int else
                                                        float if isinstance(f.default, float) or name in _FLOAT
                                                        else str), help=text)
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="one estimator config value (JSON-parsed when possible), repeatable (default: none)")
    return p


def _load_config_file(path: str) -> dict:
    text = Path(path).read_text(encoding="utf-8")
    if path.endswith(".toml"):
        import tomllib

        data = tomllib.loads(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the config file must hold a table/object of settings")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {unknown}; valid: {sorted(_FIELDS)}")
    return data


def parse_settings(argv: Sequence[str]) -> TrainSettings:
    """Defaults < config file < flags."""
    ns = vars(_parser().parse_args(list(argv)))
    merged: dict[str, Any] = {}
    if "config" in ns:
        merged.update(_load_config_file(ns.pop("config")))
    sets = ns.pop("set", None) or []
    merged.update(ns)
    cfg = dict(merged.get("estimator_config") or {})
    for item in sets:
        if "=" not in item:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            cfg[k] = json.loads(v)
        except json.JSONDecodeError:
            cfg[k] = v
    merged["estimator_config"] = cfg
    return TrainSettings(**merged)


def _latest_checkpoint(output_dir: str) -> str | None:
    d = Path(output_dir)
    if not d.is_dir():
        return None
    cks = [p for p in d.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return str(max(cks, key=lambda p: int(p.name.split("-")[-1]))) if cks else None


def _metrics_callback(path: Path):
    from transformers import TrainerCallback

    class _JsonlMetrics(TrainerCallback):
        """Append each log record (TRL metrics + agentgym/* diagnostics) to metrics.jsonl and the log."""

        def on_log(self, args, state, control, logs=None, **kw):
            if not logs:
                return
            rec = {"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")
            keys = ("reward", "agentgym/success", "agentgym/adv_std", "agentgym/singleton_record_frac",
                    "agentgym/frac_rows_pace", "agentgym/clip_scale_mean", "agentgym/credit_weight_mean", "loss")
            shown = ", ".join(f"{k}={rec[k]:.4g}" for k in keys if k in rec)
            if shown:  # the end-of-training record has only run totals (runtime, samples/s): file only
                logger.info("step %d: %s", state.global_step, shown)

    return _JsonlMetrics()


def load_v_table(value: "str | os.PathLike | dict"):
    """PVPO's :class:`estimators.pvpo.StaticValueTable` from a JSON file holding ``{task_id: V}`` or from such a
    mapping (V a number); the same checks for both (``agentgym train`` and the verl bridge use this)."""
    from estimators.pvpo import StaticValueTable

    if isinstance(value, dict):
        data, where = value, "v_table"
    else:
        data, where = _read_v_table_file(str(value)), f"v_table: {value}"
    if not isinstance(data, dict) or not data:
        raise SettingsError(f"{where} must be a non-empty JSON object / mapping {{task_id: V}}")
    bad = [k for k, v in data.items() if isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        raise SettingsError(f"{where}: the value of task(s) {bad[:5]} is not a number")
    return StaticValueTable({str(k): float(v) for k, v in data.items()})


def _read_v_table_file(path: str):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise SettingsError(f"v_table: cannot read {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise SettingsError(f"v_table: {path} is not valid JSON ({e.msg})") from None


def _loss_overrides(s: TrainSettings) -> dict:
    """The recipe fields the TRL-style flags override (None = keep the estimator's recipe)."""
    from .trl import TRL_LOSS_TYPE

    out: dict[str, Any] = {}
    if s.epsilon is not None:
        out["clip_low"] = float(s.epsilon)
    if s.epsilon_high is not None:
        out["clip_high"] = float(s.epsilon_high)
    if s.beta is not None:
        out["kl_coef"] = float(s.beta)
    if s.loss_type is not None:
        agg = {v: k for k, v in TRL_LOSS_TYPE.items()}.get(s.loss_type)
        if agg is None:
            raise SettingsError(f"--loss-type {s.loss_type!r}: choose one of {sorted(TRL_LOSS_TYPE.values())} (TRL's "
                             "loss types that compute a spec aggregation)")
        out["agg"] = agg
    return out


def training_env_kwargs(s: TrainSettings) -> dict:
    """The env kwargs of a run (``--env-kwargs`` with ``--split`` and ``--invalid-action-penalty`` applied)."""
    env_kwargs = dict(s.env_kwargs)
    if s.split is not None:
        env_kwargs["split"] = s.split
    if s.invalid_action_penalty is not None:
        env_kwargs["invalid_action_penalty"] = s.invalid_action_penalty
    return env_kwargs


def episode_config(s: TrainSettings) -> "EpisodeConfig":
    """The rollout settings of a run (used by its rollouts, its evaluations and its warm start)."""
    from .episodes import EpisodeConfig

    return EpisodeConfig(max_turns=s.max_turns, max_new_tokens=s.max_new_tokens,
                         max_completion_tokens=s.max_completion_tokens, max_prompt_tokens=s.max_prompt_tokens,
                         obs_template=s.obs_template, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                         first_context=s.context_first)


def training_tasks(s: TrainSettings):
    """The training task dataset (``make_task_dataset``): ``--task-ids``, else the first ``--n-tasks`` of the
    split; task k resets with seed ``--seed + k``."""
    from .trl import make_task_dataset

    if s.task_ids:
        return make_task_dataset(s.env, env_kwargs=training_env_kwargs(s), seed=s.seed, task_ids=s.task_ids)
    if s.n_tasks is None or s.n_tasks < 1:
        raise SettingsError("--n-tasks must be >= 1 (or give --task-ids)")
    try:
        return make_task_dataset(s.env, s.n_tasks, env_kwargs=training_env_kwargs(s), seed=s.seed)
    except ValueError as e:  # a split smaller than --n-tasks
        raise SettingsError(str(e)) from None


def build_trainer(s: TrainSettings, model_path: str | None = None):
    """The model, tokenizer, dataset and :class:`adapters.trl.AgentGymGRPOTrainer` for settings ``s`` (the model
    from ``model_path`` instead of ``--model`` when given: the warm start's)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from estimators import ConfigError

    from .trl import AgentGymConfig, AgentGymGRPOTrainer, GRPOConfig

    if not s.model:
        raise SettingsError("--model is required (a Hugging Face model id or a local directory)")
    env_kwargs = training_env_kwargs(s)
    if not isinstance(s.rollout_env_kwargs, dict):
        raise SettingsError(f"--rollout-env-kwargs must be a JSON object, got {s.rollout_env_kwargs!r}")
    if s.context_form != "transcript":
        raise SettingsError(f"--context-form {s.context_form!r}: the TRL adapter trains each episode as one sequence, "
                            "which is the 'transcript' form; the rebuilt prompt form ('prompt') needs per-turn "
                            "samples, not supported yet")
    tok = AutoTokenizer.from_pretrained(model_path or s.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_path or s.model)
    summarizer = None
    if s.summarizer_url:
        from .summarizers import OpenAISummarizer

        summarizer = OpenAISummarizer(base_url=s.summarizer_url, model=s.summarizer_model or "default",
                                      api_key=os.environ.get("AGENTGYM_SUMMARIZER_API_KEY"))
    est_cfg = dict(s.estimator_config)
    ds = training_tasks(s)
    if isinstance(est_cfg.get("v_table"), (str, os.PathLike)):
        est_cfg["v_table"] = load_v_table(est_cfg["v_table"])
        missing = sorted(set(ds["task_id"]) - set(est_cfg["v_table"].values))
        if missing:  # fail before training, not at the first batch
            raise SettingsError(f"v_table {s.estimator_config['v_table']}: no value for task(s) {missing[:5]}"
                             f"{' ...' if len(missing) > 5 else ''} of the {len(ds)} training tasks")
    try:
        ag = AgentGymConfig(
            env_id=s.env, estimator=s.estimator, estimator_config=est_cfg,
            env_kwargs={**env_kwargs, **s.rollout_env_kwargs},
            episode=episode_config(s),
            fingerprint_layer=s.fingerprint_layer, summarizer=summarizer, loss=s.loss,
            advantage_control=s.advantage_control, eps_calibration=s.eps_calibration,
            group_seeds=s.group_seeds,
            loss_overrides=_loss_overrides(s))
    except (ConfigError, ValueError) as e:  # an unknown estimator, config key or control
        raise SettingsError(str(e)) from None
    # the loss fields (loss_type, epsilon, epsilon_high, delta, beta) are set by the trainer from the loss plan
    args = GRPOConfig(
        output_dir=s.output_dir, per_device_train_batch_size=s.batch_groups * s.group_size,
        num_generations=s.group_size, max_steps=s.steps, learning_rate=s.learning_rate, num_iterations=s.num_iterations,
        max_completion_length=s.max_completion_tokens, use_cpu=s.cpu, bf16=s.bf16,
        gradient_checkpointing=s.gradient_checkpointing, logging_steps=s.logging_steps, save_strategy="steps",
        save_steps=s.save_steps, save_total_limit=s.save_total_limit, report_to="none", seed=s.seed,
        disable_tqdm=True)
    trainer = AgentGymGRPOTrainer(model, args=args, train_dataset=ds, processing_class=tok, agentgym=ag)
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # the metrics go to the log and metrics.jsonl instead of stdout
    Path(s.output_dir).mkdir(parents=True, exist_ok=True)
    trainer.add_callback(_metrics_callback(Path(s.output_dir) / "metrics.jsonl"))
    if s.eval_every > 0:
        trainer.add_callback(_eval_callback(trainer, s, list(ds["task_id"]), list(ds["seed"]),
                                            Path(s.output_dir) / "metrics.jsonl"))
    return trainer


def _eval_callback(trainer, s: TrainSettings, task_ids: list, seeds: list, path: Path):
    """``--eval-every``: greedy and sampled success on the fixed evaluation tasks at step 0, every N steps and at
    the end (:func:`adapters.task_eval.evaluate_tasks`, sampling seed ``--seed`` at every step), appended to
    metrics.jsonl as ``eval/*`` (with the sampling settings, and ``eval/per_task_sampled`` and
    ``eval/per_task_greedy``: task id -> success)."""
    from transformers import TrainerCallback

    from .task_eval import evaluate_tasks

    n = s.eval_n_tasks if s.eval_n_tasks is not None else len(task_ids)
    tasks, task_seeds = task_ids[:n], seeds[:n]
    cfg = episode_config(s)
    env_kwargs = training_env_kwargs(s)
    envs: dict = {}
    done: set = set()

    class _FixedTaskEval(TrainerCallback):
        def _run(self, state):
            if state.global_step in done:
                return
            done.add(state.global_step)
            model = trainer.accelerator.unwrap_model(trainer.model)
            # the same sampling seed at every step: common random numbers, so the curve measures the model's change,
            # not a new draw (an unchanged model scores exactly the same)
            res = evaluate_tasks(model, trainer.processing_class, s.env, tasks, cfg, seeds=task_seeds,
                                 samples=s.eval_samples, seed=s.seed, env_kwargs=env_kwargs, envs=envs)
            rec = {"step": state.global_step, **res.metrics(),
                   "eval/per_task_sampled": res.per_task_sampled, "eval/per_task_greedy": res.per_task_greedy}
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec) + "\n")
            logger.info("eval at step %d: greedy success %.3f, sampled success %.3f (%d tasks x %d samples)",
                        state.global_step, res.greedy_success, res.sampled_success, res.n_tasks, res.samples)

        def on_train_begin(self, args, state, control, **kw):
            self._run(state)

        def on_step_end(self, args, state, control, **kw):
            if state.global_step % s.eval_every == 0 or state.global_step >= state.max_steps:
                self._run(state)

    return _FixedTaskEval()


def _warm_start_config(s: TrainSettings):
    from .warm_start import WarmStartConfig

    try:
        return WarmStartConfig(target=s.warm_start_target, max_epochs=s.warm_start_max_epochs,
                               eval_every=s.warm_start_eval_every, learning_rate=s.warm_start_learning_rate,
                               seed=s.warm_start_seed, samples=s.eval_samples,
                               lr_schedule=s.warm_start_lr_schedule, loss_on=s.warm_start_loss_on,
                               counterfactual_steps=s.warm_start_counterfactual_steps)
    except ValueError as e:
        raise SettingsError(str(e)) from None


def warm_start_key(s: TrainSettings) -> dict:
    """What a warm start is made from (:func:`agentgym.provenance.artefact_key`): the starting model (a local
    directory by its content), the env, the training tasks and their seeds, the rollout settings of its checks, the
    SFT settings, and the code."""
    from agentgym.provenance import artefact_key, directory_digest

    ds = training_tasks(s)
    model = Path(s.model)
    return artefact_key({
        "model": s.model, "model_digest": directory_digest(model) if model.is_dir() else None,
        "env": s.env, "env_kwargs": training_env_kwargs(s), "task_ids": list(ds["task_id"]),
        "task_seeds": list(ds["seed"]), "episode": dataclasses.asdict(episode_config(s)),
        "warm_start": dataclasses.asdict(_warm_start_config(s)), "cpu": s.cpu})


#: Beside a warm start's model: the key it was made with (:func:`warm_start_key`).
WARM_START_KEY = "warm_start_key.json"


def stale_warm_start(s: TrainSettings) -> str | None:
    """Why the warm start in ``OUTPUT_DIR/warm-start`` may not be reused for ``s`` (None: there is none, or it was
    made by these settings and this code)."""
    from agentgym.provenance import read_key, stale_reason

    out = Path(s.output_dir) / "warm-start"
    if not (out / "warm_start.json").is_file():
        return None
    return stale_reason(read_key(out / WARM_START_KEY), warm_start_key(s))


def run_warm_start(s: TrainSettings) -> str:
    """``--warm-start``: :func:`adapters.warm_start.warm_start` on the training tasks; returns the saved model's
    directory (``OUTPUT_DIR/warm-start``). One found there is reused only when its key (:func:`warm_start_key`:
    settings, starting model and code) matches; a stale one is refused (:class:`SettingsError`), never reused."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.provenance import write_key

    from .warm_start import warm_start

    out = Path(s.output_dir) / "warm-start"
    if not s.model:
        raise SettingsError("--model is required (a Hugging Face model id or a local directory)")
    cfg = _warm_start_config(s)
    if (out / "warm_start.json").is_file():
        reason = stale_warm_start(s)
        if reason is not None:
            raise SettingsError(f"{out} holds a warm start made by other settings or code ({reason}): delete it or "
                                "choose another --output-dir")
        logger.info("warm start: reusing %s (same settings and code)", out)
        return str(out)
    key = warm_start_key(s)  # before training: the starting model's content, as given
    ds = training_tasks(s)
    tok = AutoTokenizer.from_pretrained(s.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(s.model)
    res = warm_start(model, tok, s.env, list(ds["task_id"]), out, episode_config(s), cfg,
                     env_kwargs=training_env_kwargs(s), task_seeds=list(ds["seed"]), use_cpu=s.cpu)
    write_key(out / WARM_START_KEY, key)
    logger.info("warm start: %s after %d epochs (%s)", "done" if res.reached else "target NOT reached",
                res.epochs, out)
    return str(out)


def run(s: TrainSettings):
    """Train per ``s``; returns the trainer (its ``state.log_history`` holds every logged step)."""
    if s.save_tiny_model:
        from .tiny import save_tiny_model

        save_tiny_model(s.save_tiny_model, s.env, env_kwargs=({"split": s.split} if s.split else None))
        logger.info("wrote a tiny random model + tokenizer for %s to %s", s.env, s.save_tiny_model)
        return None
    model_path = None
    if s.warm_start:
        model_path = run_warm_start(s)
        if s.steps == 0:
            return None
    trainer = build_trainer(s, model_path)
    resume = None
    if s.resume:
        resume = _latest_checkpoint(s.output_dir) if s.resume == "latest" else s.resume
        if resume is None:
            raise FileNotFoundError(f"--resume: no checkpoint-* directory in {s.output_dir}")
        logger.info("resuming from %s", resume)
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(s.output_dir)
    (Path(s.output_dir) / "agentgym_train.json").write_text(json.dumps(
        {k: getattr(s, k) for k in _FIELDS}, indent=2, default=str), encoding="utf-8")
    return trainer


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``agentgym train`` (``argv`` without the ``train`` word)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = parse_settings(argv)
    except (ValueError, OSError) as e:
        logger.error("%s", e)
        return 2
    try:
        run(settings)
    except SettingsError as e:
        logger.error("%s", e)
        return 2
    except (DataNotFoundError, TaskError, MissingDependencyError) as e:  # the user's to fix: the cause, no traceback
        logger.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
