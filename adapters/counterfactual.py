"""Counterfactual TextCraft transcripts for the warm start: the oracle's transcripts with the item words permuted
and the counts redrawn, so that recalling a goal's recipe is wrong and only reading the context gives the actions.

Why it exists. In TextCraft a goal's recipe never changes, so a small model trained from scratch on the oracle's
transcripts of its training goals learns "goal -> actions" by heart: shown its goal's recipe line with another count,
it writes the count it memorised (93 of 93 training goals, ``benchmarks/learning_analysis_2026-12-06.md``), and
nothing transfers to goals it never saw. In a renamed transcript the goal, every recipe line and every action are
rewritten with one random permutation of the item words (``iron bars`` / ``iron ingot`` may become ``dye sand`` /
``dye planks``: names keep the game's pattern of shared words) and new counts; the transcript stays consistent (the
``get`` actions fetch the goal line's ingredients, the ``craft`` command is its line), so the actions follow from the
context alone. A renamed name that is a goal item the policy must not see (the held-out goals) is never produced.

What it supports: depth-1 transcripts (one ``get`` per ingredient of the goal's line, then the ``craft`` command),
the oracle's transcripts of ``gen-depth1`` in the transcript context form. Other transcripts are refused with a
``ValueError`` naming the first difference, never rewritten wrongly.

:func:`train_counterfactual` trains a causal LM on a stream of renamed transcripts: each batch holds fresh draws,
the loss covers the agent's responses only (each ends with EOS, as a generated response does; the observations are
context), with Adam, a linear warm-up and a linear decay. One seeded ``random.Random`` draws the stream.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

logger = logging.getLogger(__name__)

__all__ = ["Recipe", "parse_transcript", "render_transcript", "Renamer", "CounterfactualConfig", "response_labels",
           "train_counterfactual"]

_LINE = re.compile(r"^craft (\d+) (.+?) using (.+)$")
_HEADER = "Crafting commands:\n"


@dataclass(frozen=True)
class Recipe:
    """One line of TextCraft's crafting commands: ``craft {count} {item} using {n} {ingredient}, ...``."""

    count: str
    item: str
    ingredients: tuple  # ((count, name), ...)

    def text(self) -> str:
        return f"craft {self.count} {self.item} using " + ", ".join(f"{n} {x}" for n, x in self.ingredients)


def render_transcript(recipes: Sequence[Recipe], goal: int) -> str:
    """The depth-1 transcript of the goal ``recipes[goal]``: the first observation (the crafting commands and the
    goal), then for each ingredient ``<action>get N X</action>`` and TextCraft's answer ``Got N X``, then the
    ``craft`` command (the transcript context form, first context = the observation)."""
    g = recipes[goal]
    text = _HEADER + "\n".join(r.text() for r in recipes) + f"\n\nGoal: craft {g.item}."
    for n, x in g.ingredients:
        text += f"<action>get {n} {x}</action>\nGot {n} {x}\n"
    return text + f"<action>{g.text()}</action>"


def parse_transcript(text: str) -> tuple[list[Recipe], int]:
    """The recipes and the goal's index of a depth-1 transcript (:func:`render_transcript` gives ``text`` back);
    ``ValueError`` for any other text."""
    if not text.startswith(_HEADER) or "\n\nGoal: craft " not in text:
        raise ValueError("not a TextCraft transcript (no crafting commands and goal)")
    head, rest = text[len(_HEADER):].split("\n\nGoal: craft ", 1)
    recipes = []
    for line in head.split("\n"):
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"not a recipe line: {line!r}")
        ings = tuple(tuple(p.split(" ", 1)) for p in m.group(3).split(", "))
        recipes.append(Recipe(m.group(1), m.group(2), ings))
    goal_item = rest.split(".<action>", 1)[0]
    matches = [k for k, r in enumerate(recipes) if r.item == goal_item]
    if len(matches) != 1:
        raise ValueError(f"goal {goal_item!r} has {len(matches)} recipe lines")
    if render_transcript(recipes, matches[0]) != text:
        raise ValueError("not a depth-1 transcript (the actions are not the goal line's gets and craft command)")
    return recipes, matches[0]


