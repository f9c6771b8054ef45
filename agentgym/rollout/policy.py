"""Policies: what turns prompts into responses.

Two kinds:

* :class:`Policy` — the batched protocol a model implements: ``policy(prompts: list[str]) -> list[str]``, one raw
  response per prompt (the env parses the action tag). Under the lockstep schedule the runner calls it once per turn
  with the prompts of every unfinished episode; under the async schedule with the prompts waiting at that moment (at
  most its ``max_batch_size``), so batches vary in size. A policy whose ``__call__`` has a ``contexts`` parameter is
  also given, by keyword, one :class:`PromptContext` per prompt: whose episode and which turn it is. Sampling policies
  derive per-request seeds from it (:func:`request_seeds`), so that the members of a group and the trials of an episode
  do not get identical answers, and a resumed run samples what an uninterrupted one would have.
* :class:`EnvPolicy` — a *privileged* policy that reads the env's state (the oracle planner, a uniform random
  policy over the env's commands). It runs next to the env (inside a worker process under the process backend),
  with its own per-episode ``numpy`` generator, never the env's ``np_random``.

Model-backed text policies answer with a :class:`PolicyResponse` (a ``str`` with the request's ``usage``):

* ``openai:MODEL`` — any OpenAI-compatible chat-completions server (:mod:`.openai_policy`);
* ``hf:PATH`` — a local ``transformers`` model (:mod:`.hf_policy`).

:func:`agentgym.rollout.loading.load_policy` resolves the CLI's ``--policy`` argument (``"oracle" | "random" |
"openai:MODEL" | "hf:PATH" | "module:callable"``). This module imports no other policy module.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import PolicyError, error_record
from ..hashing import stable_digest

__all__ = ["Policy", "AsyncPolicy", "EnvPolicy", "OraclePolicy", "RandomPolicy", "PromptContext", "PolicyResponse",
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


class PolicyResponse(str):
    """A model response (the text) with the request's ``usage`` record attached (tokens, latency, attempts)."""

    usage: dict

    def __new__(cls, text: str, usage: dict | None = None):
        obj = super().__new__(cls, text)
        obj.usage = dict(usage or {})
        return obj

    def __reduce__(self):  # keep the usage across pickling (process / Ray backends)
        return (PolicyResponse, (str(self), self.usage))


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
