"""τ²-bench's reward for one airline episode.

``reward = Π over the task's reward_basis`` of:

* ``DB`` — 1 when the episode's final database equals the database obtained by replaying the task's gold actions
  on the initial database (τ² compares hashes of the two), else 0;
* ``COMMUNICATE`` — 1 when every ``communicate_info`` string occurs in some agent message to the user (τ²'s
  English check: case-insensitive substring of the message with its commas removed), else 0;
* ``ACTION`` — 1 when every gold action was called with the same arguments (restricted to ``compare_args``).

τ² scores 0 when the conversation did not end by a stop of the agent or the user (e.g. the turn budget ran out);
:func:`evaluate` does so too, while still reporting every component. The natural-language assertions need an LLM
judge: they are listed, never scored (none of the airline tasks has them in its reward basis).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from .db import EpisodeDB, canonical_json
from .tasks import AirlineTask, Domain, GoldAction
from .tools import call_tool

__all__ = ["RewardInfo", "ToolCallRecord", "evaluate", "gold_digest", "communicate_checks", "action_checks",
           "STOP_REASONS"]

#: Termination reasons that τ² scores; any other end scores 0.
STOP_REASONS = ("agent_stop", "user_stop", "user_transfer", "user_out_of_scope")


@dataclass(frozen=True)
class ToolCallRecord:
    """A tool call the agent made (validated arguments; ``ok`` is False for a refused call)."""

    name: str
    arguments: dict
    ok: bool


@dataclass
class RewardInfo:
    """The reward and its components (``to_dict`` is what ``info["reward_info"]`` carries)."""

    reward: float
    reward_basis: list[str]
    termination_reason: str
    db_match: bool
    db_reward: float
    communicate_reward: float
    action_reward: float
    communicate_checks: list[dict] = field(default_factory=list)
    action_checks: list[dict] = field(default_factory=list)
    nl_assertions: list[str] = field(default_factory=list)
    nl_assertions_scored: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def gold_digest(domain: Domain, task: AirlineTask) -> str:
    """The digest of the gold database of ``task`` (gold actions replayed on a fresh DB), cached per domain."""
    # Keyed by the gold actions themselves: a custom task may reuse a task id with other actions.
    key = canonical_json([[a.name, a.arguments] for a in task.gold_actions])
    cached = domain._gold_digests.get(key)
    if cached is None:
        db = EpisodeDB(domain.db)
        for a in task.gold_actions:
            # As in τ²: a gold call that fails is skipped (it changed nothing).
            call_tool(db, a.name, a.arguments)
        cached = db.digest()
        domain._gold_digests[key] = cached
    return cached


def communicate_checks(info: Sequence[str], agent_messages: Sequence[str]) -> list[dict]:
    out = []
    for s in info:
        met = any(s.lower() in m.lower().replace(",", "") for m in agent_messages)
        out.append({"info": s, "met": met})
    return out


def _args_match(gold: GoldAction, args: dict) -> bool:
    keys = gold.compare_args if gold.compare_args is not None else tuple(gold.arguments)
    pick_g = {k: gold.arguments.get(k) for k in keys}
    pick_p = {k: args.get(k) for k in keys}
    return canonical_json(pick_g) == canonical_json(pick_p)


def action_checks(gold: Sequence[GoldAction], calls: Sequence[ToolCallRecord]) -> list[dict]:
    """τ²'s action check: each gold action matched by some call of the same name and compared arguments."""
    return [{"action_id": g.action_id, "name": g.name,
             "matched": any(c.name == g.name and _args_match(g, c.arguments) for c in calls)} for g in gold]


def evaluate(domain: Domain, task: AirlineTask, db: EpisodeDB, agent_messages: Sequence[str],
             calls: Sequence[ToolCallRecord], termination_reason: str) -> RewardInfo:
    """Score a finished episode (see the module docstring)."""
    db_match = db.digest() == gold_digest(domain, task)
    comm = communicate_checks(task.communicate_info, agent_messages)
    acts = action_checks(task.gold_actions, calls)
    db_r = 1.0 if db_match else 0.0
    comm_r = 1.0 if all(c["met"] for c in comm) else 0.0
    act_r = 1.0 if all(a["matched"] for a in acts) else 0.0
    reward = 1.0
    basis = list(task.reward_basis)
    if "DB" in basis:
        reward *= db_r
    if "COMMUNICATE" in basis:
        reward *= comm_r
    if "ACTION" in basis:
        reward *= act_r
    if termination_reason not in STOP_REASONS:
        reward = 0.0
    return RewardInfo(reward=reward, reward_basis=basis, termination_reason=termination_reason, db_match=db_match,
                      db_reward=db_r, communicate_reward=comm_r, action_reward=act_r, communicate_checks=comm,
                      action_checks=acts, nl_assertions=list(task.nl_assertions),
                      nl_assertions_scored=False)
