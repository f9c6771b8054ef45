"""An oracle that plans over the crafting graph.

``plan(graph, targets, inventory, allow_get)`` returns the full list of commands that reaches every target count
from ``inventory``. It works depth-first: to hold ``n`` of an item it fetches it (base item) or picks the
shallowest recipe, resolves generic (tag) ingredients to a concrete variant — one already held if possible, else
the shallowest, then alphabetical — secures every ingredient, and crafts. Securing one ingredient can consume
another (``stick`` eats ``planks``), so the ingredients are re-checked until all are held at once; the graph is
acyclic, so this converges. For tasks that give a gold trajectory and no ``get``, the env replays the gold
commands instead (inventory-limited planning is a search problem the gold trajectory already solved).
"""

from __future__ import annotations

from collections import Counter

from ...errors import TaskError
from .recipes import CraftingGraph, Ingredient, Recipe, display_name

__all__ = ["plan", "PlanError"]


class PlanError(TaskError):
    """The planner found no way to reach the targets (e.g. a base item is needed but ``get`` is disabled)."""


def _choose_recipe(graph: CraftingGraph, item: str) -> Recipe:
    recipes = graph.recipes.get(item)
    if not recipes:
        raise PlanError(f"no recipe crafts {display_name(item)}")
    return min(recipes, key=lambda r: (max(graph.depth(i.name) for i, _ in r.inputs), sum(n for _, n in r.inputs)))


def _resolve(graph: CraftingGraph, ing: Ingredient, need: int, inv: Counter) -> str:
    if not ing.is_tag:
        return ing.name
    members = graph.tag_members(ing.name)
    if not members:
        raise PlanError(f"no item carries the tag {display_name(ing.name)}")
    held = [m for m in members if inv[m] >= need]
    if held:
        return held[0]
    return min(members, key=lambda m: (graph.depth(m), m))


def plan(graph: CraftingGraph, targets: dict[str, int], inventory: dict[str, int], *,
         allow_get: bool = True, max_commands: int = 10_000) -> list[str]:
    """Commands that take ``inventory`` to one holding every target count."""
    inv: Counter = Counter(inventory)
    cmds: list[str] = []

    def ensure(item: str, n: int, depth: int) -> None:
        if depth > 64 or len(cmds) > max_commands:
            raise PlanError("plan too deep or too long")
        while inv[item] < n:
            if not graph.recipes.get(item):
                if not allow_get or not graph.is_base(item):
                    raise PlanError(f"need {n - inv[item]} more {display_name(item)} and cannot fetch it")
                cmds.append(f"get {n - inv[item]} {display_name(item)}")
                inv[item] = n
                return
            recipe = _choose_recipe(graph, item)
            concrete = [(_resolve(graph, ing, c, inv), c) for ing, c in recipe.inputs]
            for _ in range(len(concrete) + 2):
                for it, c in concrete:
                    ensure(it, c, depth + 1)
                if all(inv[it] >= c for it, c in concrete):
                    break
            else:
                raise PlanError(f"could not secure the ingredients of {display_name(item)}")
            for it, c in concrete:
                inv[it] -= c
            inv[item] += recipe.count
            ins = ", ".join(f"{c} {display_name(it)}" for it, c in concrete)
            cmds.append(f"craft {recipe.count} {display_name(item)} using {ins}")

    for _ in range(len(targets) + 2):  # a later target's sub-tree may consume an earlier target
        for t, n in targets.items():
            ensure(t, n, 0)
        if all(inv[t] >= n for t, n in targets.items()):
            return cmds
    raise PlanError("targets consume each other; no plan found")
