"""Warm start: supervised fine-tuning on the oracle's transcripts of the training tasks, for a fixed budget.

``agentgym train --warm-start`` runs it before RL (``--steps 0``: only it). The steps are the library's own:

1. ``agentgym eval --policy oracle`` on the training tasks (results + transcripts in ``OUT/oracle.jsonl``);
2. ``agentgym export-sft --per-turn --text --context-form transcript``: one plain-text row per turn, the prompt in
   the training's context form (:mod:`agentgym.context`), the oracle's response as the completion
   (``OUT/sft.jsonl``);
3. TRL's ``SFTTrainer`` (completion-only loss; TRL appends EOS to each completion), seeded with its own seed, for
   ``max_epochs`` epochs. Every ``eval_every`` epochs (and at the end) :func:`adapters.task_eval.evaluate_tasks`
   measures greedy and sampled success on the training tasks in the rollout form, with the same sampling seed at
   every check (common random numbers). A budget that leaves success well below 1 leaves RL room to learn.

   ``target`` (optional) stops training at the first check that reaches it. That makes the warm start's length, and
   everything after it, hinge on one comparison of a sampled estimate with a threshold: a difference in the last bit
   of a CPU kernel can move the stopping epoch and the whole run diverges. The fixed budget (no target) is the
   default, and what the learning lab and its CI test use.

``counterfactual_steps`` > 0 replaces step 3 for TextCraft depth 1 (:mod:`adapters.counterfactual`): that many
steps on renamed copies of the oracle's transcripts (item words permuted, counts redrawn, so that only reading the
context gives the actions; no renamed name is the goal item of a task of the split outside ``task_ids``), one check
at the end. A small model trained on the game's own transcripts memorises each goal's recipe and transfers nothing to
goals it never saw; trained on renamed ones it learns to read the goal's recipe line.

The model and tokenizer are saved to ``OUT`` (``from_pretrained``-loadable) with ``warm_start.json``: the settings
and every check (epoch, greedy and sampled success).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from agentgym.eval.grid import EvalGrid

from .episodes import EpisodeConfig

logger = logging.getLogger(__name__)

__all__ = ["WarmStartConfig", "WarmStartResult", "oracle_sft_rows", "warm_start"]


#: The warm start's learning-rate schedules (TRL / transformers names).
LR_SCHEDULES = ("constant", "linear", "cosine")


@dataclass
class WarmStartConfig:
    """``max_epochs``: the SFT epochs (the budget); ``target``: None (default: train the whole budget) or stop once
    sampled success on the training tasks reaches it; ``eval_every``: epochs between checks (0: only at the end);
    ``samples``: sampled episodes per task of a check; ``lr_schedule``: ``constant`` or ``linear`` (decays to 0 at
    the end of the budget, so the last epochs settle instead of oscillating; the default) or ``cosine``;
    ``loss_on``: ``completion`` (the oracle's responses only; the default) or ``transcript`` (every token of each
    row, the observations too: a language-model objective on the env's text, which gives a small model trained from
    scratch many more examples of its structure, such as a recipe line that an action repeats);
    ``counterfactual_steps``: 0 (the SFT above) or the steps of the counterfactual warm start (module docstring;
    ``max_epochs``, ``learning_rate``, ``batch_size``, ``lr_schedule`` and ``loss_on`` are then unused)."""

    target: float | None = None
    max_epochs: int = 60
    eval_every: int = 0
    learning_rate: float = 5e-3
    batch_size: int = 4
    seed: int = 0
    samples: int = 4
    lr_schedule: str = "linear"
    loss_on: str = "completion"
    counterfactual_steps: int = 0

    def __post_init__(self) -> None:
        if self.target is not None and not 0.0 < self.target <= 1.0:
            raise ValueError(f"warm start target must be in (0, 1] or None, got {self.target}")
        if self.max_epochs < 1 or self.eval_every < 0:
            raise ValueError("warm start max_epochs must be >= 1 and eval_every >= 0")
        if self.target is not None and self.eval_every < 1:
            raise ValueError("a warm start target needs checks: eval_every >= 1")
        if self.loss_on not in ("completion", "transcript"):
            raise ValueError(f"warm start loss_on must be 'completion' or 'transcript', got {self.loss_on!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"warm start lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.counterfactual_steps < 0:
            raise ValueError("warm start counterfactual_steps must be >= 0")
        if self.counterfactual_steps and self.target is not None:
            raise ValueError("the counterfactual warm start has a fixed budget: no target")


@dataclass
class _TaskListGrid(EvalGrid):
    """An eval grid over an explicit task list."""

    task_list: list = field(default_factory=list)

    def task_ids(self) -> list[str]:
        return list(self.task_list)


@dataclass
class WarmStartResult:
    path: str
    epochs: int
    reached: bool
    checks: list = field(default_factory=list)


def oracle_sft_rows(env_id: str, task_ids: Sequence[str], out_dir: str | Path, *, env_kwargs: dict | None = None,
                    max_turns: int | None = None, seed: int = 0, first_context: str = "prompt") -> Path:
    """Steps 1 and 2 of the module docstring: the oracle's episodes on ``task_ids`` (reset seed ``seed``) through
    ``agentgym eval``'s grid, exported as plain-text per-turn rows in the transcript form. Returns the JSONL path."""
    import agentgym
    from agentgym.eval.export import ExportConfig, export_sft
    from agentgym.eval.grid import run_grid
    from agentgym.rollout.policy import OraclePolicy

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    kwargs = dict(env_kwargs or {})
    split = kwargs.pop("split", None) or agentgym.registration.get_entry(env_id).default_split
    grid = _TaskListGrid(env_id=env_id, split=split, env_kwargs=kwargs, max_turns=max_turns, seeds=(seed,),
                         episodes=len(task_ids),
                         task_list=[str(t) for t in task_ids])
    results = out_dir / "oracle.jsonl"
    rows = run_grid(grid, OraclePolicy(), str(results), policy_name="oracle")
    lost = [r["task_id"] for r in rows if not r.get("won")]
    if lost:
        logger.warning("the oracle did not win %d of %d training tasks (%s...): their turns are still exported",
                       len(lost), len(rows), lost[:3])
    sft = out_dir / "sft.jsonl"
    stats = export_sft(str(results), sft, ExportConfig(per_turn=True, text=True, context_form={
        "kind": "transcript", "first": first_context}))
    logger.info("warm start data: %s", stats.describe())
    if stats.rows == 0:
        raise RuntimeError(f"warm start: no SFT rows from {results}")
    return sft


