"""The catalogue of agentgym environments and their registration with gymnasium.

Each :class:`EnvEntry` names the gymnasium id, the entry point (a string, so nothing is imported until
``gym.make``), the splits, the pip extra it needs, and how to tell whether its data is on this machine.
``register_all()`` is the only import-time side effect of ``import agentgym``.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym

__all__ = ["EnvEntry", "ENVS", "register_all", "get_entry", "env_ids"]


@dataclass(frozen=True)
class EnvEntry:
    """One environment of the catalogue.

    Attributes:
        env_id: the gymnasium id (``TextCraft-v0``).
        entry_point: ``"module:Class"``.
        splits: split name -> a short description.
        default_split: the split used when none is given.
        extra: the pip extra that installs its dependencies (None when the core install suffices).
        requires: importable module names the env needs at run time.
        data: (split -> dataset name or None) for availability checks; None means no file needed.
        description: what the env is, in one line.
        family_order: the order of the ``family`` rows in summary tables (the papers' column order, e.g.
            ALFWorld's Pick, Look, Clean, Heat, Cool, Pick2); families not listed follow in natural order.
    """

    env_id: str
    entry_point: str
    splits: dict[str, str]
    default_split: str
    extra: str | None = None
    requires: tuple[str, ...] = ()
    data: dict[str, tuple[str, tuple[str, ...] | None] | None] = field(default_factory=dict)
    description: str = ""
    family_order: tuple[str, ...] = ()

    def missing_requirements(self) -> list[str]:
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def split_available(self, split: str) -> tuple[bool, str]:
        """(available, reason) for ``split`` on this machine; the reason of a missing file names the ``agentgym data
        fetch`` command that installs it."""
        from .data import data_status

        missing = self.missing_requirements()
        if missing:
            from .errors import install_hint

            return False, f"{install_hint(self.extra)} (missing {', '.join(missing)})"
        need = self.data.get(split)
        if need is None:
            return True, "ok"
        name, package = need
        ok, why = data_status(name, package=package)
        return (True, "ok") if ok else (False, why)

    def fetched_data(self, split: str) -> list[str]:
        """The datasets ``split`` needs that no extra installs: ``agentgym data fetch`` gets them (names from the
        manifest, :mod:`agentgym.data.manifest`)."""
        from .data.manifest import datasets_for_split

        return [d.name for d in datasets_for_split(self.env_id, split) if not d.package]


#: Env packages under ``agentgym.envs``, in catalogue order. Each package's ``__init__`` defines ``ENTRY`` (an
#: :class:`EnvEntry`) and must stay import-light: the env class itself is loaded only by ``gym.make``.
ENV_PACKAGES: tuple[str, ...] = ("textcraft", "alfworld", "webshop", "appworld", "tau_airline", "wiki_search")


def _load_entries() -> tuple[EnvEntry, ...]:
    entries = []
    for name in ENV_PACKAGES:
        try:
            module = importlib.import_module(f"agentgym.envs.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"agentgym.envs.{name}":
                continue  # not part of this build
            raise
        entries.append(module.ENTRY)
    return tuple(entries)


ENVS: tuple[EnvEntry, ...] = _load_entries()


def env_ids() -> list[str]:
    return [e.env_id for e in ENVS]


def get_entry(env_id: str) -> EnvEntry:
    for e in ENVS:
        if e.env_id == env_id:
            return e
    raise KeyError(f"unknown agentgym env id {env_id!r}; known: {env_ids()}")


def register_all() -> None:
    """Register every catalogue entry with gymnasium (idempotent)."""
    for e in ENVS:
        if e.env_id not in gym.registry:
            # No max_episode_steps (no TimeLimit wrapper): each env enforces max_turns itself and reports truncated.
            gym.register(id=e.env_id, entry_point=e.entry_point, kwargs={"split": e.default_split},
                         disable_env_checker=False, order_enforce=True)
