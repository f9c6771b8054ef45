"""TextCraft tasks: the named splits, the task record, and loaders for task files and seeded generation.

Splits:

* ``adapt-test`` — the 200 evaluation goals of ADaPT (Prasad et al., 2024), built from the recipe files by ADaPT's
  own rule (:mod:`.adapt`: goal + the crafting commands shown to the agent; nothing to download). A file in the
  format of ``adapt_test_200.jsonl`` (``task_file=``) replaces them. Unlimited ``get`` of base items; won by crafting
  the goal.
* ``adapt-test-recorded`` — the same 200 goals as ADaPT's published run showed them (its recorded crafting commands:
  the distractors and line order that run drew; ``agentgym data fetch textcraft-adapt-recorded``). For comparisons
  prompt for prompt with that run; ``adapt-test`` needs no download and draws the distractors by the same rule.
* ``train`` / ``val`` — ``textcraft_{train,val}.jsonl`` (1,000 / 100 tasks): several target items with counts, an
  initial inventory and a gold trajectory. Task ids are ``textcraft.<split>.<line index>``: the upstream val file
  reuses train ids for different tasks (and repeats some), so its ``id`` is kept only as ``source_id``. These files
  come from another TextCraft port whose recipe graph differs in places (it keeps block un-crafting such as
  ``snow <- snow block`` and crafts torches without coal); the env keeps only the tasks whose gold trajectory
  replays under this game's rules: 952 of 1,000 train and 98 of 100 val tasks (ids keep their line index).
  Crafting in batches (k times a recipe in one command) is on by default for these splits, as in that port. Base items come only from the initial inventory (``get`` is disabled);
  won when the inventory holds every target count. The task context lists the recipes of the gold trajectory plus
  distractors, drawn with a per-task seed.
* ``gen-depth1`` .. ``gen-depth4`` — generated from a seed, **one task per goal item** of minimum crafting depth D
  (with the recipes shipped in the ``textcraft`` package: 147, 274, 112 and 11 tasks; :func:`generated_split_size`).
  The draws ``numpy.random.default_rng([D, j])``, j = 0, 1, 2, ..., each pick a goal among those items; task ``i``
  (id ``gen-d{D}-{i}``) is the i-th goal to appear, built from the draw where it first appeared: its context lists
  every recipe of its crafting tree plus up to 10 distractor recipes that share an ingredient, shuffled (ADaPT's
  construction), with that draw's generator. So the split is the sequence of seeded draws with every repeat of a goal
  dropped (the order of first appearances of i.i.d. uniform draws is a uniform random order of the items, so the
  first N tasks are a uniform sample of N goals), and ``gen-d{D}-{i}`` is the task that id named before goals
  were deduplicated for every i below the first repeat (13, 34, 18 and 4 for depths 1-4). An id past the end is
  refused with a :class:`~agentgym.errors.TaskError` that says how many tasks the split has.

  *The same task* on these splits (:func:`task_identity`) means the same targets, initial inventory and ``get``
  rule, i.e. the same win condition from the same start; the recipe lines shown (the crafting tree plus shuffled
  distractors) are presentation. Since a generated task is one goal from an empty inventory, no two ids of a
  generated split share a goal item, hence neither a first observation nor a win condition.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ...data import find_data
from ...errors import TaskError
from .recipes import CraftingGraph, Recipe, display_name, item_id

__all__ = ["TextCraftTask", "SPLITS", "load_split", "generate_task", "task_from_dict", "GENERATED_SPLITS",
           "generated_split_size", "generated_task_ids", "task_identity"]

#: split name -> task file (relative to the data root) or None for generated splits. ``adapt-test``'s tasks are
#: built from the recipes (:mod:`.adapt`); its file name is that of ADaPT's recorded run (``adapt-test-recorded``),
#: the format ``task_file=`` reads.
SPLITS: dict[str, str | None] = {
    "adapt-test": "textcraft/tasks/adapt_test_200.jsonl",
    "adapt-test-recorded": "textcraft/tasks/adapt_test_200.jsonl",
    "train": "textcraft/tasks/textcraft_train.jsonl",
    "val": "textcraft/tasks/textcraft_val.jsonl",
    "gen-depth1": None,
    "gen-depth2": None,
    "gen-depth3": None,
    "gen-depth4": None,
}
GENERATED_SPLITS = {f"gen-depth{d}": d for d in (1, 2, 3, 4)}
MAX_DISTRACTORS = 10
_GEN_ID = re.compile(r"^gen-d([1-9])-(\d+)$")


@dataclass(frozen=True)
class TextCraftTask:
    """One TextCraft episode specification.

    Attributes:
        task_id: stable identity (``adapt.test.17``, ``textcraft.train.3``, ``gen-d2-41``).
        targets: item id -> count the agent must hold to win.
        context: the crafting commands shown to the agent, in display order.
        initial_inventory: item id -> count at reset.
        allow_get: whether ``get`` may fetch base items.
        depth: minimum crafting depth of the (deepest) target.
        family: the split family, for per-family summaries.
        gold: a known-good command sequence, or empty.
    """

    task_id: str
    targets: dict[str, int]
    context: tuple[str, ...]
    initial_inventory: dict[str, int] = field(default_factory=dict)
    allow_get: bool = True
    depth: int = 0
    family: str = ""
    gold: tuple[str, ...] = ()
    source_id: str = ""

    @property
    def goal_text(self) -> str:
        if len(self.targets) == 1 and next(iter(self.targets.values())) == 1:
            return f"craft {display_name(next(iter(self.targets)))}."
        return "craft " + ", ".join(f"{n} {display_name(i)}" for i, n in self.targets.items()) + "."

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "targets": dict(self.targets), "context": list(self.context),
                "initial_inventory": dict(self.initial_inventory), "allow_get": self.allow_get,
                "depth": self.depth, "family": self.family, "gold": list(self.gold)}


def task_from_dict(d: dict, graph: CraftingGraph) -> TextCraftTask:
    """Build a task from a dict (``options={"task": {...}}``): ``targets`` or ``goal`` is required."""
    if not isinstance(d, dict):
        raise TaskError(f"a TextCraft task must be a dict, got {type(d).__name__}")
    if "targets" in d:
        targets = {item_id(k): int(v) for k, v in d["targets"].items()}
    elif "goal" in d:
        targets = {item_id(str(d["goal"]).removeprefix("craft ").rstrip(".")): 1}
    else:
        raise TaskError("a TextCraft task needs 'targets' ({item: count}) or 'goal' (an item name)")
    for t, n in targets.items():
        if not graph.is_craftable(t) and not graph.is_base(t):
            raise TaskError(f"unknown target item {display_name(t)!r}")
        if n < 1:
            raise TaskError(f"target count for {display_name(t)!r} must be >= 1, got {n}")
    context = d.get("context")
    if context is None:
        context = _context_for(targets, graph, np.random.default_rng(0))
    return TextCraftTask(
        task_id=str(d.get("task_id", "custom")), targets=targets, context=tuple(context),
        initial_inventory={item_id(k): int(v) for k, v in (d.get("initial_inventory") or {}).items()},
        allow_get=bool(d.get("allow_get", True)), depth=max(graph.depth(t) for t in targets),
        family=str(d.get("family", "custom")), gold=tuple(d.get("gold", ())))


def _distractors(tree: list[Recipe], graph: CraftingGraph, rng: np.random.Generator) -> list[Recipe]:
    uses = graph.uses()
    in_tree = set(tree)
    pool: dict[Recipe, None] = {}
    for r in tree:
        for ing, _ in r.inputs:
            cands = uses.get(ing.name, [])
            if cands:
                k = min(len(cands), MAX_DISTRACTORS)
                for j in rng.choice(len(cands), size=k, replace=False):
                    if cands[j] not in in_tree:
                        pool[cands[j]] = None
    pool_list = list(pool)
    k = min(len(pool_list), MAX_DISTRACTORS)
    return [pool_list[j] for j in sorted(rng.choice(len(pool_list), size=k, replace=False))] if k else []


def _context_for(targets: dict[str, int], graph: CraftingGraph, rng: np.random.Generator) -> list[str]:
    tree: dict[Recipe, None] = {}
    for t in targets:
        tree.update(dict.fromkeys(graph.recipe_tree(t)))
    lines = list(dict.fromkeys([r.text for r in tree] + [r.text for r in _distractors(list(tree), graph, rng)]))
    rng.shuffle(lines)
    return lines


#: The draws that look for every goal item of a depth stop after this many per item (never reached: with the shipped
#: recipes every item has appeared after 993, 1,262, 500 and 41 draws; missing one after 64 n draws has probability
#: about n e^-64).
_MAX_DRAWS_PER_ITEM = 64


@lru_cache(maxsize=16)
def _goal_draws(depth: int, items: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """(goal, draw j) for every goal item of ``items``, in the order of first appearance among the draws
    ``default_rng([depth, j]).integers(len(items))``, j = 0, 1, ..."""
    first: dict[str, int] = {}
    for j in range(_MAX_DRAWS_PER_ITEM * len(items)):
        if len(first) == len(items):
            break
        first.setdefault(items[int(np.random.default_rng([depth, j]).integers(len(items)))], j)
    if len(first) < len(items):
        raise TaskError(f"the depth-{depth} draws did not reach every goal item in {_MAX_DRAWS_PER_ITEM} per item")
    return tuple(first.items())


def _generated_pool(graph: CraftingGraph, depth: int) -> tuple[tuple[str, int], ...]:
    if depth not in (1, 2, 3, 4):
        raise TaskError(f"generated TextCraft depth must be 1..4, got {depth}")
    return _goal_draws(depth, tuple(graph.items_with_depth(depth)))


def generated_split_size(graph: CraftingGraph, depth: int) -> int:
    """How many tasks split ``gen-depth{depth}`` has: one per goal item of that minimum crafting depth."""
    return len(_generated_pool(graph, depth))


def generated_task_ids(graph: CraftingGraph, depth: int) -> list[str]:
    """Every task id of split ``gen-depth{depth}``, in order."""
    return [f"gen-d{depth}-{i}" for i in range(generated_split_size(graph, depth))]


def generate_task(graph: CraftingGraph, depth: int, index: int) -> TextCraftTask:
    """Task ``index`` of split ``gen-depth{depth}`` (deterministic in (depth, index); see the module docstring).

    Raises:
        TaskError: the depth is not 1..4, or ``index`` is negative or past the split's end.
    """
    pool = _generated_pool(graph, depth)
    if index < 0:
        raise TaskError(f"generated task index must be >= 0, got {index}")
    if index >= len(pool):
        raise TaskError(f"no task 'gen-d{depth}-{index}': TextCraft split 'gen-depth{depth}' has {len(pool)} tasks, "
                        f"one per goal item of crafting depth {depth} (gen-d{depth}-0 .. gen-d{depth}-{len(pool) - 1})")
    goal, draw = pool[index]
    rng = np.random.default_rng([depth, draw])
    rng.integers(len(pool))  # the draw that picked the goal (one of the len(pool) items); the context continues
    return TextCraftTask(task_id=f"gen-d{depth}-{index}", targets={goal: 1},
                         context=tuple(_context_for({goal: 1}, graph, rng)), depth=depth,
                         family=f"depth{depth}")


def task_identity(task: TextCraftTask) -> dict:
    """What makes ``task`` the task it is, apart from its id and the presentation of its recipe lines: its targets,
    initial inventory and ``get`` rule (the win condition and the start). Two tasks with equal identities are the
    same task."""
    return {"targets": sorted(task.targets.items()), "initial_inventory": sorted(task.initial_inventory.items()),
            "allow_get": task.allow_get}


def _adapt_task(row: dict, graph: CraftingGraph) -> TextCraftTask:
    goal = item_id(row["goal"].strip().removeprefix("craft ").rstrip("."))
    return TextCraftTask(task_id=row["id"], targets={goal: 1}, context=tuple(row["crafting_commands"]),
                         depth=graph.depth(goal), family=f"depth{graph.depth(goal)}")


def _gold_commands(traj: list[dict], graph: CraftingGraph, inventory: dict[str, int]) -> tuple[str, ...]:
    """One batched craft command per gold step ``{target: [item, k], ingredients: {...}, result_count}``.

    The step crafts k times at once (``craft 6 andesite using 3 diorite, 3 cobblestone``), which the env accepts
    with ``allow_batch_craft`` (the default on these splits). A generic ingredient written ``tag:planks`` becomes the
    member of that tag the trajectory holds (initial inventory or crafted earlier).
    """
    out = []
    held = list(inventory)
    for step in traj:
        if step.get("action") != "craft":
            raise TaskError(f"unsupported gold step {step!r}")
        item, k = step["target"][0], int(step["target"][1])
        if k < 1 or any(n % k for n in step["ingredients"].values()) or step["result_count"] % k:
            raise TaskError(f"gold step {step!r} is not k identical crafts")
        ins = []
        for i, n in step["ingredients"].items():
            if i.startswith("tag:"):
                members = [h for h in held if graph.item_tag.get(h) == item_id(i[4:])]
                i = members[-1] if members else i
            ins.append(f"{n} {display_name(item_id(i))}")
        held.append(item_id(item))
        out.append(f"craft {step['result_count']} {display_name(item_id(item))} using {', '.join(ins)}")
    return tuple(out)


def _inventory_task(row: dict, graph: CraftingGraph, task_id: str) -> TextCraftTask:
    misc = row["misc"]
    targets = {item_id(k): int(v) for k, v in misc["target_items"].items()}
    gold = _gold_commands(misc.get("gold_trajectory", []), graph, misc["initial_inventory"])
    # The context: recipes the gold trajectory uses, written generically as the graph spells them, + distractors.
    rng = np.random.default_rng(list(task_id.encode()))
    used: dict[Recipe, None] = {}
    for cmd in dict.fromkeys(gold):
        out = item_id(cmd.split(" using ")[0].split(" ", 2)[2])
        for r in graph.recipes.get(out, []):
            used[r] = None
    lines = list(dict.fromkeys([r.text for r in used] + [r.text for r in _distractors(list(used), graph, rng)]))
    rng.shuffle(lines)
    return TextCraftTask(task_id=task_id, source_id=str(row.get("id", "")), targets=targets, context=tuple(lines),
                         initial_inventory={item_id(k): int(v) for k, v in misc["initial_inventory"].items()},
                         allow_get=False, depth=max(graph.depth(t) for t in targets),
                         family=f"depth{max(graph.depth(t) for t in targets)}", gold=gold)


def load_split(split: str, graph: CraftingGraph, *, path: str | Path | None = None) -> list[TextCraftTask]:
    """All tasks of a file-backed split (``adapt-test``, ``adapt-test-recorded``, ``train``, ``val``), in file order. ``adapt-test`` without
    ``path`` is built from ``graph`` by ADaPT's rule (:func:`.adapt.adapt_test_rows`)."""
    if split not in SPLITS or SPLITS[split] is None:
        raise TaskError(f"{split!r} is not a file-backed TextCraft split; choose from "
                        f"{[s for s, f in SPLITS.items() if f]}")
    if split == "adapt-test" and path is None:
        from .adapt import adapt_test_rows

        return [_adapt_task(row, graph) for row in adapt_test_rows(graph)]
    file = find_data(SPLITS[split], explicit=path)
    tasks = []
    with open(file, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskError(f"{file}:{n}: not valid JSON: {e}") from e
            if "crafting_commands" in row:
                tasks.append(_adapt_task(row, graph))
            else:
                # The upstream val file reuses train ids (and repeats some), so ids are ours: split + line index.
                tasks.append(_inventory_task(row, graph, f"textcraft.{split}.{len(tasks)}"))
    return tasks


def parse_generated_id(task_id: str) -> tuple[int, int] | None:
    """``"gen-d3-17"`` -> ``(3, 17)``; None for other ids."""
    m = _GEN_ID.match(task_id)
    return (int(m.group(1)), int(m.group(2))) if m else None
