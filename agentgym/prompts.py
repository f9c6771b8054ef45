"""The model-facing prompt contract (Appendix J of the BiPACE paper, arXiv 2606.25556).

Every environment renders the prompt its policy sees from one :class:`PromptTemplate`: a *first-step* form
(task, current observation, the action formats) and a *with-history* form that adds the step count and the last
``history_length`` observation/action pairs. The raw observation is always available separately
(``env.last_observation``); the prompt is a view of it.

Placeholders: ``{task}``, ``{step_count}``, ``{history_length}``, ``{action_history}``, ``{current_step}``,
``{current_observation}``, ``{action_formats}`` plus any env-specific ones (``{inventory}``, ``{admissible_actions}``).

**Prompt presets** (``prompt_style``, an env keyword of ALFWorld-v0, WebShop-v0 and WikiSearch-v0; part of a run's
identity): ``"bipace"`` (the default) is Appendix J; ``"verl-agent"`` renders verl-agent's own templates byte for
byte, filled as its environment managers fill them (langfengQ/verl-agent at :data:`VERL_AGENT_COMMIT`), so a score
can stand next to verl-agent's published tables; ``"verl-agent-gigpo"`` is the same at :data:`VERL_AGENT_GIGPO_COMMIT`,
before verl-agent fixed a typo in its ALFWorld template ("observaitons"): the prompts of GiGPO's published runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["PromptTemplate", "format_history", "think_action_instruction", "THINK_ACTION_INSTRUCTION", "PROMPT_STYLES",
           "check_prompt_style", "verl_agent_action", "VERL_AGENT_COMMIT", "VERL_AGENT_GIGPO_COMMIT"]

#: The prompt presets (see the module docstring).
PROMPT_STYLES = ("bipace", "verl-agent", "verl-agent-gigpo")
#: langfengQ/verl-agent commit of the ``"verl-agent"`` preset (2026-02-27; also the commit the WebShop spec pins).
VERL_AGENT_COMMIT = "796ed310287fa605c9292a0fce07a86d79fde05e"
#: The commit of the ``"verl-agent-gigpo"`` preset: 2025-09-30, the parent of verl-agent PR #174 (2025-10-02), which
#: changed "observaitons" to "observations" in the ALFWorld template. The WebShop and search templates and every
#: environment manager's fill are the same at both commits.
VERL_AGENT_GIGPO_COMMIT = "7b68c51ff45ac83655b43ea2440c306eb235422a"


def check_prompt_style(style: str, env_name: str) -> str:
    """``style`` when it is one of :data:`PROMPT_STYLES`, else a ``ValueError`` that lists them."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt_style {style!r} for {env_name}; valid: {', '.join(PROMPT_STYLES)}")
    return style


def verl_agent_action(response: str, tail: int) -> str:
    """The action verl-agent's ALFWorld/WebShop projection makes of a model response, which its memory stores and
    its prompt history shows (``alfworld_projection``, ``webshop_projection``): the response lower-cased, the text
    between the first ``<action>`` and the first ``</action>`` stripped; without both tags, the response's last
    ``tail`` characters (30 in ALFWorld, 20 in WebShop), lower-cased."""
    text = response.lower()
    start, end = text.find("<action>"), text.find("</action>")
    if start == -1 or end == -1:
        return text[-tail:]
    return text[start + len("<action>"):end].strip()


def think_action_instruction(reasoning_about: str = "") -> str:
    """The closing ``<think>``/``<action>`` instruction of Appendix J. ``reasoning_about`` is the env's clause of what
    to reason about beyond "the current situation" (TextCraft: "what intermediate items you already have, and which
    next recipe step brings you closest to the goal")."""
    about = f"the current situation, {reasoning_about}" if reasoning_about else "the current situation"
    return ("Now it's your turn to take one action for the current step.\n"
            f"You should first reason step-by-step about {about}. This reasoning process MUST be enclosed within "
            "<think> </think> tags.\n"
            "Once you've finished your reasoning, choose an action and present it within <action> </action> tags. "
            "Output exactly one action; do not chain multiple actions in one response.")


#: The instruction without an env-specific reasoning clause.
THINK_ACTION_INSTRUCTION = think_action_instruction()


def format_history(pairs: Sequence[tuple[str, str]], start_step: int) -> str:
    """``[Observation k: ...; Action k: ...]`` lines for the given (observation, action) pairs."""
    lines = []
    for i, (obs, act) in enumerate(pairs):
        k = start_step + i
        lines.append(f"[Observation {k}: '{obs}', Action {k}: '{act}']")
    return "\n".join(lines)


@dataclass(frozen=True)
class PromptTemplate:
    """A pair of format strings; ``render`` picks the first-step form when there is no history to show."""

    first: str
    with_history: str

    def render(self, *, history: Sequence[tuple[str, str]], history_length: int, step: int, **fields) -> str:
        shown = list(history)[-history_length:] if history_length > 0 else []
        if not shown:
            return self.first.format(current_step=step + 1, **fields)
        return self.with_history.format(
            step_count=step, history_length=len(shown),
            action_history=format_history(shown, step - len(shown) + 1),
            current_step=step + 1, **fields)
