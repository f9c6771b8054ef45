"""AppWorld-v0: the real AppWorld apps, driven through sandboxed worker processes in a separate venv.

See :mod:`.env` (the episode), :mod:`.pool` and :mod:`.sandbox` (workers), :mod:`.tasks` (our task set and the
official splits), :mod:`.setup` (``agentgym appworld setup``). Nothing here imports ``appworld``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...registration import EnvEntry

OUR_SPLITS = {
    "train": "our AppWorld tasks for training (4 scenarios x 3 tasks over Simple Note, Venmo, Todoist)",
    "test": "our AppWorld tasks for evaluation (4 scenarios x 3 tasks over Simple Note, Venmo, Todoist)",
    "all": "train + test",
}
OFFICIAL_SPLITS = {
    "dev": "official AppWorld dev split (needs APPWORLD_ROOT with the downloaded data)",
    "test_normal": "official AppWorld test-normal split (needs APPWORLD_ROOT)",
    "test_challenge": "official AppWorld test-challenge split (needs APPWORLD_ROOT)",
    "official-train": "official AppWorld train split (needs APPWORLD_ROOT)",
}


@dataclass(frozen=True)
class AppWorldEntry(EnvEntry):
    """Available when the AppWorld venv is set up (and, for official splits, ``APPWORLD_ROOT`` has the data)."""

    def split_available(self, split: str) -> tuple[bool, str]:
        from .setup import default_root, find_install

        if split not in self.splits:
            return False, f"unknown split {split!r}"
        if find_install() is None:
            return False, (f"the AppWorld venv is not set up under {default_root()}: run `agentgym appworld setup` "
                           "(or set AGENTGYM_APPWORLD_HOME)")
        if split in OFFICIAL_SPLITS:
            from .tasks import official_root

            if official_root() is None:
                return False, "official AppWorld data not found: set APPWORLD_ROOT to a downloaded bundle"
        return True, "ok"


ENTRY = AppWorldEntry(
    env_id="AppWorld-v0",
    entry_point="agentgym.envs.appworld.env:AppWorldEnv",
    splits={**OUR_SPLITS, **OFFICIAL_SPLITS},
    default_split="test",
    extra=None,
    description="AppWorld apps (Simple Note, Venmo, Todoist, ...) by Python code cells, in sandboxed workers; "
    "TGC/SGC from a fresh evaluator process",
)

__all__ = ["ENTRY", "AppWorldEntry", "OUR_SPLITS", "OFFICIAL_SPLITS"]
