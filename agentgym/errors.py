"""The error model.

Two kinds of things go wrong in an agent episode, and agentgym keeps them apart:

* **The agent's mistakes** (malformed response, unknown command, inadmissible action, a craft without the
  ingredients) are part of the task. They never raise: the step returns an observation that says what was wrong,
  ``info["action_valid"]`` / ``info["process_ok"]`` flag it, and the env's invalid-action penalty applies.
* **Failures of the environment or the harness** (an engine crash, a missing data file, a policy that raised, a
  timeout) are not the agent's fault and must never look like a reward of 0. They are :class:`AgentGymError`
  subclasses. Inside an episode the runner catches them (and any other ``Exception`` from the env) and records a
  typed :class:`ErrorRecord` on the trajectory and in results files; such episodes are *marked*, not scored.
* **Agent code that breaks its sandbox** (an env that runs the agent's code in a process of its own, AppWorld-v0:
  a cell that kills or hangs that process, or leaves a damaged saved state) is the agent's mistake too, and is
  *scored*: the episode ends as a failed task (reward 0, ``won`` False) and ``info["agent_failure"]`` holds an
  :class:`ErrorRecord` of kind :data:`AGENT_CODE` saying what happened. It never raises, so an agent cannot turn a
  failing episode into an unscored error row.

``ErrorRecord.kind`` is one of :data:`ERROR_KINDS`.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = [
    "AgentGymError",
    "MissingDependencyError",
    "DataNotFoundError",
    "TaskError",
    "EnvCrashError",
    "PolicyError",
    "EpisodeTimeoutError",
    "SystemicFailureError",
    "UnguardedMainError",
    "ErrorRecord",
    "ERROR_KINDS",
    "AGENT_CODE",
    "error_record",
    "install_hint",
    "DIST_NAME",
]

#: The distribution's name on the package index (the import name stays ``agentgym``; ``agentgym`` on PyPI is an
#: unrelated project).
DIST_NAME = "agentgym-kit"


def install_hint(extra: str) -> str:
    """The pip command that installs ``extra`` where this code runs: ``pip install -e ".[extra]"`` in a source
    checkout (the package sits beside the pyproject.toml of this distribution; the checkout's path instead of ``.``
    when the working directory is elsewhere), ``pip install 'agentgym-kit[extra]'`` for an installed wheel.
    (``retrieval.errors`` keeps a copy: that package imports nothing of agentgym.)"""
    root = Path(__file__).resolve().parent.parent
    try:
        checkout = f'name = "{DIST_NAME}"' in (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        checkout = False
    if not checkout:
        return f"pip install '{DIST_NAME}[{extra}]'"
    try:
        here = Path(os.getcwd()).resolve() == root
    except OSError:
        here = False
    return f'pip install -e ".[{extra}]"' if here else f'pip install -e "{root}[{extra}]"'



class AgentGymError(Exception):
    """Base class of every failure that is not the agent's fault."""

    kind = "agentgym_error"


class MissingDependencyError(AgentGymError, ImportError):
    """An optional dependency is not installed; the message names the exact pip command."""

    kind = "missing_dependency"

    def __init__(self, package: str, extra: str, purpose: str = ""):
        self.package, self.extra = package, extra
        what = f" (needed for {purpose})" if purpose else ""
        super().__init__(f"{package} is not installed{what}. Install it with: {install_hint(extra)}")


class DataNotFoundError(AgentGymError, FileNotFoundError):
    """A data file or directory could not be located; the message lists where it was looked for."""

    kind = "data_not_found"


class TaskError(AgentGymError, ValueError):
    """A task specification is malformed or names something that does not exist."""

    kind = "bad_task"


class EnvCrashError(AgentGymError, RuntimeError):
    """The environment raised while resetting or stepping."""

    kind = "env_crash"


class UnguardedMainError(AgentGymError, RuntimeError):
    """Worker processes could not start because the script that starts them runs its rollout at import time.

    Worker processes are *spawned*: each imports the parent's main script again (as ``__mp_main__``), so a script
    whose top-level code starts a pool, without ``if __name__ == "__main__":`` around it, would start one in every
    worker too. The workers refuse and exit, and the parent raises this instead of playing episodes on dead workers.
    """


class PolicyError(AgentGymError, RuntimeError):
    """The policy raised or returned something that is not one string per prompt."""

    kind = "policy_error"


class EpisodeTimeoutError(AgentGymError, TimeoutError):
    """A step or an episode ran past its wall-clock limit."""

    kind = "timeout"


class SystemicFailureError(PolicyError):
    """A run stopped early: its first episodes all failed the same way at the policy (a model server that refuses
    connections, or answers 401/403/404/422), which no further episode would change (see
    :mod:`agentgym.rollout.guard`). ``first`` is the first failure's record (a dict), ``count`` how many episodes
    failed so, ``hint`` what to check. The failed episodes' rows are written: a rerun resumes the run."""

    def __init__(self, message: str, *, first: dict | None = None, count: int = 0, hint: str | None = None):
        super().__init__(message)
        self.first, self.count, self.hint = first, count, hint


#: kind of the record in ``info["agent_failure"]``: the agent's own code broke its sandbox (a scored failure)
AGENT_CODE = "agent_code"

ERROR_KINDS = (
    "agentgym_error",
    "missing_dependency",
    "data_not_found",
    "bad_task",
    "env_crash",
    "policy_error",
    "timeout",
    AGENT_CODE,
    "sandbox_unavailable",  # AppWorld-v0: the machine lacks a sandbox layer and unsafe= does not allow it
)


@dataclass(frozen=True)
class ErrorRecord:
    """A JSON-serialisable record of a failure: what kind, where (``stage``), the message, and ``details``: facts the
    exception carries as a ``details`` dict (a failed policy request's attempts, latency and last HTTP status)."""

    kind: str
    stage: str
    message: str
    exception: str
    traceback: str = ""
    details: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def error_record(exc: BaseException, stage: str) -> ErrorRecord:
    """Wrap any exception into an :class:`ErrorRecord` (non-agentgym exceptions count as ``env_crash``)."""
    kind = exc.kind if isinstance(exc, AgentGymError) else "env_crash"
    if stage == "policy" and not isinstance(exc, AgentGymError):
        kind = "policy_error"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8))
    details = getattr(exc, "details", None)
    return ErrorRecord(kind=kind, stage=stage, message=str(exc), exception=type(exc).__name__, traceback=tb,
                       details=dict(details) if isinstance(details, dict) else None)
