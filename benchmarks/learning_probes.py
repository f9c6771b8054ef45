"""Probes of the learning lab's counterfactual warm start: more turns, repair transcripts, and what follows a refused
action (``benchmarks/learning_analysis_2026-12-07.md``, section 13). Hand-run probes, not part of the lab's report.

They read a warm start made by ``python benchmarks/learning.py --profile generalisation-counterfactual`` (its run
directory, ``runs/learning/generalisation-counterfactual`` by default) and write only under ``--out``::

    # the warm start itself, held-out at 4 and 8 turns (no training: --steps 0)
    python benchmarks/learning_probes.py repairs --seed 0 --steps 0 --out /tmp/probe/warm
    # 1000 more renamed-transcript steps: the control (no repairs), count repairs, count or name repairs
    python benchmarks/learning_probes.py repairs --seed 0 --share 0 --out /tmp/probe/control
    python benchmarks/learning_probes.py repairs --seed 0 --share 0.5 --kinds count --out /tmp/probe/count
    python benchmarks/learning_probes.py repairs --seed 0 --share 0.5 --kinds count,name --out /tmp/probe/both
    # 800 held-out episodes at 8 turns: the first refusals by kind, and the actions written after one
    python benchmarks/learning_probes.py refusals --model /tmp/probe/both/model

``repairs`` continues the warm start's training on fresh renamed transcripts (``adapters.counterfactual``: 16 a step,
Adam, a linear warm-up over 50 steps and a linear decay to 5 %, gradients clipped to norm 1). In a share of them a
mistake and its repair are written in, the wrong action left out of the loss:

- ``count``: one ``get`` with too low a count, then the craft, TextCraft's ``Could not find enough items to craft
  minecraft:<item>``, the right ``get`` and the craft again (goals with an ingredient count of 2 or more);
- ``name``: a ``get`` of a name made of the context's words that no recipe line has, TextCraft's ``Could not find
  <name>``, then the right ``get``.

It then scores held-out success at 4 and 8 turns with the lab's own ``sampled_eval`` (true T = 1, 16 samples a goal,
the lab's sampling seed: common random numbers with every lab model) and the training goals at 8 turns (4 samples).
The refusal messages are TextCraft's own; ``refusals`` counts them in episodes the real game plays.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import random
import re
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning as lab  # noqa: E402 - the lab's env specs and evaluation, from beside this file

ENV = "textcraft-broad-counterfactual"
PROFILE = "generalisation-counterfactual"
WELL_FORMED = re.compile(r"<action>(get|craft) [^<]+</action>")
REFUSED = ("Could not", "Wrong item")


def _context(recipes, goal: int) -> str:
    """A transcript's first observation (crafting commands and goal), the head of its oracle transcript."""
    from adapters.counterfactual import render_transcript

    return render_transcript(recipes, goal).split("<action>", 1)[0]


def _count_repair(recipes, goal: int, rng: random.Random):
    """Too low a count for one ingredient, the refused craft, the right ``get`` and the craft: (text, index of the
    wrong action), or (None, None) when no ingredient count is 2 or more."""
    g = recipes[goal]
    candidates = [k for k, (n, _) in enumerate(g.ingredients) if int(n) >= 2]
    if not candidates:
        return None, None
    j = rng.choice(candidates)
    n_j, x_j = g.ingredients[j]
    low = rng.randrange(1, int(n_j))
    text = _context(recipes, goal)
    for k, (n, x) in enumerate(g.ingredients):
        c = low if k == j else n
        text += f"<action>get {c} {x}</action>\nGot {c} {x}\n"
    text += (f"<action>{g.text()}</action>\nCould not find enough items to craft "
             f"minecraft:{g.item.replace(' ', '_')}\n")
    text += f"<action>get {n_j} {x_j}</action>\nGot {n_j} {x_j}\n<action>{g.text()}</action>"
    return text, j  # the wrong action is the j-th get


