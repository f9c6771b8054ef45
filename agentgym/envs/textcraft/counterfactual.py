"""Counterfactual TextCraft worlds: the game's recipe book with the item words permuted and the shown counts
redrawn, an explicit opt-in training mode (``TextCraft-v0(counterfactual={...})``), never a way to score.

Why it exists. In TextCraft a goal's recipe never changes, so reinforcement learning on a fixed set of goals rewards
recalling each goal's actions as much as reading its recipe line, and recall does not transfer to goals the policy
never saw. In a counterfactual world each episode's names and counts are new, so only reading the context wins.

What an episode is. At reset one random bijection of the words of the game's item and tag ids is drawn with the
env's ``np_random``: the words of the names the episode shows (its goal and recipe lines) go to words drawn from a
pool (the words of the names that the training tasks' contexts show, so that a small model's vocabulary holds them),
the other words to the remaining ones. Every id of the crafting graph is renamed word by word (``iron_bars`` /
``iron_ingot`` may become ``dye_sand`` / ``dye_planks``: names keep the game's pattern of shared words), and, with
``counts``, every recipe the context shows gets an output count and ingredient counts drawn from the game's own
counts. The episode is then played by the canonical rules on that renamed graph: ADaPT's step, its observations and
its quirks, only over other names and counts (a name typed from the real game is whatever the renamed world calls
it, usually no item). No name the episode shows is an excluded name (the held-out goal items).

Canonical rules only: the lenient rules fill demoted tags from Minecraft's vanilla tags, which are keyed by the real
names. The mode is part of the env's :meth:`~agentgym.envs.textcraft.env.TextCraftEnv.run_identity`, so every
results row says it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import TaskError
from .recipes import CraftingGraph, Ingredient, Recipe, item_id
from .tasks import TextCraftTask

__all__ = ["CounterfactualConfig", "context_names", "counterfactual_world", "word_pool", "game_counts"]

_LINE = re.compile(r"^craft (\d+) (.+?) using (.+)$")
_DRAWS = 100  # name draws before giving up on avoiding the excluded names


@dataclass(frozen=True)
class CounterfactualConfig:
    """The counterfactual mode (module docstring).

    Attributes:
        exclude_tasks: task ids of the split whose goal items are never shown (e.g. the held-out set); the word pool
            is the words of the names shown by the split's *other* tasks, less words only excluded names have.
        counts: redraw the counts of the recipes the context shows (else the game's counts are kept).
    """

    exclude_tasks: tuple[str, ...] = ()
    counts: bool = True

    @classmethod
    def from_arg(cls, value) -> "CounterfactualConfig | None":
        """``None``/``False`` (off), ``True`` (nothing excluded), a dict of the fields, or a config."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"counterfactual must be None, a bool or a dict, got {type(value).__name__}")
        unknown = set(value) - {"exclude_tasks", "counts"}
        if unknown:
            raise ValueError(f"counterfactual: unknown keys {sorted(unknown)} (known: 'exclude_tasks', 'counts')")
        return cls(exclude_tasks=tuple(str(t) for t in value.get("exclude_tasks", ())),
                   counts=bool(value.get("counts", True)))

    def identity(self) -> dict:
        """For the run identity: the excluded set by size and hash (a results row stays short)."""
        ids = sorted(self.exclude_tasks)
        digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]
        return {"excluded_tasks": len(ids), "excluded_sha256": digest, "counts": self.counts}


def context_names(task: TextCraftTask) -> list[str]:
    """The item and tag ids a task shows (its targets and every name of its recipe lines), first-seen order."""
    names = list(task.targets)
    for line in task.context:
        m = _LINE.match(line)
        if m is None:
            raise TaskError(f"counterfactual: not a recipe line: {line!r}")
        names.append(item_id(m.group(2)))
        names += [item_id(p.split(" ", 1)[1]) for p in m.group(3).split(", ")]
    return list(dict.fromkeys(names))


def _words(iid: str) -> list[str]:
    return iid.split("_")


def _vocabulary(graph: CraftingGraph) -> list[str]:
    return sorted({w for x in graph.items | graph.tags for w in _words(x)})