def warm_start(model: Any, tokenizer: Any, env_id: str, task_ids: Sequence[str], out_dir: str | Path,
               episode: EpisodeConfig, config: WarmStartConfig | None = None, *, env_kwargs: dict | None = None,
               task_seeds: Sequence[int] | None = None, use_cpu: bool = True,
               heldout_task_ids: Sequence[str] = ()) -> WarmStartResult:
    """Fine-tune ``model`` in place on the oracle's transcripts of ``task_ids`` (see the module docstring) and save
    it to ``out_dir``. ``episode``: the rollout settings of the success checks (the RL run's); ``task_seeds``: the
    env reset seed of each task in the checks (default 0, 1, ...; the oracle plays with seed 0, and a task's
    oracle actions do not depend on the seed); ``heldout_task_ids``: tasks the checks also measure (keys
    ``heldout_*``), never trained on."""
    from .task_eval import evaluate_tasks

    cfg = config or WarmStartConfig()
    out_dir = Path(out_dir)
    sft_path = oracle_sft_rows(env_id, task_ids, out_dir / "data", env_kwargs=env_kwargs,
                               max_turns=episode.max_turns, first_context=episode.first_context)
    checks: list[dict] = []
    envs: dict = {}

    def check(model, epoch: int) -> dict:
        res = evaluate_tasks(model, tokenizer, env_id, task_ids, episode, seeds=task_seeds,
                             samples=cfg.samples, seed=cfg.seed, env_kwargs=env_kwargs, envs=envs)
        row = {"epoch": epoch, **res.metrics(prefix="")}
        if heldout_task_ids:
            held = evaluate_tasks(model, tokenizer, env_id, heldout_task_ids, episode, samples=cfg.samples,
                                  seed=cfg.seed, env_kwargs=env_kwargs, envs=envs)
            row.update({"heldout_greedy_success": held.greedy_success,
                        "heldout_sampled_success": held.sampled_success,
                        "heldout_tasks_won_sampled": sum(v > 0 for v in held.per_task_sampled.values())})
        checks.append(row)
        logger.info("warm start epoch %d: greedy success %.3f, sampled success %.3f%s%s", epoch,
                    res.greedy_success, res.sampled_success,
                    "" if cfg.target is None else f" (target {cfg.target:.2f})",
                    "" if not heldout_task_ids else
                    f"; held-out greedy {row['heldout_greedy_success']:.3f}, sampled "
                    f"{row['heldout_sampled_success']:.3f}")
        return row

    if cfg.counterfactual_steps:
        from .counterfactual import CounterfactualConfig, Renamer, train_counterfactual

        renamer = Renamer(_transcripts(sft_path), exclude=_other_goal_items(env_id, env_kwargs, task_ids))
        losses = train_counterfactual(model, tokenizer, renamer,
                                      CounterfactualConfig(steps=cfg.counterfactual_steps, seed=cfg.seed))
        row = check(model, 0)  # kept in ``checks``: the last loss goes with it
        row["counterfactual_loss"] = losses[-1]["loss"]
    else:
        from datasets import load_dataset
        from transformers import TrainerCallback
        from trl import SFTConfig, SFTTrainer

        data = load_dataset("json", data_files=str(sft_path), split="train").select_columns(["prompt", "completion"])

        class _Checks(TrainerCallback):
            def on_epoch_end(self, args, state, control, model=None, **kw):
                epoch = int(round(state.epoch or 0))
                if epoch < cfg.max_epochs and (not cfg.eval_every or epoch % cfg.eval_every):
                    return
                row = check(model, epoch)
                if cfg.target is not None and row["sampled_success"] >= cfg.target:
                    control.should_training_stop = True

        args = SFTConfig(output_dir=str(out_dir / "sft"), num_train_epochs=cfg.max_epochs,
                         per_device_train_batch_size=cfg.batch_size, learning_rate=cfg.learning_rate,
                         lr_scheduler_type=cfg.lr_schedule, seed=cfg.seed, data_seed=cfg.seed, use_cpu=use_cpu,
                         save_strategy="no", report_to="none", logging_steps=50, disable_tqdm=True,
                         max_length=None, completion_only_loss=cfg.loss_on == "completion")
        trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer,
                             callbacks=[_Checks()])
        trainer.train()
    model.eval()
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    reached = bool(checks) and (cfg.target is None or checks[-1]["sampled_success"] >= cfg.target)
    epochs = checks[-1]["epoch"] if checks else 0
    result = WarmStartResult(path=str(out_dir), epochs=epochs, reached=reached, checks=checks)
    (out_dir / "warm_start.json").write_text(json.dumps({"config": asdict(cfg), "env_id": env_id,
                                                         "task_ids": [str(t) for t in task_ids],
                                                         "epochs": epochs, "reached": reached, "checks": checks},
                                                        indent=2), encoding="utf-8")
    if not reached:  # only with a target
        logger.warning("warm start: sampled success %.3f after %d epochs is below the target %.2f",
                       checks[-1]["sampled_success"] if checks else float("nan"), epochs, cfg.target)
    return result


def _transcripts(sft_path: Path) -> list[str]:
    """Each task's whole transcript: its last per-turn row's prompt and completion."""
    last: dict[str, str] = {}
    for line in Path(sft_path).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        last[str(row["task_id"])] = row["prompt"] + row["completion"]
    return list(last.values())


def _other_goal_items(env_id: str, env_kwargs: dict | None, task_ids: Sequence[str]) -> list[str]:
    """The goal items of the split's tasks that are not in ``task_ids`` (from each one's first observation): the
    names a counterfactual transcript must never spell, so no renamed goal is a goal the policy does not train on."""
    import re

    import agentgym

    env = agentgym.make(env_id, **dict(env_kwargs or {}))
    train = {str(t) for t in task_ids}
    out = []
    for tid in env.task_ids():
        if str(tid) in train:
            continue
        obs, _ = env.reset(seed=0, options={"task_id": tid})
        m = re.search(r"Goal: craft (.+)\.\s*$", obs)
        if m is None:
            raise ValueError(f"counterfactual warm start: no TextCraft goal in the first observation of {tid!r}")
        out.append(m.group(1))
    return out
