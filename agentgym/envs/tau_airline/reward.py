"""τ²-bench's reward for one airline episode (``tau2/evaluator``: ``evaluate_simulation`` with ``ALL``).

``reward = Π over the task's reward_basis`` of:

* ``DB`` — 1 when the episode's final database equals the database obtained by replaying the task's gold actions
  on the initial database (τ² compares hashes of the two; a gold action that fails is skipped), else 0. When the
  criteria list neither actions nor env assertions (``null``), τ² skips the comparison: 1;
* ``COMMUNICATE`` — 1 when every ``communicate_info`` string occurs in some assistant message with text (τ²'s
  check: the lower-cased string is a substring of the lower-cased message with its commas removed; the fixed
  greeting counts as an assistant message, as it does in τ²'s trajectory), else 0;
* ``ACTION`` — 1 when every gold action is matched by some tool call of the episode, any call the agent made,
  including refused and invalid ones, as τ² collects every tool call of the trajectory. τ²'s comparison
  (``Action.compare_with_tool_call``): same name, then the keys in ``compare_args``, or when that is unset the
  keys of *the agent's call*, compared with Python's ``==`` (so ``2 == 2.0``, and a call with no arguments
  matches any gold action of its name);
* ``ENV_ASSERTION`` — 1 (no airline task has env assertions; a task with some is refused at load).

τ² scores 0 when the conversation did not end by a stop of the agent or the user (the turn budget ran out, too
many tool errors); :func:`evaluate` does so too, while still reporting every component. A task without evaluation
criteria scores 1. The natural-language assertions need an LLM judge: they are listed, never scored (no airline task
has them in its reward basis).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

from .db import EpisodeDB, canonical_json
from .tasks import AirlineTask, Domain, GoldAction
from .tools import call_tool
from .user import AGENT_GREETING

__all__ = ["RewardInfo", "ToolCallRecord", "evaluate", "gold_digest", "communicate_checks", "action_checks",
           "action_matches", "STOP_REASONS"]

#: Termination reasons that τ² scores (its AGENT_STOP and USER_STOP); any other end scores 0.
STOP_REASONS = ("agent_stop", "user_stop", "user_transfer", "user_out_of_scope")


@dataclass(frozen=True)
class ToolCallRecord:
    """A tool call the agent made: its name and its arguments as sent; ``ok`` is False for a refused call."""

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
    key = canonical_json([[a.name, a.arguments, a.requestor] for a in task.gold_actions])
    cached = domain._gold_digests.get(key)
    if cached is None:
        db = EpisodeDB(domain.db)
        for a in task.gold_actions:
            # As in τ²: a gold call that fails changes what it changed before failing and is otherwise skipped; a
            # user-side action fails (the airline domain has no user tools).
            if a.requestor == "assistant":
                call_tool(db, a.name, a.arguments)
        cached = db.digest()
        domain._gold_digests[key] = cached
    return cached


def communicate_checks(info: Sequence[str], agent_messages: Sequence[str]) -> list[dict]:
    """τ²'s check over the assistant's text messages (the greeting first, then the agent's messages)."""
    messages = [AGENT_GREETING, *agent_messages]
    return [{"info": s, "met": any(s.lower() in m.lower().replace(",", "") for m in messages)} for s in info]


def action_matches(gold: GoldAction, call: ToolCallRecord) -> bool:
    """τ²'s ``Action.compare_with_tool_call``."""
    if gold.name != call.name:
        return False
    compare_args = call.arguments.keys() if gold.compare_args is None else gold.compare_args
    if len(compare_args) == 0:
        return True
    tool_args = {k: v for k, v in call.arguments.items() if k in compare_args}
    action_args = {k: v for k, v in gold.arguments.items() if k in compare_args}
    return tool_args == action_args


def action_checks(gold: Sequence[GoldAction], calls: Sequence[ToolCallRecord]) -> list[dict]:
    """τ²'s action check: each gold action matched by some call of the episode (see the module docstring)."""
    return [{"action_id": g.action_id, "name": g.name, "matched": any(action_matches(g, c) for c in calls)}
            for g in gold]


def evaluate(domain: Domain, task: AirlineTask, db: EpisodeDB, agent_messages: Sequence[str],
             calls: Sequence[ToolCallRecord], termination_reason: str) -> RewardInfo:
    """Score a finished episode (see the module docstring)."""
    db_match = (not task.db_check) or db.digest() == gold_digest(domain, task)
    comm = communicate_checks(task.communicate_info, agent_messages)
    acts = action_checks(task.gold_actions, calls)
    db_r = 1.0 if db_match else 0.0
    comm_r = 1.0 if all(c["met"] for c in comm) else 0.0
    act_r = 1.0 if all(a["matched"] for a in acts) else 0.0
    reward = 1.0
    basis = list(task.reward_basis)
    if task.has_criteria:
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
