"""TRL 1.16 ``GRPOTrainer(environment_factory=...)`` for every agentgym env.

TRL's ``environment_factory`` takes a class (or zero-argument callable) whose instances play one rollout each:
``reset(**row) -> str`` starts an episode (the string is appended to the row's last user message), every other
public, type-hinted, docstring'd method is a *tool* the model calls, and ``get_reward() -> float`` scores the
rollout. TRL's own loop does the rest: it renders the tools into the chat template, generates, parses the model's
tool calls, calls the methods, appends their results as ``tool`` messages (masked out of the loss) and generates
again, until the model answers without a tool call or the completion budget runs out.

:func:`environment_factory` builds that class for an env id from the env's :class:`~agentgym.chat.ChatForm`:

* text envs (TextCraft, ALFWorld, WebShop, AppWorld, WikiSearch): one tool, ``act(action[, tag])``, stepped as the
  env's own ``<action>...</action>`` (or ``<search>``/``<answer>``, ``<code>``) response;
* tool envs (TauAirline): τ²'s 15 airline tools under their own names and arguments, plus ``respond(message)`` for a
  message to the (simulated) user, whose reply is the tool result.

A tool's result is the env's observation, verbatim; once the episode has ended a further call returns a note and
does not step the env. ``reset`` returns the env's first prompt (its prompt contract: task, rules, first
observation); :func:`make_tool_dataset` builds the rows (``prompt`` = the chat form's system message and an empty
user message, plus ``task_id`` and ``seed``, so the G rollouts of a row play the same task from the same seed).
``get_reward`` is the episode return so far (the sum of env rewards: the benchmark's reward for a finished episode;
an episode the model stopped early keeps what it earned). Each instance keeps its rollout in :attr:`steps` (the
env's action text, observation, reward, flags and info per call), so a test can replay it in-process.

The conversation is the one ``agentgym export-sft --form tools`` writes from eval transcripts (same system message,
first prompt, tool calls and tool results), so oracle exports warm-start a model for this loop.

Requires the ``trl`` extra and transformers >= 5.2 (TRL's requirement for ``environment_factory``). The model's
tokenizer must carry a chat template TRL recognises (its ``trl/chat_templates``, e.g. Qwen2.5/Qwen3's).

Command line (GRPO with TRL's defaults otherwise)::

    python -m adapters.trl_env TextCraft-v0 --split gen-depth1 --model Qwen/Qwen3-0.6B --tasks 64 --steps 100 \
        --out runs/textcraft-tools
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import sys
from typing import Any, ClassVar, Sequence

import agentgym
from agentgym.chat import ChatForm, ToolSpec, chat_form
from agentgym.errors import MissingDependencyError

__all__ = ["AgentGymToolEnv", "environment_factory", "make_tool_dataset", "ENDED_NOTE", "main"]

logger = logging.getLogger(__name__)

#: The tool result of a call made after the episode has ended.
ENDED_NOTE = "The episode has ended; this call was not executed."


class AgentGymToolEnv:
    """One rollout's env for TRL's ``environment_factory`` (see the module docstring). Subclasses made by
    :func:`environment_factory` set ``env_id``, ``env_kwargs`` and ``form`` and carry one method per tool."""

    env_id: ClassVar[str] = ""
    env_kwargs: ClassVar[dict] = {}
    form: ClassVar[ChatForm]

    def __init__(self) -> None:
        if not self.env_id:
            raise TypeError("use adapters.trl_env.environment_factory(env_id) to make an env class")
        self.env = agentgym.make(self.env_id, **self.env_kwargs)
        self.task_id: str | None = None
        self.seed: int | None = None
        self.total_reward = 0.0
        self.done = False
        self.steps: list[dict] = []

    def reset(self, **row: Any) -> str:
        """Start the episode of a dataset row (``task_id``, ``seed``; other columns are ignored); return the env's
        first prompt."""
        self.task_id = None if row.get("task_id") is None else str(row["task_id"])
        self.seed = int(row.get("seed") or 0)
        options = {"task_id": self.task_id} if self.task_id is not None else None
        self.env.reset(seed=self.seed, options=options)
        self.total_reward, self.done, self.steps = 0.0, False, []
        return self.env.prompt()

    def get_reward(self) -> float:
        """The episode return so far (sum of the env's rewards)."""
        return float(self.total_reward)

    def _call(self, name: str, arguments: dict) -> str:
        if self.done:
            return ENDED_NOTE
        text = self.form.action_text(name, arguments)
        obs, reward, terminated, truncated, info = self.env.step(text)
        self.total_reward += float(reward)
        self.done = bool(terminated or truncated)
        self.steps.append({"tool": name, "arguments": dict(arguments), "action_text": text, "observation": obs,
                           "reward": float(reward), "terminated": bool(terminated), "truncated": bool(truncated),
                           "info": info})
        return obs


def _tool_method(spec: ToolSpec):
    """A method ``spec.name(self, **arguments) -> str`` that ``transformers.utils.get_json_schema`` turns into
    ``spec.schema()`` exactly (keyword-only arguments in the spec's order; optional ones default to None)."""

    def method(self, **arguments):
        return self._call(spec.name, arguments)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, annotation=p.py_type(),
                                 default=inspect.Parameter.empty if p.required else None) for p in spec.params]
    method.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    method.__annotations__ = {p.name: p.py_type() for p in spec.params}
    method.__name__ = method.__qualname__ = spec.name
    method.__doc__ = spec.docstring()
    return method


