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
import json
import logging
import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

logger = logging.getLogger(__name__)

__all__ = ["TrainSettings", "SettingsError", "parse_settings", "build_trainer", "load_v_table", "run", "main"]


class SettingsError(ValueError):
    """A setting is unusable (found while building the trainer): ``agentgym train`` reports it and exits 2."""


@dataclass
class TrainSettings:
    """Every ``agentgym train`` setting (flag ``--group-size`` = field ``group_size``)."""

    env: str = "TextCraft-v0"
    model: str = ""
    estimator: str = "grpo"
    estimator_config: dict = field(default_factory=dict)
    split: str | None = None
    env_kwargs: dict = field(default_factory=dict)
    n_tasks: int | None = None
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
    obs_template: str = "\n{observation}\n"
    temperature: float = 1.0
    top_p: float = 1.0
    fingerprint_layer: int = -1
    invalid_action_penalty: float | None = None
    summarizer_url: str | None = None
    summarizer_model: str | None = None
    save_steps: int = 50
    save_total_limit: int | None = 3
    logging_steps: int = 1
    seed: int = 0
    cpu: bool = False
    bf16: bool = False
    gradient_checkpointing: bool = False
    resume: str | None = None
    save_tiny_model: str | None = None


_FIELDS = {f.name: f for f in fields(TrainSettings)}
_JSON_FIELDS = ("estimator_config", "env_kwargs")
_INT = {"n_tasks": int, "max_prompt_tokens": int, "save_total_limit": int}
_FLOAT = ("beta", "epsilon", "epsilon_high", "invalid_action_penalty")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentgym train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__,
                                argument_default=argparse.SUPPRESS)
    p.add_argument("--config", help="TOML or JSON file with settings (flags override it)")
    for name, f in _FIELDS.items():
        flag = "--" + name.replace("_", "-")
        if name == "resume":
            p.add_argument(flag, nargs="?", const="latest", help="resume from the latest checkpoint or PATH")
        elif isinstance(f.default, bool):
            p.add_argument(flag, action="store_true")
        elif name in _JSON_FIELDS:
            p.add_argument(flag, type=json.loads, help="JSON object")
        else:
            p.add_argument(flag, type=_INT.get(name) or (int if type(f.default) is int else
                                                        float if isinstance(f.default, float) or name in _FLOAT
                                                        else str))
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="one estimator config value (JSON-parsed when possible), repeatable")
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


def build_trainer(s: TrainSettings):
    """The model, tokenizer, dataset and :class:`adapters.trl.AgentGymGRPOTrainer` for settings ``s``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from estimators import ConfigError

    from .episodes import EpisodeConfig
    from .trl import AgentGymConfig, AgentGymGRPOTrainer, GRPOConfig, make_task_dataset

    if not s.model:
        raise SettingsError("--model is required (a Hugging Face model id or a local directory)")
    env_kwargs = dict(s.env_kwargs)
    if s.split is not None:
        env_kwargs["split"] = s.split
    if s.invalid_action_penalty is not None:
        env_kwargs["invalid_action_penalty"] = s.invalid_action_penalty
    tok = AutoTokenizer.from_pretrained(s.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(s.model)
    summarizer = None
    if s.summarizer_url:
        from .summarizers import OpenAISummarizer

        summarizer = OpenAISummarizer(base_url=s.summarizer_url, model=s.summarizer_model or "default",
                                      api_key=os.environ.get("AGENTGYM_SUMMARIZER_API_KEY"))
    est_cfg = dict(s.estimator_config)
    n_tasks = s.n_tasks if s.n_tasks is not None else max(s.batch_groups * s.steps, s.batch_groups)
    ds = make_task_dataset(s.env, n_tasks, env_kwargs=env_kwargs, seed=s.seed)
    if isinstance(est_cfg.get("v_table"), (str, os.PathLike)):
        est_cfg["v_table"] = load_v_table(est_cfg["v_table"])
        missing = sorted(set(ds["task_id"]) - set(est_cfg["v_table"].values))
        if missing:  # fail before training, not at the first batch
            raise SettingsError(f"v_table {s.estimator_config['v_table']}: no value for task(s) {missing[:5]}"
                             f"{' ...' if len(missing) > 5 else ''} of the {len(ds)} training tasks")
    try:
        ag = AgentGymConfig(
            env_id=s.env, estimator=s.estimator, estimator_config=est_cfg, env_kwargs=env_kwargs,
            episode=EpisodeConfig(max_turns=s.max_turns, max_new_tokens=s.max_new_tokens,
                                  max_completion_tokens=s.max_completion_tokens,
                                  max_prompt_tokens=s.max_prompt_tokens, obs_template=s.obs_template,
                                  temperature=s.temperature, top_p=s.top_p),
            fingerprint_layer=s.fingerprint_layer, summarizer=summarizer, loss=s.loss,
            loss_overrides=_loss_overrides(s))
    except ConfigError as e:  # an unknown estimator or config key
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
    return trainer


def run(s: TrainSettings):
    """Train per ``s``; returns the trainer (its ``state.log_history`` holds every logged step)."""
    if s.save_tiny_model:
        from .tiny import save_tiny_model

        save_tiny_model(s.save_tiny_model, s.env, env_kwargs=({"split": s.split} if s.split else None))
        logger.info("wrote a tiny random model + tokenizer for %s to %s", s.env, s.save_tiny_model)
        return None
    trainer = build_trainer(s)
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
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
