"""Policies: what turns prompts into responses.

Two kinds:

* :class:`Policy` — the batched protocol a model implements: ``policy(prompts: list[str]) -> list[str]``, one raw
  response per prompt (the env parses the action tag). The runner calls it once per turn with the prompts of every
  unfinished episode, so an LLM sees full batches.
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
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import PolicyError

__all__ = ["Policy", "EnvPolicy", "OraclePolicy", "RandomPolicy", "load_policy"]


@runtime_checkable
class Policy(Protocol):
    """Batched text policy: one response per prompt, in order."""

    def __call__(self, prompts: Sequence[str]) -> list[str]: ...


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