def _name_repair(recipes, goal: int, rng: random.Random):
    """A ``get`` of a name no recipe line has (made of the context's words), refused, then the right ``get``:
    (text, index of the wrong action), or (None, None) when 50 draws found no such name."""
    g = recipes[goal]
    j = rng.randrange(len(g.ingredients))
    _, x_j = g.ingredients[j]
    names = {r.item for r in recipes} | {i for r in recipes for _, i in r.ingredients}
    words = sorted({w for x in names for w in x.split()})
    for _ in range(50):
        bad = " ".join(rng.choice(words) for _ in range(len(x_j.split())))
        if bad not in names:
            break
    else:
        return None, None
    text = _context(recipes, goal)
    for k, (n, x) in enumerate(g.ingredients):
        if k == j:
            text += f"<action>get {n} {bad}</action>\nCould not find {bad}\n"
        text += f"<action>get {n} {x}</action>\nGot {n} {x}\n"
    return text + f"<action>{g.text()}</action>", j


def _training_row(renamer, tokenizer, rng: random.Random, share: float, kinds: set[str]):
    """One renamed transcript's ids and labels; with probability ``share`` a mistake and its repair written in, the
    wrong action's tokens (and the token that predicts its first) left out of the loss."""
    from adapters.counterfactual import parse_transcript, response_labels

    text = renamer.sample(rng)
    wrong = None
    if rng.random() < share:
        recipes, goal = parse_transcript(text)
        if "name" in kinds and ("count" not in kinds or rng.random() < 0.5):
            repaired, wrong = _name_repair(recipes, goal, rng)
        else:
            repaired, wrong = _count_repair(recipes, goal, rng)
        if repaired is not None:
            text = repaired
    ids, labels = response_labels(tokenizer, text)
    if wrong is not None:
        a0, a1 = tokenizer.convert_tokens_to_ids("<action>"), tokenizer.convert_tokens_to_ids("</action>")
        starts = [t for t, i in enumerate(ids) if i == a0]
        ends = [t for t, i in enumerate(ids) if i == a1]
        for t in range(starts[wrong] - 1, ends[wrong] + 1):
            labels[t] = -100
    return ids, labels


