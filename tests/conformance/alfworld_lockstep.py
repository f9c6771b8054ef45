"""ALFWorld-v0 (rules="canonical") and alfworld 0.4.2's ``AlfredTWEnv`` played in lockstep on the same commands.

The canonical env runs in a child process (:mod:`alfworld_canonical`, stock alfworld/textworld, no agentgym), built
from alfworld's ``base_config.yaml`` with ``$ALFWORLD_DATA`` pointing at a folder of games in ALFWorld's layout
(``json_2.1.1/train/<task>/<trial>/``). At every reset the canonical env picks the game (its own shuffled cycle) and
agentgym plays the same file (``reset(options={"task_id": "file:<path>"})``); at every step both get the same command,
agentgym inside ``<action>...</action>`` as a policy writes it, and these must be equal:

* the observation text (the reset text too),
* the admissible commands: the engine's full list, and ``info["admissible_actions"]`` = that list without ``help``
  (agentgym's one listed difference: the prompt's list omits ``help``, as verl-agent's does),
* ``won``, and done (agentgym's ``terminated or truncated``; the canonical env's own flag: won or its 50-step limit).

The commands are an RL policy's, off-script: alfworld's handcoded expert's next command (the canonical env computes
it; it drives episodes to wins), uniform admissible commands, and mutations of admissible ones -- letter case, doubled
and Unicode spaces, tabs, newlines, a final period or other mark, surrounding (Unicode) whitespace, the older ``put X
in/on Y`` wordings, valid-looking commands that are not admissible (another receptacle number, a command admissible
earlier, a wrong source), non-commands, the empty command, an empty ``<action>`` tag and a response with no tag
(which the canonical side receives as the empty command).

Run a larger check by hand on fresh games and seeds (generates the games with ``agentgym alfworld generate``)::

    python tests/conformance/alfworld_lockstep.py --games 36 --game-seed 9001 --episodes 72 --seed 9001
    python tests/conformance/alfworld_lockstep.py --train-eval eval_out_of_distribution ...   # no expert in the env
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

WORKER = Path(__file__).with_name("alfworld_canonical.py")
#: Whitespace that Python's str.split()/strip() treat as spaces but ALFWorld's exact match does not.
UNICODE_SPACES = ("\u00a0", "\u2003", "\u2009", "\u3000", "\u202f")
REQUEST_TIMEOUT_S = 120.0  # one canonical reset or step; a hung child fails the run instead of hanging it


class CanonicalError(RuntimeError):
    """The canonical process failed or did not answer in time."""


class CanonicalALFWorld:
    """A client of :mod:`alfworld_canonical` running in its own process (bounded waits on every answer)."""

    def __init__(self, data_root: Path, config: Path, train_eval: str = "train", seed: int = 0):
        env = dict(os.environ, ALFWORLD_DATA=str(data_root), PYTHONHASHSEED="0")
        self._proc = subprocess.Popen([sys.executable, str(WORKER), str(config), train_eval, str(seed)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=env)
        self._lines: queue.Queue = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self._proc.stdout, self._lines), daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        self._pending = False

    @staticmethod
    def _pump(stream, q: queue.Queue) -> None:
        for line in stream:
            q.put(line)
        q.put(None)

    def _drain_stderr(self) -> None:
        for line in self._proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-200]

    def send(self, **req) -> None:
        assert not self._pending, "one request at a time"
        try:
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise CanonicalError(f"canonical ALFWorld process is gone: {e}\n{self.stderr_tail()}") from e
        self._pending = True

    def receive(self, timeout_s: float = REQUEST_TIMEOUT_S) -> dict:
        assert self._pending
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise CanonicalError(f"canonical ALFWorld did not answer in {timeout_s:.0f} s\n{self.stderr_tail()}")
        self._pending = False
        if line is None:
            raise CanonicalError(f"canonical ALFWorld process exited\n{self.stderr_tail()}")
        return json.loads(line)

    def ask(self, **req) -> dict:
        self.send(**req)
        return self.receive()

    def stderr_tail(self) -> str:
        return "".join(self._stderr[-30:])

    def close(self) -> dict:
        try:
            res = self.ask(op="close")
        finally:
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=30)
        return res


# ---- commands --------------------------------------------------------------------------------------------------
def _case(cmd: str, rng: np.random.Generator) -> str:
    k = int(rng.integers(3))
    if k == 0:
        return cmd.upper()
    if k == 1:
        return cmd.title()
    flips = "".join(c.upper() if rng.random() < 0.5 else c for c in cmd)
    return flips if flips != cmd else cmd.capitalize()


def _one_space(cmd: str, rng: np.random.Generator, sep: str) -> str:
    gaps = [i for i, c in enumerate(cmd) if c == " "]
    if not gaps:
        return cmd + sep
    i = gaps[int(rng.integers(len(gaps)))]
    return cmd[:i] + sep + cmd[i + 1:]


def _older_wording(adm: list[str], pool: list[str], rng: np.random.Generator) -> str:
    moves = [a for a in adm if a.startswith("move ")] or [a for a in pool if a.startswith("move ")]
    prep = ("in", "on", "in/on", "into")[int(rng.integers(4))]
    if moves:
        obj, _, recep = moves[int(rng.integers(len(moves)))][5:].partition(" to ")
        return f"put {obj} {prep} {recep}"
    takes = [a for a in adm + pool if a.startswith("take ")]
    if takes:
        obj, _, recep = takes[int(rng.integers(len(takes)))][5:].partition(" from ")
        return f"put {obj} {prep} {recep}"
    return f"put book 2 {prep} diningtable 1"


def _not_admissible(adm: list[str], pool: list[str], rng: np.random.Generator) -> str:
    k = int(rng.integers(4))
    stale = [c for c in pool if c not in adm]
    if k == 0 and stale:  # admissible in an earlier state
        return stale[int(rng.integers(len(stale)))]
    gos = [a for a in adm if a.startswith("go to ")]
    if k == 1 and gos:  # a receptacle number the room does not have
        head, _, _num = gos[int(rng.integers(len(gos)))].rpartition(" ")
        return f"{head} {int(rng.integers(10, 40))}"
    takes = [a for a in adm + pool if a.startswith("take ")]
    if k == 2 and takes:  # the right object from the wrong place
        obj, _, _ = takes[int(rng.integers(len(takes)))][5:].partition(" from ")
        return f"take {obj} from {('fridge 1', 'safe 1', 'cabinet 8', 'drawer 3')[int(rng.integers(4))]}"
    return ("open safe 1", "go to cabinet 8", "examine drawer 3", "use desklamp 1", "heat apple 1 with microwave 1",
            "clean mug 1 with sinkbasin 1", "cool potato 1 with fridge 1", "close fridge 1")[int(rng.integers(8))]


#: kind -> weight. Each step draws a kind, then a command of that kind; "response" kinds also shape the response.
KINDS = {
    "expert": 3, "admissible": 6, "help": 0.3, "case": 2, "double_space": 1.2, "tab": 0.8, "newline": 0.4,
    "unicode_space": 1.2, "period": 1.2, "mark": 0.4, "surrounding_space": 1.2, "older_wording": 1.5,
    "not_admissible": 3, "non_command": 0.8, "empty_command": 0.4, "blank_command": 0.4, "empty_tag": 0.3,
    "no_tag": 0.5,
}
_KIND_NAMES = list(KINDS)
_KIND_P = np.array([KINDS[k] for k in _KIND_NAMES]) / sum(KINDS.values())


def choose(rng: np.random.Generator, adm: list[str], expert: str | None, pool: list[str],
           p_expert: float) -> tuple[str, str, str]:
    """(kind, command the canonical env gets, response agentgym gets)."""
    if expert and rng.random() < p_expert:
        return "expert", expert, f"<think>following the plan</think><action>{expert}</action>"
    kind = _KIND_NAMES[int(rng.choice(len(_KIND_NAMES), p=_KIND_P))]
    # Mutations start from the expert's command half the time: the one whose mutation changes the episode most.
    base = expert if expert and rng.random() < 0.5 else adm[int(rng.integers(len(adm)))] if adm else "look"
    if kind == "expert":
        kind, base = ("expert", expert) if expert else ("admissible", base)
    if kind in ("expert", "admissible"):
        cmd = base
    elif kind == "help":
        cmd = "help"
    elif kind == "case":
        cmd = _case(base, rng)
    elif kind == "double_space":
        cmd = _one_space(base, rng, "  ")
    elif kind == "tab":
        cmd = _one_space(base, rng, "\t")
    elif kind == "newline":
        cmd = _one_space(base, rng, "\n")
    elif kind == "unicode_space":
        sep = UNICODE_SPACES[int(rng.integers(len(UNICODE_SPACES)))]
        cmd = base.replace(" ", sep) if rng.random() < 0.3 else _one_space(base, rng, sep)
    elif kind == "period":
        cmd = base + "."
    elif kind == "mark":
        cmd = base + ("!", "?", ";", " .", ",")[int(rng.integers(5))]
    elif kind == "surrounding_space":  # stripped by both: runs
        pad = (" ", "  ", "\t", "\n", "\u2003", "\u00a0", "\u3000")
        cmd = pad[int(rng.integers(len(pad)))] + base + pad[int(rng.integers(len(pad)))]
    elif kind == "older_wording":
        cmd = _older_wording(adm, pool, rng)
    elif kind == "not_admissible":
        cmd = _not_admissible(adm, pool, rng)
    elif kind == "non_command":
        cmd = ("dance wildly", "pick up the apple", "I go to the fridge", "walk north", "42",
               "go to", "take apple 1")[int(rng.integers(7))]
    elif kind == "empty_command":
        cmd = ""
    elif kind == "blank_command":
        cmd = ("   ", "\t", "\u2003", " \n ")[int(rng.integers(4))]
    elif kind == "empty_tag":
        return kind, "", "<think>hmm</think><action></action>"
    else:  # no_tag: nothing parses; the canonical side gets the empty command
        return kind, "", ("I should go to the fridge next.", "go to fridge 1", "<action>go to fridge 1",
                          "<act>look</act>")[int(rng.integers(4))]
    return kind, cmd, f"<action>{cmd}</action>"


# ---- the lockstep run ------------------------------------------------------------------------------------------
@dataclass
class Report:
    episodes: int = 0
    steps: int = 0
    wins: int = 0
    truncations: int = 0
    not_run: int = 0  # steps the canonical env answered "Nothing happens."
    kinds: Counter = field(default_factory=Counter)
    families: Counter = field(default_factory=Counter)
    games: set = field(default_factory=set)
    mismatches: list = field(default_factory=list)
    canonical_errors: list = field(default_factory=list)
    seconds: float = 0.0
    reset_s: float = 0.0  # wall time of the resets (both sides)
    ours_s: float = 0.0  # agentgym's step time
    wait_s: float = 0.0  # waiting for the canonical step after agentgym's
    ours_cpu_s: float = 0.0  # CPU seconds of this process (agentgym) and of the canonical process
    canonical_cpu_s: float = 0.0

    def summary(self) -> str:
        return (f"{self.episodes} episodes on {len(self.games)} games ({dict(sorted(self.families.items()))}), "
                f"{self.steps} steps ({self.not_run} answered 'Nothing happens.'), {self.wins} wins, "
                f"{self.truncations} at the 50-step limit, {len(self.mismatches)} mismatches, "
                f"{len(self.canonical_errors)} canonical errors, {self.seconds:.0f} s (resets {self.reset_s:.0f} s, "
                f"agentgym steps {self.ours_s:.0f} s, then waiting for canonical steps {self.wait_s:.0f} s; CPU "
                f"agentgym {self.ours_cpu_s:.0f} s, canonical {self.canonical_cpu_s:.0f} s); "
                f"kinds {dict(sorted(self.kinds.items()))}")


def _compare(where: str, ours: dict, theirs: dict, report: Report) -> bool:
    diffs = [k for k in ("obs", "admissible", "admissible_info", "won", "done") if ours[k] != theirs[k]]
    if diffs:
        report.mismatches.append({"where": where, "fields": diffs, **{f"ours_{k}": ours[k] for k in diffs},
                                  **{f"canonical_{k}": theirs[k] for k in diffs}})
        return False
    return True


#: AlfredTWEnv's train_eval mode -> the folder its base_config.yaml reads under $ALFWORLD_DATA/json_2.1.1.
SPLIT_OF_MODE = {"train": "train", "eval_in_distribution": "valid_seen", "eval_out_of_distribution": "valid_unseen"}


def run_lockstep(data_root: Path, config: Path, *, episodes: int, seed: int, max_steps: int = 50,
                 train_eval: str = "train") -> Report:
    """Play ``episodes`` canonical resets of the games under ``data_root/json_2.1.1/SPLIT_OF_MODE[train_eval]`` in
    lockstep. ``train`` mode has alfworld's handcoded expert in the canonical env, which guides the episodes; the eval
    modes have none, and the game's walkthrough guides them instead."""
    import agentgym

    rng = np.random.default_rng(seed)
    report = Report()
    t0, cpu0 = time.monotonic(), time.process_time()
    canon = CanonicalALFWorld(data_root, config, train_eval, seed)
    env = agentgym.make("ALFWorld-v0", rules="canonical", max_turns=max_steps)
    assert env.run_identity() == {"rules": "canonical", "prompt_style": "bipace"}
    try:
        for ep in range(episodes):
            tr = time.monotonic()
            c = canon.ask(op="reset")
            if "error" in c:
                report.canonical_errors.append({"where": f"episode {ep} reset", "error": c["error"]})
                break
            obs, info = env.reset(options={"task_id": f"file:{c['gamefile']}"})
            report.reset_s += time.monotonic() - tr
            report.episodes += 1
            report.games.add(c["gamefile"])
            report.families[info["family"]] += 1
            game = Path(c["gamefile"]).parent.parent.name
            theirs = {"obs": c["obs"], "admissible": c["admissible"], "won": c["won"], "done": False,
                      "admissible_info": [a for a in c["admissible"] if a != "help"]}
            ours = {"obs": obs, "admissible": list(env._state.admissible), "won": info["won"], "done": False,
                    "admissible_info": info["admissible_actions"]}
            if not _compare(f"{game} reset (episode {ep})", ours, theirs, report):
                continue
            pool: list[str] = list(c["admissible"])
            walkthrough = json.loads(Path(c["gamefile"]).read_text()).get("walkthrough") or []
            pos = 0  # next walkthrough command: the guide where the canonical env has no expert (eval modes)
            p_expert = (0.05, 0.25, 0.5)[ep % 3]  # long 50-step episodes and shorter winning ones
            for t in range(max_steps):
                guide = c["expert"]
                if guide is None and pos < len(walkthrough) and walkthrough[pos] in c["admissible"]:
                    guide = walkthrough[pos]
                kind, cmd, response = choose(rng, c["admissible"], guide, pool, p_expert)
                canon.send(op="step", command=cmd)
                ts = time.monotonic()
                obs, r, term, trunc, info = env.step(response)  # runs while the canonical process works
                tw = time.monotonic()
                c = canon.receive()
                report.ours_s += tw - ts
                report.wait_s += time.monotonic() - tw
                if "error" in c:
                    report.canonical_errors.append({"where": f"{game} step {t + 1} (episode {ep})", "kind": kind,
                                                    "command": cmd, "error": c["error"]})
                    break
                report.steps += 1
                report.kinds[kind] += 1
                report.not_run += c["obs"] == "Nothing happens."
                theirs = {"obs": c["obs"], "admissible": c["admissible"], "won": c["won"], "done": c["done"],
                          "admissible_info": [a for a in c["admissible"] if a != "help"]}
                ours = {"obs": obs, "admissible": list(env._state.admissible), "won": info["won"],
                        "done": term or trunc, "admissible_info": info["admissible_actions"]}
                if not _compare(f"{game} step {t + 1} (episode {ep}) {kind} {cmd!r} / {response!r}", ours,
                                theirs, report):
                    break
                if r != (1.0 if info["won"] else 0.0) or info["obs_hash"] is None:
                    report.mismatches.append({"where": f"{game} step {t + 1}", "fields": ["reward"], "reward": r})
                    break
                pool.extend(a for a in c["admissible"] if a not in pool)
                if pos < len(walkthrough) and cmd.strip() == walkthrough[pos] and info["process_ok"]:
                    pos += 1
                if c["done"]:
                    report.wins += c["won"]
                    report.truncations += not c["won"]
                    break
        closed = canon.close()
        report.canonical_cpu_s = float(closed.get("cpu_s", 0.0))
        if closed.get("agentgym_imported"):
            raise CanonicalError("the canonical process imported agentgym: it must run the stock code")
    finally:
        if canon._proc.poll() is None:
            canon._proc.kill()
            canon._proc.wait(timeout=30)
        env.close()
    report.seconds = time.monotonic() - t0
    report.ours_cpu_s = time.process_time() - cpu0
    return report


