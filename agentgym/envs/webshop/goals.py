"""WebShop goals: synthetic and human goals built as the original does, the global list and its splits.

**Synthetic goals** (WebShop ``get_synthetic_goals``): for every product with a synthetic instruction (415 of the
1,000), one draw of the price bound, then one goal per combination of its option values (option names sorted),
6,910 goals in all. **Human goals** (``get_human_goals``): one per human instruction with attributes (13 in the
1,000-product setting), with a price bound drawn per instruction.

**Random-number order** (what makes a goal list reproducible): the generator is seeded with ``seed``, draws one
``uniform(lo, hi)`` per ranged-price product in catalogue order (the session price of that product), then the price
bounds (one ``sample(range, 2)`` per synthetic product / human instruction, in order), is re-seeded with ``seed`` and
shuffles the list. This is verl-agent's order (``random.seed(seed)`` at env construction and before the shuffle), so
``goal_list(catalog, seed)`` equals the goal list of a verl-agent WebShop worker built with ``seed``; it uses its own
``random.Random``, never the global one.

**Splits** (of the seed-0 list, :data:`SPLIT_RANGES`): ``test`` = goals 0-499, ``train`` = 500-6,909 less the
goals whose content (:func:`goal_content`: asin, instruction, attributes, options, price bound) equals a test goal's,
``all`` = every goal. The indices stay those of the global list (``ws0-k`` is goal ``k`` whatever the split), so the
exclusion only leaves ids out of ``train``. It is needed because WebShop's goal list repeats itself: a product whose
option list repeats a value (B099WH1RTM's size ``12x18 inch``, B08G14B779's ``26 inch x 10 inch``) yields the same
goal twice, 9 pairs in the seed-0 list; two pairs straddle the split (test goals 33 and 85 = goals 4,933 and 5,641),
so ``train`` has 6,408 goals. The other 7 pairs lie inside ``train`` and stay, as in WebShop (those goals count
twice there). Test and train still share products (about 128 products make up the first 500 goals).
verl-agent's own "test" is a per-worker reshuffle (train workers seed ``0 + i // group_n``, validation
workers ``1000 + i``) that overlaps training; pass ``goal_seed`` to the env to reproduce one worker's list, and see
:func:`verl_agent_worker_seed`, :func:`verl_agent_goal_indices` and the env's ``verl-agent-val`` split. (This is
verl-agent at ``796ed310``, the version behind the GiGPO numbers; later verl-agent versions hand worker 0's list to
every worker, i.e. ``goal_seed`` = the env seed for all.)
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ...errors import TaskError
from .catalog import Catalog

__all__ = ["WebShopGoal", "PRICE_RANGE", "product_prices", "synthetic_goals", "human_goals", "goal_list",
           "SPLIT_RANGES", "split_indices", "verl_agent_worker_seed", "verl_agent_goal_indices",
           "verl_agent_val_tasks", "session_prices", "get_goal", "goal_content", "NO_PRICE_BOUND"]

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
NO_PRICE_BOUND = 1000000
#: split -> (first, last + 1) goal index of the synthetic list; None = to the end (``train`` then drops the goals
#: that repeat a test goal, see the module docstring).
SPLIT_RANGES: dict[str, tuple[int, int | None]] = {"test": (0, 500), "train": (500, None), "all": (0, None)}


@dataclass(frozen=True, eq=False)
class WebShopGoal:
    """One shopping goal.

    ``goal_options`` is a dict option name -> value for synthetic goals and a list of value strings for human
    goals (WebShop keeps the two shapes, and the reward treats them differently). ``price_upper`` is
    :data:`NO_PRICE_BOUND` when the product is too expensive for a bound (no price text then).
    """

    asin: str
    instruction: str
    attributes: tuple[str, ...]
    goal_options: Any
    price_upper: float
    kind: str = "synthetic"
    weight: float = 1.0
    seed: int = 0
    index: int = -1

    @property
    def task_id(self) -> str:
        prefix = "ws" if self.kind == "synthetic" else "wsh"
        return f"{prefix}{self.seed}-{self.index}"

    def to_dict(self) -> dict:
        opts = dict(self.goal_options) if isinstance(self.goal_options, dict) else list(self.goal_options)
        return {"asin": self.asin, "instruction": self.instruction, "attributes": list(self.attributes),
                "goal_options": opts, "price_upper": self.price_upper, "kind": self.kind, "seed": self.seed,
                "index": self.index}


def product_prices(catalog: Catalog, rng: random.Random) -> dict[str, float]:
    """WebShop ``generate_product_prices``: the single price, ``uniform(lo, hi)`` for a range (drawn in catalogue
    order), 100.0 when there is none."""
    prices = {}
    for p in catalog.products:
        if not p.pricing:
            prices[p.asin] = 100.0
        elif len(p.pricing) == 1:
            prices[p.asin] = p.pricing[0]
        else:
            prices[p.asin] = rng.uniform(*p.pricing[:2])
    return prices


def _price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        _, upper = sorted(rng.sample(price_range, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return NO_PRICE_BOUND, ""


def synthetic_goals(catalog: Catalog, prices: dict[str, float], rng: random.Random) -> list[WebShopGoal]:
    """WebShop ``get_synthetic_goals`` (unshuffled, unnumbered)."""
    raw: list[dict] = []
    counts: dict[str, int] = defaultdict(int)
    for p in catalog.products:
        if p.instruction_text is None:
            continue
        attributes = tuple(p.instruction_attributes or ())
        if not attributes:
            raise TaskError(f"product {p.asin} has an instruction but no instruction attributes")
        upper, price_text = _price_bound(prices[p.asin], rng)
        names = sorted(p.options)
        for combo in itertools.product(*(p.options[n] for n in names)):
            goal_options = dict(zip(names, combo))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            raw.append({"asin": p.asin, "instruction": f"{p.instruction_text}{option_text}{price_text}",
                        "attributes": attributes, "price_upper": upper, "goal_options": goal_options})
            for a in attributes:
                counts[a] += 1
    return [WebShopGoal(**g, kind="synthetic",
                        weight=sum(1.0 / counts[a] for a in g["attributes"]) / len(g["attributes"]))
            for g in raw]


def human_goals(catalog: Catalog, prices: dict[str, float], rng: random.Random) -> list[WebShopGoal]:
    """WebShop ``get_human_goals`` (unshuffled, unnumbered): instructions with no attributes are skipped."""
    goals = []
    for p in catalog.products:
        for ins in p.human_instructions:
            attributes = tuple(ins.get("instruction_attributes") or ())
            if not attributes:
                continue
            upper, price_text = _price_bound(prices[p.asin], rng)
            goals.append(WebShopGoal(asin=p.asin, instruction=ins["instruction"].strip(".") + price_text,
                                     attributes=attributes, goal_options=list(ins.get("instruction_options") or []),
                                     price_upper=upper, kind="human", weight=1.0))
    return goals


@lru_cache(maxsize=16)
def _goal_list_cached(catalog: Catalog, seed: int, kind: str) -> tuple[tuple[WebShopGoal, ...], dict[str, float]]:
    rng = random.Random(seed)
    prices = product_prices(catalog, rng)
    goals = synthetic_goals(catalog, prices, rng) if kind == "synthetic" else human_goals(catalog, prices, rng)
    rng.seed(seed)
    rng.shuffle(goals)
    numbered = tuple(WebShopGoal(asin=g.asin, instruction=g.instruction, attributes=g.attributes,
                                 goal_options=g.goal_options, price_upper=g.price_upper, kind=g.kind,
                                 weight=g.weight, seed=seed, index=i) for i, g in enumerate(goals))
    return numbered, prices


def goal_list(catalog: Catalog, seed: int = 0, kind: str = "synthetic") -> tuple[tuple[WebShopGoal, ...],
                                                                               dict[str, float]]:
    """(the shuffled goal list, the session prices) of a WebShop built with ``seed`` (cached)."""
    if kind not in ("synthetic", "human"):
        raise TaskError(f"goal kind must be 'synthetic' or 'human', got {kind!r}")
    return _goal_list_cached(catalog, int(seed), kind)


@lru_cache(maxsize=256)
def session_prices(catalog: Catalog, seed: int) -> dict[str, float]:
    """The session prices of a WebShop built with ``seed`` (the first draws of its generator; no goals needed)."""
    return product_prices(catalog, random.Random(seed))


@lru_cache(maxsize=8192)
def get_goal(catalog: Catalog, seed: int, index: int, kind: str = "synthetic") -> WebShopGoal:
    """Goal ``index`` of the ``seed`` list (kept after the list itself leaves the cache)."""
    goals = goal_list(catalog, seed, kind)[0]
    if not 0 <= index < len(goals):
        raise TaskError(f"no {kind} goal {index} in the seed-{seed} list ({len(goals)} goals)")
    return goals[index]


def goal_content(goal: WebShopGoal) -> tuple:
    """What makes two goals the same task: asin, instruction, attributes, options and price bound (not the index)."""
    opts = goal.goal_options
    opts = tuple(sorted(opts.items())) if isinstance(opts, dict) else tuple(opts)
    return goal.asin, goal.instruction, goal.attributes, opts, goal.price_upper


@lru_cache(maxsize=64)
def split_indices(split: str, catalog: Catalog, seed: int = 0) -> tuple[int, ...]:
    """The goal indices of a split of the ``seed`` synthetic list; ``train`` leaves out goals equal in content to a
    test goal, so that test is held out (module docstring)."""
    if split not in SPLIT_RANGES:
        raise TaskError(f"unknown WebShop split {split!r}; choose from {sorted(SPLIT_RANGES) + ['human']}")
    goals = goal_list(catalog, seed)[0]
    lo, hi = SPLIT_RANGES[split]
    indices = range(lo, len(goals) if hi is None else min(hi, len(goals)))
    if split != "train":
        return tuple(indices)
    lo_test, hi_test = SPLIT_RANGES["test"]
    test = {goal_content(g) for g in goals[lo_test:hi_test]}
    return tuple(i for i in indices if goal_content(goals[i]) not in test)


def verl_agent_worker_seed(worker: int, *, validation: bool = False, group_n: int = 8, env_seed: int = 0) -> int:
    """The goal seed of verl-agent's WebShop worker ``worker``: ``env_seed + worker // group_n`` for training,
    ``1000 + worker`` for validation. Train groups draw goal indices from 500-6,909 of that worker's list, validation
    from 0-499 (``np.random.RandomState(seed).choice``), so with ``goal_seed`` set this way the env plays the same
    goals as that worker."""
    return 1000 + worker if validation else env_seed + worker // group_n


def verl_agent_goal_indices(seed: int, env_num: int, *, validation: bool, group_n: int = 1, n_goals: int = 6910,
                            rounds: int = 1) -> list[list[int]]:
    """The goal indices verl-agent's WebShop env hands its workers at each of ``rounds`` resets: a
    ``np.random.RandomState(seed)`` draws ``env_num`` distinct indices from 0-499 (validation) or 500-6,909
    (training) per reset, each repeated ``group_n`` times. Worker ``i`` plays index ``[i]`` of its own goal list
    (:func:`verl_agent_worker_seed`)."""
    import numpy as np

    rng = np.random.RandomState(seed)
    pool = range(500) if validation else range(500, n_goals)
    return [np.repeat(rng.choice(pool, size=env_num, replace=False), group_n).tolist() for _ in range(rounds)]


def verl_agent_val_tasks(val_batch_size: int = 128, env_seed: int = 0) -> list[tuple[int, int]]:
    """(goal seed, goal index) of verl-agent's first validation batch: worker ``i`` (seed ``env_seed + 1000 + i``)
    plays index ``i`` of ``RandomState(env_seed + 1000).choice(range(500), val_batch_size, replace=False)``."""
    seed = env_seed + 1000
    idx = verl_agent_goal_indices(seed, val_batch_size, validation=True)[0]
    return [(seed + i, k) for i, k in enumerate(idx)]
