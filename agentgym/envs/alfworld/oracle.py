"""Oracle and random policies for ALFWorld-v0.

The oracle is alfworld's own expert. While the episode has followed the game's recorded ``walkthrough`` (the
expert's verified solution, written by ``alfworld-generate`` and by :mod:`.generate`), it returns the next
walkthrough command; once the agent has left that path (or the game has no walkthrough) it asks alfworld's planner
expert (``AlfredExpertType.PLANNER``: Fast Downward's plan from the *current* engine state) and plays its first
command. Both are deterministic. The random policy draws uniformly from the engine's admissible commands.
"""

from __future__ import annotations

import numpy as np

__all__ = ["OracleState", "random_admissible"]


class OracleState:
    """Tracks whether the episode is still on the walkthrough, and caches the planner's plan."""

    def __init__(self, walkthrough: list[str] | None):
        self.walkthrough = list(walkthrough or [])
        self.on_track = bool(self.walkthrough)
        self.pos = 0
        self._plan: list[str] | None = None

    def observe(self, command: str, state_changed: bool) -> None:
        """Record the command the engine just ran; ``state_changed``: the task-relevant facts changed."""
        if self.on_track and self.pos < len(self.walkthrough) and command == self.walkthrough[self.pos]:
            self.pos += 1
        elif state_changed:  # off the recorded path; a no-op ('look', 'Nothing happens.') keeps it valid
            self.on_track = False
        if self._plan and command == self._plan[0]:
            self._plan = self._plan[1:] or None
        elif state_changed:
            self._plan = None

    def next_command(self, replan, admissible: list[str]) -> str:
        """The expert's next command; ``replan()`` returns the planner's plan from the current state."""
        # A recorded command the engine would not admit was a no-op when the expert played it: skip it.
        while self.on_track and self.pos < len(self.walkthrough) and self.walkthrough[self.pos] not in admissible:
            self.pos += 1
        if self.on_track and self.pos < len(self.walkthrough):
            return self.walkthrough[self.pos]
        self.on_track = False
        if not self._plan or self._plan[0] not in admissible:
            self._plan = list(replan()) or None
        if self._plan:
            return self._plan[0]
        return "look"  # no plan exists from here (cannot happen in ALFWorld, where nothing is irreversible)


def random_admissible(admissible: list[str], rng: np.random.Generator) -> str:
    return admissible[int(rng.integers(len(admissible)))]
