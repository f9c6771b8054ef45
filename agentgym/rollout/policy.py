"""Policies: what turns prompts into responses.

Two kinds:

* :class:`Policy` — the batched protocol a model implements: ``policy(prompts: list[str]) -> list[str]``, one raw
  response per prompt (the env parses the action tag). The runner calls it once per turn with the prompts of every
  unfinished episode, so an LLM sees full batches. A policy whose ``__call__`` has a ``contexts`` parameter is also
  given, by keyword, one :class:`PromptContext` per prompt: whose episode and which turn it is. Sampling policies
  derive per-request seeds from it (:func:`request_seeds`), so that the members of a group and the trials of an
  episode do not get identical answers, and a resumed run samples what an uninterrupted one would have.
* :class:`EnvPolicy` — a *privileged* policy that reads the env's state (the oracle planner, a uniform random
  policy over the env's commands). It runs next to the env (inside a worker process under the process backend),
  with its own per-episode ``numpy`` generator, never the env's ``np_random``.

Model-backed text policies (built by :func:`load_policy`, imported lazily):

* ``openai:MODEL`` — any OpenAI-compatible chat-completions server (:mod:`.openai_policy`);
* ``hf:PATH`` — a local ``transformers`` model (:mod:`.hf_policy`).

``load_policy("oracle" | "random" | "openai:MODEL" | "hf:PATH" | "module:callable", **options)`` resolves the CLI's
``--policy`` argument.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import PolicyError, error_record
from ..hashing import stable_digest

__all__ = ["Policy", "AsyncPolicy", "EnvPolicy", "OraclePolicy", "RandomPolicy", "PromptContext", "load_policy",
           "request_seeds", "takes_contexts", "call_batch_policy", "is_async_policy"]


@runtime_checkable
class Policy(Protocol):
    """Batched text policy: one response per prompt, in order. It may take ``contexts`` (see the module doc)."""

    def __call__(self, prompts: Sequence[str]) -> list[str]: ...


@runtime_checkable
class AsyncPolicy(Protocol):
    """A policy with a per-request async interface (``openai:`` has one). The episode-asynchronous runner sends each
    episode's prompt as soon as that episode needs it. ``agenerate`` returns the response (a ``str``, e.g. a
    :class:`~agentgym.rollout.openai_policy.PolicyResponse` with its ``usage``), or returns or raises an exception for
    a request that failed for good: that episode alone gets a typed ``policy_error``. A policy with ``aclose`` has it
    awaited at the end of every async run (e.g. to close its connection pool on the run's event loop)."""

    async def agenerate(self, prompt: str, context: "PromptContext | None" = None) -> str: ...


def is_async_policy(policy) -> bool:
    """Whether ``policy`` has a per-request ``async def agenerate``."""
    return inspect.iscoroutinefunction(getattr(policy, "agenerate", None))


@dataclass(frozen=True)
class PromptContext:
    """Whose prompt this is.

    Attributes:
        task_id: the episode's task.
        seed: the seed its env was reset with.
        member: its index in its group (0..G-1).
        turn: the turn the prompt asks for (0 for the first action).
        episode: the integers that identify the episode among all others: the runner's per-group policy seed
            (``policy_seeds``; for ``agentgym eval``: seed, task digest, trial) with ``member`` appended — the same
            integers that seed a privileged policy's generator.
    """

    task_id: str
    seed: int
    member: int
    turn: int
    episode: tuple[int, ...]


def takes_contexts(policy) -> bool:
    """Whether ``policy(prompts, contexts=...)`` is accepted (a ``contexts`` parameter on its call)."""
    try:
        return "contexts" in inspect.signature(policy).parameters
    except (TypeError, ValueError):
        return False


def request_seeds(base_seed: int, prompts: Sequence[str], contexts: Sequence[PromptContext] | None = None) -> list[int]:
    """One sampling seed per prompt (31 bits, as servers take): a stable digest of ``base_seed`` and the prompt's
    episode and turn, or, without ``contexts``, of the prompt text and its occurrence among equal prompts of this
    call. It depends on neither call order nor batch composition, so a resumed run draws as an uninterrupted one."""
    if contexts is not None:
        if len(contexts) != len(prompts):
            raise PolicyError(f"{len(contexts)} contexts for {len(prompts)} prompts")
        keys = [f"{c.task_id}|{','.join(map(str, c.episode))}|{c.turn}" for c in contexts]
    else:
        seen: dict[str, int] = {}
        keys = []
        for p in prompts:
            seen[p] = seen.get(p, -1) + 1
            keys.append(f"{p}|{seen[p]}")
    return [stable_digest(f"{int(base_seed)}|{k}", namespace="sampling-seed") & 0x7FFF_FFFF for k in keys]


def call_batch_policy(policy, prompts: Sequence[str], contexts: Sequence[PromptContext] | None = None) -> list:
    """One batched policy call (with ``contexts`` by keyword when given): one ``str`` or :class:`ErrorRecord` per
    prompt. A policy may put an exception *instance* in an item's slot (a request that failed for good): that prompt
    alone gets a typed error. Anything else that is not one str per prompt, or an exception, fails every prompt of the
    call (``KeyboardInterrupt`` and ``SystemExit`` propagate: they stop the run)."""
    try:
        out = policy(prompts) if contexts is None else policy(prompts, contexts=contexts)
        if not isinstance(out, (list, tuple)) or len(out) != len(prompts) or \
                not all(isinstance(r, (str, Exception)) for r in out):
            raise PolicyError(f"the policy must return one str per prompt ({len(prompts)}), got "
                              f"{type(out).__name__} of length {len(out) if hasattr(out, '__len__') else '?'}")
    except Exception as e:  # noqa: BLE001 - a failing policy marks the episodes, it does not kill the run (Ctrl-C does)
        rec = error_record(e, "policy")
        return [rec] * len(prompts)
    return [error_record(r, "policy") if isinstance(r, Exception) else r for r in out]


class EnvPolicy:
    """A policy with access to the env (oracle, random). Subclasses implement :meth:`act`."""

    name = "env-policy"

    def act(self, env, rng: np.random.Generator) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class OraclePolicy(EnvPolicy):
    """The env's expert (``env.oracle_action()``)."""

    name = "oracle"

    def act(self, env, rng: np.random.Generator) -> str:
        return env.oracle_action()


class RandomPolicy(EnvPolicy):
    """Uniform over the env's plausible commands (``env.random_action(rng)``)."""

    name = "random"

    def act(self, env, rng: np.random.Generator) -> str:
        return env.random_action(rng)


def load_policy(spec: str, **options) -> Policy | EnvPolicy:
    """``"oracle"``, ``"random"``, ``"openai:MODEL"``, ``"hf:PATH"``, or ``"package.module:attr"``.

    ``options`` configure the model-backed kinds: the fields of
    :class:`~agentgym.rollout.openai_policy.OpenAIConfig` (``base_url``, ``api_key_env``, ``temperature``,
    ``concurrency``...) or :class:`~agentgym.rollout.hf_policy.HFConfig` (``device``, ``dtype``, ``batch_size``...);
    options that the chosen kind does not have, and ``None`` values, are ignored (the CLI passes every flag).

    ``attr`` may be a :class:`Policy` instance or function (``prompts -> responses``), an :class:`EnvPolicy`
    instance, or a class / zero-argument factory that returns one of those.
    """
    if spec.startswith("openai:"):
        from .openai_policy import OpenAIConfig, OpenAIPolicy

        return OpenAIPolicy(OpenAIConfig(model=spec[len("openai:"):], **_options_for(OpenAIConfig, options)))
    if spec.startswith("hf:"):
        from .hf_policy import HFConfig, HFPolicy

        return HFPolicy(HFConfig(path=spec[len("hf:"):], **_options_for(HFConfig, options)))
    if spec == "oracle":
        return OraclePolicy()
    if spec == "random":
        return RandomPolicy()
    if ":" not in spec:
        raise PolicyError(f"unknown policy {spec!r}: use 'oracle', 'random', 'openai:MODEL', 'hf:PATH' or "
                          "'module:callable'")
    mod_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise PolicyError(f"cannot load policy {spec!r}: {e}") from e
    if inspect.isclass(obj) or (callable(obj) and _required_params(obj) == 0):
        obj = obj()
    if isinstance(obj, EnvPolicy) or callable(obj):
        return obj
    raise PolicyError(f"policy {spec!r} is neither callable nor an EnvPolicy")


def _options_for(config_cls, options: dict) -> dict:
    import dataclasses

    names = {f.name for f in dataclasses.fields(config_cls)}
    return {k: v for k, v in options.items() if k in names and v is not None}


def _required_params(fn) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return -1
    return sum(1 for p in sig.parameters.values()
               if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