def repairs(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adapters.counterfactual import CounterfactualConfig, Renamer, train_counterfactual
    from adapters.warm_start import _other_goal_items, _transcripts  # the warm start's own transcript reading

    warm = Path(args.runs) / ENV / f"seed{args.seed}" / "warm-start"
    if not (warm / "config.json").is_file():
        raise SystemExit(f"no warm start at {warm}: run `python benchmarks/learning.py --profile {PROFILE}` first")
    kinds = {k for k in args.kinds.split(",") if k}
    if not kinds <= {"count", "name"}:
        raise SystemExit(f"--kinds: count and/or name, not {args.kinds!r}")
    spec = lab.ENV_SPECS[ENV]()
    train, held = spec.tasks()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = warm
    res: dict = {"seed": args.seed, "share": args.share, "kinds": sorted(kinds) if args.share > 0 else [],
                 "steps": args.steps, "batch_size": args.batch_size, "learning_rate": args.lr,
                 "stream_seed": args.stream_seed}
    if args.steps > 0:
        torch.manual_seed(args.seed)  # the probes of section 13 seeded torch so, before loading
        renamer = Renamer(_transcripts(warm / "data" / "sft.jsonl"),
                          exclude=_other_goal_items(spec.env_id, {"split": spec.split}, list(train)))
        tok = AutoTokenizer.from_pretrained(warm)
        model = AutoModelForCausalLM.from_pretrained(warm)
        cfg = CounterfactualConfig(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr,
                                   warmup_steps=50, seed=args.stream_seed)
        losses = train_counterfactual(model, tok, renamer, cfg, log_every=250,
                                      row=lambda rng: _training_row(renamer, tok, rng, args.share, kinds))
        model_dir = out / "model"
        model.save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
        res["final_loss_ema"] = losses[-1]["loss"]
    res["model"] = str(model_dir)
    for turns in (4, 8):
        sp = replace(spec, name=f"{spec.name}-t{turns}", max_turns=turns,
                     max_completion_tokens=max(spec.max_completion_tokens, 48 * turns))
        h = lab.sampled_eval(sp, model_dir, held, args.samples)
        res[f"heldout_sampled_t{turns}"] = h["sampled"]
        res[f"heldout_greedy_t{turns}"] = h["greedy"]
        res[f"heldout_goals_won_t{turns}"] = sum(v > 0 for v in h["per_task_sampled"].values())
    sp = replace(spec, name=f"{spec.name}-t8", max_turns=8, max_completion_tokens=max(spec.max_completion_tokens, 384))
    res["train_sampled_t8"] = lab.sampled_eval(sp, model_dir, train, args.train_samples)["sampled"]
    (out / "result.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    return res


def _refusal_kind(observation: str) -> str:
    """TextCraft's refusal, by kind: ``not enough items`` (a craft short of an ingredient), ``find`` (a name the game
    does not have), ``execute`` (an action it cannot parse), or the message's head."""
    if "enough items" in observation:
        return "not enough items"
    if observation.startswith("Could not "):
        return observation[len("Could not "):].split(" ", 1)[0]
    return observation.split(":", 1)[0]


def refusals(args) -> dict:
    """Held-out episodes at 8 turns (16 per goal, their own sampling streams): the first refused action of each by
    kind, how many of those episodes were won, and how many actions after a first refusal are well formed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adapters.episodes import EpisodeConfig, play_episodes

    spec = lab.ENV_SPECS[ENV]()
    _, held = spec.tasks()
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    cfg = EpisodeConfig(max_turns=args.turns, max_new_tokens=24, max_completion_tokens=max(384, 48 * args.turns),
                        first_context="observation", temperature=1.0, top_k=0, top_p=1.0)
    specs = [(t, 1000 + j, i, j) for i, t in enumerate(held) for j in range(16)]
    episodes = play_episodes(model, tok, spec.env_id, specs, cfg, env_kwargs={"split": spec.split, **spec.env_kwargs})
    kinds: collections.Counter = collections.Counter()
    refused = won_after_refusal = after = well_formed_after = 0
    for e in episodes:
        first = next((k for k, t in enumerate(e.turns) if t.observation.startswith(REFUSED)), None)
        if first is None:
            continue
        refused += 1
        won_after_refusal += bool(e.won)
        kinds[_refusal_kind(e.turns[first].observation)] += 1
        for t in e.turns[first + 1:]:
            after += 1
            well_formed_after += bool(WELL_FORMED.fullmatch(t.response.strip()))
    res = {"model": str(args.model), "turns": args.turns, "episodes": len(episodes),
           "won": sum(bool(e.won) for e in episodes), "episodes_with_a_refusal": refused,
           "won_after_a_refusal": won_after_refusal, "first_refusal_kinds": dict(kinds.most_common()),
           "actions_after_the_first_refusal": after, "well_formed_after_the_first_refusal": well_formed_after}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default=f"runs/learning/{PROFILE}", help="the lab's run directory (default: %(default)s)")
    sub = ap.add_subparsers(dest="probe", required=True)
    r = sub.add_parser("repairs", help="more renamed-transcript steps, some with a mistake and its repair; then eval")
    r.add_argument("--seed", type=int, default=0, help="the lab seed whose warm start is read")
    r.add_argument("--steps", type=int, default=1000, help="training steps (0: evaluate the warm start itself)")
    r.add_argument("--share", type=float, default=0.5, help="share of transcripts with a mistake and its repair")
    r.add_argument("--kinds", default="count,name", help="which mistakes: count, name or count,name")
    r.add_argument("--batch-size", type=int, default=16)
    r.add_argument("--lr", type=float, default=1e-3)
    r.add_argument("--stream-seed", type=int, default=1234, help="seeds the transcript stream")
    r.add_argument("--samples", type=int, default=16, help="sampled episodes per held-out goal")
    r.add_argument("--train-samples", type=int, default=4, help="sampled episodes per training goal")
    r.add_argument("--out", required=True, help="where the model and result.json go")
    f = sub.add_parser("refusals", help="first refusals and the actions after them, 16 episodes per held-out goal")
    f.add_argument("--model", required=True, help="a model directory (a warm start, or repairs' OUT/model)")
    f.add_argument("--turns", type=int, default=8)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("adapters.counterfactual").setLevel(logging.INFO)  # the training's progress
    res = repairs(args) if args.probe == "repairs" else refusals(args)
    print("RESULT " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
