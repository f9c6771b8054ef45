"""A TextCraft env that raises on a chosen turn (for runner error-handling tests). Importing registers it."""

from __future__ import annotations

import builtins

import gymnasium as gym

from agentgym.envs.textcraft.env import TextCraftEnv


class CrashyTextCraft(TextCraftEnv):
    def __init__(self, crash_on_turn: int = 2, crash_on_reset_task: str | None = None, crash_with: str = "ValueError",
                 **kw):
        super().__init__(**kw)
        self.crash_on_turn = crash_on_turn
        self.crash_on_reset_task = crash_on_reset_task
        self.crash_with = getattr(builtins, crash_with)  # the exception the step raises

    def _start(self, task):
        if task.task_id == self.crash_on_reset_task:
            raise OSError("simulated engine failure at reset")
        return super()._start(task)

    def _execute(self, command, parsed):
        if self.turn + 1 == self.crash_on_turn:
            raise self.crash_with("simulated engine crash")
        return super()._execute(command, parsed)


if "CrashyTextCraft-v0" not in gym.registry:
    gym.register("CrashyTextCraft-v0", entry_point=CrashyTextCraft, kwargs={"split": "gen-depth2"})