class Renamer:
    """Draws renamed transcripts from the given depth-1 ``transcripts``. Item words are permuted among the words of
    the item names they contain, ``exclude``d names left out (a word only they have is never drawn); counts
    are drawn from the counts they contain (recipe outputs and ingredients apart); line order is shuffled. No drawn
    name is in ``exclude`` (e.g. the held-out goal items)."""

    def __init__(self, transcripts: Sequence[str], exclude: Sequence[str] = ()):
        self.parsed = []
        refused = 0
        for t in transcripts:
            try:
                self.parsed.append(parse_transcript(t))
            except ValueError as e:
                refused += 1
                logger.debug("counterfactual: transcript refused (%s)", e)
        if not self.parsed:
            raise ValueError("counterfactual: no depth-1 TextCraft transcript among the given ones")
        if refused:
            logger.warning("counterfactual: %d of %d transcripts cannot be rewritten exactly (not depth 1, or a goal "
                           "with several recipe lines) and are left out", refused, len(transcripts))
        self.exclude = frozenset(exclude)
        names = {x for recipes, _ in self.parsed for r in recipes for x in (r.item, *(i for _, i in r.ingredients))}
        self.words = sorted({w for x in names - self.exclude for w in x.split()})
        self.item_counts = [r.count for recipes, _ in self.parsed for r in recipes]
        self.ingredient_counts = [n for recipes, _ in self.parsed for r in recipes for n, _ in r.ingredients]

    def sample(self, rng: random.Random) -> str:
        recipes, goal = self.parsed[rng.randrange(len(self.parsed))]
        names = list(dict.fromkeys(x for r in recipes for x in (r.item, *(i for _, i in r.ingredients))))
        own = sorted({w for x in names for w in x.split()})
        for _ in range(100):
            perm = dict(zip(own, rng.sample(self.words, len(own))))
            new = {x: " ".join(perm[w] for w in x.split()) for x in names}
            if len(set(new.values())) == len(names) and not set(new.values()) & self.exclude:
                break
        else:  # pragma: no cover - 100 draws that all spell an excluded name
            raise RuntimeError("counterfactual: could not draw names that avoid the excluded ones")
        renamed = [Recipe(rng.choice(self.item_counts), new[r.item],
                          tuple((rng.choice(self.ingredient_counts), new[i]) for _, i in r.ingredients))
                   for r in recipes]
        order = list(range(len(renamed)))
        rng.shuffle(order)
        return render_transcript([renamed[k] for k in order], order.index(goal))


@dataclass
class CounterfactualConfig:
    """``steps`` Adam steps of ``batch_size`` fresh renamed transcripts; the learning rate warms up linearly over
    ``warmup_steps`` and decays linearly to 5 % of ``learning_rate`` at the end; gradients clipped to norm 1."""

    steps: int = 6000
    batch_size: int = 16
    learning_rate: float = 3e-3
    warmup_steps: int = 100
    seed: int = 0


def response_labels(tokenizer: Any, text: str, open_tag: str = "<action>",
                    close_tag: str = "</action>") -> tuple[list[int], list[int]]:
    """Token ids of a transcript and next-token labels (-100: no loss): each response (``open_tag`` ...
    ``close_tag``) is a target, and after its last token the target is EOS, as when the model generates it (the
    transcript itself holds no EOS: the next observation follows). Observation and first-context tokens are not
    targets."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    a0, a1 = tokenizer.convert_tokens_to_ids(open_tag), tokenizer.convert_tokens_to_ids(close_tag)
    labels = [-100] * len(ids)
    inside = False
    for t in range(len(ids)):
        if t + 1 < len(ids) and ids[t + 1] == a0:
            inside = True
        if ids[t] == a1:
            labels[t] = tokenizer.eos_token_id
            inside = False
        elif inside:
            labels[t] = ids[t + 1]
    return ids, labels


def train_counterfactual(model: Any, tokenizer: Any, renamer: Renamer, config: CounterfactualConfig | None = None,
                         log_every: int = 500,
                         row: Callable[[random.Random], tuple[list[int], list[int]]] | None = None) -> list[dict]:
    """Train ``model`` in place on ``config.steps`` batches of renamed transcripts (module docstring); returns the
    logged losses (``{"step", "loss"}``, a running mean).

    ``row`` (optional) draws one training row, ``(ids, labels)``, from the stream's ``random.Random``; by default a
    renamed transcript and :func:`response_labels`. Probes pass their own (transcripts with mistakes written in,
    ``benchmarks/learning_probes.py``) and keep this loop."""
    import torch

    cfg = config or CounterfactualConfig()
    rng = random.Random(cfg.seed)
    if row is None:
        def row(r: random.Random) -> tuple[list[int], list[int]]:
            return response_labels(tokenizer, renamer.sample(r))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / max(cfg.warmup_steps, 1)) * max(0.05, 1.0 - step / cfg.steps)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.train()
    log, running = [], None
    for step in range(1, cfg.steps + 1):
        rows = [row(rng) for _ in range(cfg.batch_size)]
        width = max(len(ids) for ids, _ in rows)
        inp = torch.full((len(rows), width), pad, dtype=torch.long)
        lab = torch.full((len(rows), width), -100, dtype=torch.long)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        for b, (ids, labels) in enumerate(rows):  # right padding: positions as in generation
            inp[b, :len(ids)] = torch.as_tensor(ids)
            lab[b, :len(ids)] = torch.as_tensor(labels)
            att[b, :len(ids)] = 1
        logits = model(input_ids=inp, attention_mask=att).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1),
                                                 ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        value = float(loss.detach())
        running = value if running is None else 0.98 * running + 0.02 * value
        if step % log_every == 0 or step == cfg.steps:
            log.append({"step": step, "loss": running})
            logger.info("counterfactual warm start: step %d/%d, loss %.3f", step, cfg.steps, running)
    model.eval()
    return log
