"""What a model policy sees each turn: the *context form*, one definition for training and evaluation.

* ``"transcript"`` (the default, :data:`DEFAULT_CONTEXT_FORM`): one growing conversation. The env's first prompt
  (instructions, task, first observation), then each raw response followed by the env's observation formatted by
  ``obs_template`` (default ``"\\n{observation}\\n"``): ``prompt_0 a_1 o_1 a_2 o_2 ...``. This is the sequence
  ``agentgym train`` trains on (one completion per episode, observation tokens masked out of the loss), so a
  checkpoint is evaluated in the context it was trained in. A transcript is text: the EOS token that ended a
  response is not part of it (the training rollout drops it from every turn but the last), and an ``hf:`` policy
  sees it raw, without a chat template.
  ``first="observation"`` starts the transcript from the env's first observation instead of its first prompt (no
  instructions or examples: for small models trained from scratch, which cannot use them; on TextCraft the context
  is then about 4x shorter).
* ``"prompt"``: the env's prompt rebuilt every turn (``env.prompt()``: instructions, task, a history window and the
  current observation), the form of verl-agent and of the envs' prompt styles. ``agentgym eval`` can use it; the TRL
  adapter cannot train on it yet (it trains each episode as one sequence).

``agentgym.make(env_id, context_form=...)`` sets an env's form (a name, a mapping ``{"kind": ..., "obs_template":
...}`` or a :class:`ContextForm`); :func:`policy_context` gives the text a policy sees for the env's current state.
``agentgym eval`` passes the form as the ``context_form`` env kwarg of every text policy (``--context-form``,
default :data:`DEFAULT_CONTEXT_FORM`), so it is part of each results row's identity; ``agentgym train`` records it
in ``agentgym_train.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = ["CONTEXT_FORMS", "FIRST_CONTEXTS", "DEFAULT_CONTEXT_FORM", "DEFAULT_OBS_TEMPLATE", "ContextForm", "policy_context",
           "eos_token_ids", "non_text_token_ids", "response_transcript_ids",
           "set_context_form"]

CONTEXT_FORMS = ("transcript", "prompt")
DEFAULT_CONTEXT_FORM = "transcript"
DEFAULT_OBS_TEMPLATE = "\n{observation}\n"
FIRST_CONTEXTS = ("prompt", "observation")


@dataclass(frozen=True)
class ContextForm:
    """A context form (see the module docstring): ``kind`` one of :data:`CONTEXT_FORMS`; ``obs_template`` formats
    each observation of a transcript (must hold ``{observation}``); ``first`` what a transcript starts from
    (:data:`FIRST_CONTEXTS`: the env's first ``"prompt"`` or its first ``"observation"``)."""

    kind: str = DEFAULT_CONTEXT_FORM
    obs_template: str = DEFAULT_OBS_TEMPLATE
    first: str = "prompt"

    def __post_init__(self) -> None:
        if self.kind not in CONTEXT_FORMS:
            raise ValueError(f"context form must be one of {CONTEXT_FORMS}, got {self.kind!r}")
        if "{observation}" not in self.obs_template:
            raise ValueError("obs_template must contain '{observation}'")
        if self.first not in FIRST_CONTEXTS:
            raise ValueError(f"context form: first must be one of {FIRST_CONTEXTS}, got {self.first!r}")
        if self.kind == "prompt" and self.first != "prompt":
            raise ValueError("context form 'prompt' rebuilds the env's prompt: first must be 'prompt'")

    @classmethod
    def parse(cls, value: "str | Mapping[str, Any] | ContextForm | None") -> "ContextForm":
        """A form from its name, a mapping of its fields, or a form (None: the default)."""
        if value is None:
            return cls()
        if isinstance(value, ContextForm):
            return value
        if isinstance(value, str):
            return cls(kind=value)
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {"kind", "obs_template", "first"})
            if unknown:
                raise ValueError(f"context form: unknown field(s) {unknown}; valid: kind, obs_template, first")
            return cls(**dict(value))
        raise ValueError(f"context form must be a name {CONTEXT_FORMS} or a mapping, got {type(value).__name__}")

    def render(self, first_prompt: str, turns: Sequence[tuple[str, str]], current_prompt: str | None = None) -> str:
        """The text for the next response: ``turns`` holds the ``(raw response, observation)`` pairs so far;
        ``current_prompt`` is the env's rebuilt prompt (needed by the ``"prompt"`` form only)."""
        if self.kind == "prompt":
            if current_prompt is None:
                raise ValueError("the 'prompt' context form needs the env's current prompt")
            return current_prompt
        return first_prompt + "".join(r + self.observation(o) for r, o in turns)

    def first_text(self, env: Any) -> str:
        """The turn-0 context of ``env`` (just reset): its prompt, or its first observation with
        ``first="observation"``."""
        return env.last_observation if self.first == "observation" else env.prompt()

    def observation(self, observation: str) -> str:
        """One observation as a transcript shows it."""
        return self.obs_template.format(observation=observation)

    def identity(self) -> dict:
        """The JSON-able fields (run identities record them)."""
        return {"kind": self.kind, "obs_template": self.obs_template, "first": self.first}


def set_context_form(env: Any, value: "str | Mapping[str, Any] | ContextForm | None") -> None:
    """Give ``env`` (an :class:`~agentgym.core.AgentEnv`) the context form ``value``."""
    env.context_form = ContextForm.parse(value)


def policy_context(env: Any) -> str:
    """The text a model policy sees for ``env``'s current state under the env's context form (the env's rebuilt
    prompt when it has none). Call it after every reset and step: a transcript starts from the prompt it returned
    at turn 0."""
    form = getattr(env, "context_form", None)
    if form is None or form.kind == "prompt":
        return env.prompt()
    if env.turn == 0:
        env.first_prompt = form.first_text(env)
    elif getattr(env, "first_prompt", None) is None:
        raise RuntimeError("policy_context: the transcript's first prompt was not taken at turn 0 (call it after "
                           "reset)")
    return form.render(env.first_prompt, env.context_turns)


# ---- the transcript's token-level rules, shared by every model-side rollout (TRL adapter, verl agent loop, hf:) ----
def eos_token_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """The ids that end a response: the model's ``generation_config.eos_token_id`` (an int or a list) and the
    tokenizer's EOS."""
    ids: set[int] = set()
    for src in (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                getattr(tokenizer, "eos_token_id", None)):
        if isinstance(src, (list, tuple)):
            ids.update(int(x) for x in src)
        elif src is not None:
            ids.add(int(src))
    return sorted(ids)


def non_text_token_ids(tokenizer: Any, eos: Sequence[int]) -> list[int]:
    """The special tokens other than ``eos``: a response is decoded without them, so one the model generated would
    stay in a token-level context but vanish from the text transcript (an ``[UNK]`` or a BOS mid-response). Raw-text
    rollouts and ``hf:`` policies never generate them."""
    return sorted({int(t) for t in getattr(tokenizer, "all_special_ids", ()) or ()} - {int(t) for t in eos})


def response_transcript_ids(response_ids: Sequence[int], eos: Sequence[int], *, final: bool) -> list[int]:
    """The tokens a response adds to a transcript: the EOS that ended a non-final response is not text, so the next
    turn's context (and the one ``agentgym eval`` and SFT rows rebuild from text) has none; the last response keeps
    it, and a response that is only an EOS keeps it (a turn is never empty)."""
    ids = list(response_ids)
    if not final and len(ids) > 1 and ids[-1] in set(eos):
        return ids[:-1]
    return ids
