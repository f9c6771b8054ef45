"""The model-facing prompt contract (bipace.txt, Appendix J).

Every environment renders the prompt its policy sees from one :class:`PromptTemplate`: a *first-step* form
(task, current observation, the action formats) and a *with-history* form that adds the step count and the last
``history_length`` observation/action pairs. The raw observation is always available separately
(``env.last_observation``); the prompt is a view of it.

Placeholders: ``{task}``, ``{step_count}``, ``{history_length}``, ``{action_history}``, ``{current_step}``,
``{current_observation}``, ``{action_formats}`` plus any env-specific ones (``{inventory}``, ``{admissible_actions}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["PromptTemplate", "format_history", "think_action_instruction", "THINK_ACTION_INSTRUCTION"]


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