def counterfactual_world(graph: CraftingGraph, task: TextCraftTask, rng: np.random.Generator, *,
                         pool: Sequence[str], exclude: frozenset[str], counts: bool,
                         item_counts: Sequence[int], ingredient_counts: Sequence[int]
                         ) -> tuple[CraftingGraph, TextCraftTask, dict[str, str]]:
    """The renamed graph and task of one episode and the word bijection (game word -> shown word) that renamed
    them (module docstring). ``pool``: the words the shown names' words go to; ``exclude``: ids never shown;
    ``item_counts`` / ``ingredient_counts``: what redrawn counts are drawn from."""
    shown = context_names(task)
    own = sorted({w for x in shown for w in _words(x)})
    vocab = _vocabulary(graph)
    pool = sorted(set(pool))
    if len(pool) < len(own):
        raise TaskError(f"counterfactual: the word pool has {len(pool)} words, the task shows {len(own)}")
    for _ in range(_DRAWS):
        picked = [pool[i] for i in rng.permutation(len(pool))[:len(own)]]
        perm = dict(zip(own, picked))
        new = {x: "_".join(perm[w] for w in _words(x)) for x in shown}
        if not set(new.values()) & exclude:
            break
    else:
        raise TaskError(f"counterfactual: {_DRAWS} draws of names for {task.task_id} all show an excluded name")
    # Complete the bijection: the words the episode does not show go to the words not yet taken, in a random
    # order, so that a name typed from outside the context is some renamed item or (usually) no item at all.
    rest_from = [w for w in vocab if w not in perm]
    rest_to = [w for w in sorted(set(vocab) | set(pool)) if w not in set(picked)]
    rest_to = [rest_to[i] for i in rng.permutation(len(rest_to))[:len(rest_from)]]
    perm.update(zip(rest_from, rest_to))

    def rn(iid: str) -> str:
        return "_".join(perm[w] for w in _words(iid))

    by_text = {r.text: r for rs in graph.recipes.values() for r in rs}
    redrawn: dict[tuple[str, str], Recipe] = {}  # (output, source) -> the renamed recipe with new counts
    for line in task.context:
        r = by_text.get(line)
        if r is None:
            raise TaskError(f"counterfactual: the recipe line {line!r} of {task.task_id} is no recipe of the graph")
        if counts and (r.output, r.source) not in redrawn:
            redrawn[(r.output, r.source)] = Recipe(
                rn(r.output), int(rng.choice(item_counts)),
                tuple((Ingredient(rn(i.name), i.is_tag), int(rng.choice(ingredient_counts))) for i, _ in r.inputs),
                r.source)

    def rn_recipe(r: Recipe) -> Recipe:
        hit = redrawn.get((r.output, r.source))
        if hit is not None:
            return hit
        return Recipe(rn(r.output), r.count, tuple((Ingredient(rn(i.name), i.is_tag), n) for i, n in r.inputs),
                      r.source)

    renamed = {id(r): rn_recipe(r) for rs in graph.recipes.values() for r in rs}
    world = CraftingGraph(
        recipes={rn(k): [renamed[id(r)] for r in rs] for k, rs in graph.recipes.items()},
        tag_recipes={rn(k): [renamed[id(r)] for r in rs] for k, rs in graph.tag_recipes.items()},
        item_tag={rn(k): rn(v) for k, v in graph.item_tag.items()},
        items={rn(x) for x in graph.items}, tags={rn(x) for x in graph.tags})
    context = tuple(renamed[id(by_text[line])].text for line in task.context)
    new_task = TextCraftTask(task_id=task.task_id, targets={rn(k): v for k, v in task.targets.items()},
                             context=context, initial_inventory={rn(k): v for k, v in task.initial_inventory.items()},
                             allow_get=task.allow_get, depth=task.depth, family=task.family, gold=(),
                             source_id=task.source_id)
    return world, new_task, perm


def word_pool(tasks: Sequence[TextCraftTask], excluded: Sequence[TextCraftTask]) -> tuple[list[str], frozenset[str]]:
    """The word pool (words of the names ``tasks`` show that are not excluded names) and the excluded ids (the
    goal items of ``excluded``)."""
    exclude = frozenset(t for task in excluded for t in task.targets)
    names = {x for task in tasks for x in context_names(task)} - exclude
    return sorted({w for x in names for w in _words(x)}), exclude


def game_counts(graph: CraftingGraph) -> tuple[list[int], list[int]]:
    """Every recipe's output count and every ingredient count of the graph (what redrawn counts are drawn from)."""
    recipes = [r for rs in graph.recipes.values() for r in rs]
    return [r.count for r in recipes], [n for r in recipes for _, n in r.inputs]