def environment_factory(env_id: str, **env_kwargs: Any) -> type[AgentGymToolEnv]:
    """The ``environment_factory`` class of ``env_id`` (``env_kwargs`` go to ``agentgym.make``, e.g. ``split``,
    ``max_turns``). Pass the class itself: ``GRPOTrainer(..., environment_factory=environment_factory(
    "TextCraft-v0", split="gen-depth1"))``."""
    _check_trl()
    form = chat_form(env_id)
    attrs: dict[str, Any] = {"env_id": env_id, "env_kwargs": dict(env_kwargs), "form": form,
                             "__doc__": f"{env_id} for TRL's environment_factory; tools: {', '.join(form.tool_names)}."}
    for spec in form.tools:
        if spec.name in ("reset", "get_reward") or spec.name.startswith("_") or hasattr(AgentGymToolEnv, spec.name):
            raise ValueError(f"{env_id}: tool name {spec.name!r} clashes with the environment_factory protocol")
        attrs[spec.name] = _tool_method(spec)
    name = "".join(ch for ch in env_id.split("-")[0] if ch.isalnum()) + "ToolEnv"
    return type(name, (AgentGymToolEnv,), attrs)


def make_tool_dataset(env_id: str, n_tasks: int | None = None, *, env_kwargs: dict | None = None, seed: int = 0,
                      task_ids: Sequence[str] | None = None):
    """A ``datasets.Dataset`` for :func:`environment_factory`: per task, ``prompt`` = the chat form's system
    message and an empty user message (``reset`` appends the env's first prompt), ``task_id`` and ``seed``."""
    from datasets import Dataset

    if task_ids is None:
        env = agentgym.make(env_id, **dict(env_kwargs or {}))
        try:
            task_ids = list(env.task_ids(n_tasks))[:n_tasks] if n_tasks is not None else list(env.task_ids())
        finally:
            env.close()
    system = chat_form(env_id).system
    rows = [{"prompt": [{"role": "system", "content": system}, {"role": "user", "content": ""}],
             "task_id": str(t), "seed": int(seed + k)} for k, t in enumerate(task_ids)]
    if not rows:
        raise ValueError(f"no tasks for {env_id}")
    return Dataset.from_list(rows)


def _check_trl() -> None:
    try:
        import transformers
        import trl  # noqa: F401
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise MissingDependencyError("trl", "trl", "the TRL environment_factory bridge (adapters.trl_env)") from e
    from packaging.version import Version

    if Version(transformers.__version__) < Version("5.2.0"):
        raise MissingDependencyError("trl", "transformers>=5.2", "TRL's environment_factory (adapters.trl_env)")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m adapters.trl_env ENV_ID --model PATH ...``: GRPO with ``environment_factory`` on an env split."""
    p = argparse.ArgumentParser(prog="python -m adapters.trl_env", description="GRPO with TRL's tool-calling loop "
                                "(environment_factory) on an agentgym env")
    p.add_argument("env_id")
    p.add_argument("--split", default=None, help="default: the env's default split")
    p.add_argument("--model", required=True, help="a Hugging Face model path or id with a TRL-recognised chat template")
    p.add_argument("--tasks", type=int, default=None, help="first N tasks of the split (default: all)")
    p.add_argument("--max-turns", type=int, default=None, help="env turn budget (also TRL's tool-call iterations)")
    p.add_argument("--group-size", type=int, default=8, help="rollouts per task (GRPO's G)")
    p.add_argument("--batch-groups", type=int, default=1, help="tasks per step")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--max-completion-length", type=int, default=1024, help="tokens per rollout, tool results included")
    p.add_argument("--learning-rate", type=float, default=1e-6)
    p.add_argument("--cpu", action="store_true", help="train on the CPU in float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/trl-env", help="output directory")
    args = p.parse_args(argv)
    from trl import GRPOConfig, GRPOTrainer

    from agentgym.registration import get_entry

    split = args.split or get_entry(args.env_id).default_split
    env_kwargs = {"split": split} | ({"max_turns": args.max_turns} if args.max_turns else {})
    env_cls = environment_factory(args.env_id, **env_kwargs)
    dataset = make_tool_dataset(args.env_id, args.tasks, env_kwargs={"split": split}, seed=args.seed)
    extra = {"use_cpu": True, "bf16": False} if args.cpu else {}
    config = GRPOConfig(output_dir=args.out, per_device_train_batch_size=args.group_size * args.batch_groups,
                        num_generations=args.group_size, max_steps=args.steps, logging_steps=1, report_to="none",
                        max_completion_length=args.max_completion_length, learning_rate=args.learning_rate,
                        max_tool_calling_iterations=args.max_turns, seed=args.seed, save_strategy="no", **extra)
    trainer = GRPOTrainer(model=args.model, args=config, train_dataset=dataset, environment_factory=env_cls)
    trainer.train()
    trainer.save_model(args.out)
    print(f"saved to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