def stage_games(gamefiles: list[str], data_root: Path, split: str = "train") -> None:
    """Copy game folders (``<task>/<trial>/``) into ``data_root/json_2.1.1/<split>/`` (ALFWorld's layout)."""
    for g in gamefiles:
        trial = Path(g).parent
        dst = data_root / "json_2.1.1" / split / trial.parent.name / trial.name
        if not dst.exists():
            shutil.copytree(trial, dst)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", type=int, default=36, help="games to generate (6 families, round robin)")
    p.add_argument("--game-seed", type=int, default=777, help="generator seed of the games")
    p.add_argument("--episodes", type=int, default=72)
    p.add_argument("--seed", type=int, default=777, help="seed of the command choices")
    p.add_argument("--config", default=None, help="alfworld base_config.yaml (default: the staged shared copy)")
    p.add_argument("--workdir", default=None, help="where the games go (default: a temporary folder)")
    p.add_argument("--train-eval", default="train", choices=sorted(SPLIT_OF_MODE),
                   help="AlfredTWEnv's mode (train: with its handcoded expert, as base_config.yaml builds it)")
    args = p.parse_args(argv)
    import tempfile

    config = Path(args.config) if args.config else _shared_config()
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="alfworld-lockstep-"))
    t = time.monotonic()
    subprocess.run([str(Path(sys.executable).with_name("agentgym")), "alfworld", "generate", "--out",
                    str(root / "json_2.1.1"), "--split", SPLIT_OF_MODE[args.train_eval], "--n", str(args.games),
                    "--seed", str(args.game_seed)], check=True)
    sys.stdout.write(f"generated {args.games} games (seed {args.game_seed}) in {time.monotonic() - t:.0f} s\n")
    report = run_lockstep(root, config, episodes=args.episodes, seed=args.seed, train_eval=args.train_eval)
    sys.stdout.write(report.summary() + "\n")
    for m in report.mismatches[:10] + report.canonical_errors[:10]:
        sys.stdout.write(json.dumps(m)[:2000] + "\n")
    return 0 if not report.mismatches else 1


def _shared_config() -> Path:
    for cand in (os.environ.get("AGENTGYM_SHARED_DATA"), Path(__file__).resolve().parents[3] / "shared" / "data"):
        if cand and (Path(cand) / "alfworld" / "base_config.yaml").is_file():
            return Path(cand) / "alfworld" / "base_config.yaml"
    raise SystemExit("alfworld's base_config.yaml not found: set AGENTGYM_SHARED_DATA or pass --config")


if __name__ == "__main__":
    sys.exit(main())
