"""ALFWorld-v0: household tasks in text on the real ALFWorld/TextWorld PDDL engine (see :mod:`.env`).

Modules: :mod:`.env` (the env), :mod:`.games` (finding game folders; official splits and the generated split),
:mod:`.scenes` (procedural PDDL scenes, no engine), :mod:`.generate` (writing expert-verified games),
:mod:`.engine` (the engine and alfworld's expert), :mod:`.oracle` (oracle/random policies), :mod:`.prompts`.
Nothing here imports alfworld or textworld: the engine loads only when an env is built.
"""

from __future__ import annotations

from ...registration import EnvEntry

__all__ = ["ENTRY"]


class _ALFWorldEntry(EnvEntry):
    """An official split is available when :func:`.games.official_split_dir` finds a folder with games in it
    (``$ALFWORLD_DATA/json_2.1.1``, alfworld's own variable, or the agentgym data roots), not merely the folder."""

    def split_available(self, split: str) -> tuple[bool, str]:
        if split not in self.data or self.data[split] is None or self.missing_requirements():
            return super().split_available(split)
        from ...errors import DataNotFoundError
        from .games import official_split_dir

        try:
            official_split_dir(split)
            return True, "ok"
        except DataNotFoundError as e:  # report why; any other error is a bug and propagates
            return False, str(e)


ENTRY = _ALFWorldEntry(
    env_id="ALFWorld-v0",
    entry_point="agentgym.envs.alfworld.env:ALFWorldEnv",
    splits={
        "generated": "procedurally generated, expert-verified games of all six families (fixed seed list; built "
                     "once and cached on disk)",
        "train": "official ALFWorld json_2.1.1/train games (needs alfworld-download)",
        "valid_seen": "official json_2.1.1/valid_seen: in-distribution evaluation (140 games)",
        "valid_unseen": "official json_2.1.1/valid_unseen: out-of-distribution evaluation (134 games)",
    },
    default_split="generated",
    extra="alfworld",
    family_order=("Pick", "Look", "Clean", "Heat", "Cool", "Pick2"),  # the column order of the papers' tables
    requires=("alfworld", "textworld", "fast_downward"),
    data={
        "generated": None,
        "train": ("alfworld/json_2.1.1/train", None),
        "valid_seen": ("alfworld/json_2.1.1/valid_seen", None),
        "valid_unseen": ("alfworld/json_2.1.1/valid_unseen", None),
    },
    description="ALFWorld household tasks (six families) on the TextWorld PDDL engine, with alfworld's expert",
)
