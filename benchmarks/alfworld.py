"""ALFWorld-v0 against alfworld 0.4.2's own ``AlfredTWEnv`` on the same games and the same commands, in one run.

Usage::

    python benchmarks/alfworld.py [--games 12] [--steps 30] [--envs 1,16,64] [--json OUT.json]

What it does:

1. Games: the generated split's first ``--games`` games (``--games 12``: two of each of the six families), staged in
   ALFWorld's layout (``$ALFWORLD_DATA/json_2.1.1/valid_unseen/<task>/<trial>/``) for ``AlfredTWEnv``.
2. Commands: a script of episodes, three per game -- the game's expert walkthrough, ``--steps`` uniform admissible
   commands, and ``--steps`` perturbed commands (walkthrough and admissible commands mixed with ones the engine
   answers ``Nothing happens.``: other letter case, doubled spaces, a final period, ``put X in Y``, commands
   admissible earlier, a receptacle the room lacks, non-commands, the empty command). Episodes are ordered game by
   game within each kind, so every reset loads another game than the one before. The script is made by playing
   ALFWorld-v0 once, in this (coordinating) process.
3. Timing: two worker processes, one per arm, replay the script episode by episode, *interleaved* (arm A plays
   episode k, then arm B plays episode k; who goes first alternates), so both meet the same machine load:

   * ``ALFWorld-v0``: ``agentgym.make("ALFWorld-v0", rules="canonical")``,
     ``reset(options={"task_id": "file:<path>"})``, ``step("<action>cmd</action>")`` -- the whole env, prompt and
     ``info`` included;
   * ``AlfredTWEnv``: alfworld's ``AlfredTWEnv(base_config.yaml, "eval_out_of_distribution").init_env(1)``, stock
     alfworld/textworld in a process that never imports agentgym, ``reset()`` (which loads the next game) and
     ``step([cmd])``. The eval mode has no expert wrapper (``train`` mode would add alfworld's handcoded expert to
     every step, which ALFWorld-v0 only runs on demand), so this is the faster of its two configurations. Only the
     order of its game cycle is set, to the script's.

   Each reset and step is timed (wall and process CPU). Every episode's observations, admissible lists and ``won``
   are digested in both workers and must agree (the run fails otherwise).
4. Memory and many envs: for each N in ``--envs``, a fresh process per arm builds N envs, resets each on a game of
   the set, steps each through its first ``--multi-steps`` walkthrough commands round-robin, and reports the RSS
   it gained per live env (over the same process after its imports) and the steps/s of the round-robin.

Prints markdown tables with the ratios (AlfredTWEnv / ALFWorld-v0; > 1: ALFWorld-v0 faster or smaller) and writes
everything to ``--json``. Resets are split into a game's first load in the process (*cold*: Fast Downward
translates the problem) and later loads of a game already seen by the process (*warm*: ALFWorld-v0 keeps recent
translations in-process; ``AlfredTWEnv`` translates every time).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARMS = ("ALFWorld-v0", "AlfredTWEnv")
NOTHING = "Nothing happens."


def _drop_benchmarks_dir() -> None:
    # This script is itself named alfworld.py: drop its folder from the path so `import alfworld` is the package.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    sys.modules.pop("alfworld", None)


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _digest(h, obs: str, admissible: list[str], won: bool) -> None:
    h.update(json.dumps([obs, sorted(admissible), bool(won)], ensure_ascii=False).encode())


# ---- the script --------------------------------------------------------------------------------------------------
def _perturb(cmd: str, rng, adm: list[str], seen: list[str]) -> str:
    k = int(rng.integers(8))
    if k == 0:
        return cmd.upper()
    if k == 1:
        return cmd.replace(" ", "  ", 1)
    if k == 2:
        return cmd + "."
    if k == 3:
        moves = [a for a in adm if a.startswith("move ")]
        if moves:
            obj, _, recep = moves[int(rng.integers(len(moves)))][5:].partition(" to ")
            return f"put {obj} in {recep}"
        return "put book 2 in diningtable 1"
    if k == 4:
        stale = [c for c in seen if c not in adm]
        return stale[int(rng.integers(len(stale)))] if stale else "open safe 1"
    if k == 5:
        return "go to cabinet 37"
    if k == 6:
        return ("dance wildly", "take apple 1", "look around")[int(rng.integers(3))]
    return ""


def make_script(games: int, steps: int, data_root: Path) -> list[dict]:
    """Episodes (game file, kind, commands), made by playing ALFWorld-v0 (whose outputs equal AlfredTWEnv's)."""
    import numpy as np

    import agentgym
    from agentgym.envs.alfworld.games import generated_game

    staged = []
    for i in range(games):
        trial = Path(generated_game(i).gamefile).parent
        dst = data_root / "json_2.1.1" / "valid_unseen" / trial.parent.name / trial.name
        if not dst.exists():
            shutil.copytree(trial, dst)
        staged.append(str(dst / "game.tw-pddl"))
    env = agentgym.make("ALFWorld-v0", rules="canonical", max_turns=50)
    script = []
    for kind in ("walkthrough", "random", "perturbed"):
        for gi, game in enumerate(staged):
            rng = np.random.default_rng([gi, len(kind)])
            walkthrough = json.loads(Path(game).read_text())["walkthrough"]
            env.reset(options={"task_id": f"file:{game}"})
            commands: list[str] = []
            seen = list(env._state.admissible)
            pos = 0
            for _ in range(len(walkthrough) if kind == "walkthrough" else steps):
                adm = list(env._state.admissible)
                nxt = walkthrough[pos] if pos < len(walkthrough) else None
                if kind == "walkthrough":
                    cmd = nxt
                    pos += 1
                elif kind == "random":
                    cmd = adm[int(rng.integers(len(adm)))]
                else:
                    u = rng.random()
                    if u < 0.3 and nxt is not None and nxt in adm:
                        cmd = nxt
                        pos += 1
                    elif u < 0.55:
                        cmd = adm[int(rng.integers(len(adm)))]
                    else:
                        base = nxt if nxt is not None and rng.random() < 0.5 else adm[int(rng.integers(len(adm)))]
                        cmd = _perturb(base, rng, adm, seen)
                commands.append(cmd)
                _, _, term, trunc, _ = env.step(f"<action>{cmd}</action>")
                seen.extend(a for a in env._state.admissible if a not in seen)
                if term or trunc:
                    break
            script.append({"game": game, "kind": kind, "commands": commands})
    env.close()
    return script


# ---- the arms (worker processes) ---------------------------------------------------------------------------------
class _OursArm:
    def __init__(self):
        import agentgym

        self.make = lambda: agentgym.make("ALFWorld-v0", rules="canonical", max_turns=50)
        self.env = None

    def new_env(self):
        return self.make()

    @staticmethod
    def reset(env, game: str):
        obs, info = env.reset(options={"task_id": f"file:{game}"})
        return obs, list(env._state.admissible), info["won"]

    @staticmethod
    def step(env, cmd: str):
        obs, _, term, trunc, info = env.step(f"<action>{cmd}</action>")
        return obs, list(env._state.admissible), info["won"], term or trunc


class _NextGame:
    """Stands in for TextworldBatchGymEnv's shuffled game cycle: yields the game the script plays next."""

    def __init__(self):
        self.game = None

    def __iter__(self):
        return self

    def __next__(self):
        return self.game


class _AlfredArm:
    def __init__(self, config: str):
        import yaml
        from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

        with open(config) as f:
            cfg = yaml.safe_load(f)
        saved, sys.stdout = sys.stdout, sys.stderr  # AlfredTWEnv prints progress
        try:
            self.tw = AlfredTWEnv(cfg, train_eval="eval_out_of_distribution")
        finally:
            sys.stdout = saved

    def new_env(self):
        saved, sys.stdout = sys.stdout, sys.stderr
        try:
            env = self.tw.init_env(batch_size=1)
        finally:
            sys.stdout = saved
        env._gamefiles_iterator = _NextGame()
        return env

    @staticmethod
    def reset(env, game: str):
        env._gamefiles_iterator.game = game
        obs, infos = env.reset()
        if infos["extra.gamefile"][0] != game:
            raise RuntimeError(f"AlfredTWEnv loaded {infos['extra.gamefile'][0]}, not {game}")
        return obs[0], list(infos["admissible_commands"][0]), bool(infos["won"][0])

    @staticmethod
    def step(env, cmd: str):
        obs, _, dones, infos = env.step([cmd])
        return obs[0], list(infos["admissible_commands"][0]), bool(infos["won"][0]), bool(dones[0])


def _arm(name: str, config: str):
    if name == "AlfredTWEnv":
        return _AlfredArm(config)
    return _OursArm()


def worker(name: str, script_path: str, config: str) -> int:
    """Replay episodes on request: one JSON line in (``{"episode": k}`` or ``{"close": true}``), one out."""
    _drop_benchmarks_dir()
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    script = json.loads(Path(script_path).read_text())
    arm = _arm(name, config)
    env = arm.new_env()
    seen_games: set[str] = set()
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("close"):
            out.write(json.dumps({"rss_kb": _rss_kb(), "agentgym_imported": "agentgym" in sys.modules,
                                  "cpu_s": time.process_time()}) + "\n")
            return 0
        ep = script[req["episode"]]
        h = hashlib.sha256()
        w0, c0 = time.perf_counter(), time.process_time()
        obs, adm, won = arm.reset(env, ep["game"])
        reset = (time.perf_counter() - w0, time.process_time() - c0)
        _digest(h, obs, adm, won)
        steps = []
        for cmd in ep["commands"]:
            w0, c0 = time.perf_counter(), time.process_time()
            obs, adm, won, done = arm.step(env, cmd)
            steps.append((time.perf_counter() - w0, time.process_time() - c0))
            _digest(h, obs, adm, won)
            if done:
                break
        out.write(json.dumps({"reset": reset, "cold": ep["game"] not in seen_games, "steps": steps,
                              "digest": h.hexdigest()}) + "\n")
        seen_games.add(ep["game"])
    return 0


def multi(name: str, script_path: str, config: str, n_envs: int, steps: int) -> int:
    """N live envs in this process: RSS gained per env, and steps/s round-robin."""
    _drop_benchmarks_dir()
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    script = [ep for ep in json.loads(Path(script_path).read_text()) if ep["kind"] == "walkthrough"]
    arm = _arm(name, config)
    # Modules both arms' envs import go into the baseline, not into the per-env figure.
    import alfworld.agents.environment.alfred_tw_env  # noqa: F401
    import fast_downward  # noqa: F401
    import textworld.envs  # noqa: F401
    if name == "ALFWorld-v0":
        import agentgym.envs.alfworld.fastpddl  # noqa: F401
    base = _rss_kb()
    envs = [arm.new_env() for _ in range(n_envs)]
    t0 = time.perf_counter()
    for i, env in enumerate(envs):
        arm.reset(env, script[i % len(script)]["game"])
    reset_s = time.perf_counter() - t0
    n_steps = 0
    t0 = time.perf_counter()
    for k in range(steps):
        for i, env in enumerate(envs):
            cmds = script[i % len(script)]["commands"]
            if k < len(cmds) - 1:  # stop before the winning command: every env stays live
                arm.step(env, cmds[k])
                n_steps += 1
    step_s = time.perf_counter() - t0
    rss = _rss_kb()
    out.write(json.dumps({"arm": name, "envs": n_envs, "rss_base_kb": base, "rss_kb": rss,
                          "rss_per_env_kb": (rss - base) / n_envs, "reset_s": reset_s, "steps": n_steps,
                          "step_s": step_s, "agentgym_imported": "agentgym" in sys.modules}) + "\n")
    return 0


# ---- the coordinator ---------------------------------------------------------------------------------------------
class _Worker:
    def __init__(self, name: str, script: Path, config: Path, env: dict):
        self.name = name
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", name, "--script", str(script),
                                      "--config", str(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)

    def ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} worker exited (code {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> dict:
        res = self.ask(close=True)
        self.proc.wait(timeout=60)
        return res


def _pct(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def _fmt_ms(s: float) -> str:
    return f"{s * 1e3:,.1f}" if s * 1e3 >= 10 else f"{s * 1e3:.2f}"


def summarize(episodes: dict[str, list[dict]]) -> dict:
    out = {}
    for arm, eps in episodes.items():
        steps = [s for e in eps for s in e["steps"]]
        resets = [e["reset"] for e in eps]
        cold = [e["reset"] for e in eps if e["cold"]]
        warm = [e["reset"] for e in eps if not e["cold"]]
        step_wall = sum(s[0] for s in steps)
        reset_wall = sum(r[0] for r in resets)
        out[arm] = {
            "episodes": len(eps), "steps": len(steps),
            "step_p50_s": _pct([s[0] for s in steps], 50), "step_p99_s": _pct([s[0] for s in steps], 99),
            "step_mean_s": step_wall / len(steps), "step_cpu_p50_s": _pct([s[1] for s in steps], 50),
            "reset_p50_s": _pct([r[0] for r in resets], 50), "reset_p99_s": _pct([r[0] for r in resets], 99),
            "reset_mean_s": reset_wall / len(resets), "reset_cpu_p50_s": _pct([r[1] for r in resets], 50),
            "reset_cold_p50_s": _pct([r[0] for r in cold], 50), "reset_cold_n": len(cold),
            "reset_cold_p99_s": _pct([r[0] for r in cold], 99),
            "reset_cold_mean_s": sum(r[0] for r in cold) / len(cold) if cold else float("nan"),
            "reset_cold_cpu_p50_s": _pct([r[1] for r in cold], 50),
            "reset_cold_cpu_p99_s": _pct([r[1] for r in cold], 99),
            "reset_cold_cpu_mean_s": sum(r[1] for r in cold) / len(cold) if cold else float("nan"),
            "reset_warm_p50_s": _pct([r[0] for r in warm], 50), "reset_warm_n": len(warm),
            "steps_per_s": len(steps) / step_wall, "steps_per_s_with_resets": len(steps) / (step_wall + reset_wall),
            "total_wall_s": step_wall + reset_wall,
        }
    return out


def table(summary: dict, multi_rows: list[dict]) -> str:
    a, b = summary["ALFWorld-v0"], summary["AlfredTWEnv"]
    rows = [
        ("step p50 (ms)", "step_p50_s", True), ("step p99 (ms)", "step_p99_s", True),
        ("step mean = whole set (ms)", "step_mean_s", True), ("step CPU p50 (ms)", "step_cpu_p50_s", True),
        ("reset p50 (ms)", "reset_p50_s", True), ("reset p99 (ms)", "reset_p99_s", True),
        ("reset mean = whole set (ms)", "reset_mean_s", True), ("reset CPU p50 (ms)", "reset_cpu_p50_s", True),
        (f"cold reset p50: game's first load in the process (ms; n={a['reset_cold_n']})", "reset_cold_p50_s", True),
        ("cold reset p99 (ms)", "reset_cold_p99_s", True), ("cold reset mean (ms)", "reset_cold_mean_s", True),
        ("cold reset CPU p50 (ms)", "reset_cold_cpu_p50_s", True),
        ("cold reset CPU p99 (ms)", "reset_cold_cpu_p99_s", True),
        ("cold reset CPU mean (ms)", "reset_cold_cpu_mean_s", True),
        (f"reset p50, game seen before (ms; n={a['reset_warm_n']})", "reset_warm_p50_s", True),
        ("steps/s (steps only)", "steps_per_s", False), ("steps/s (resets included)", "steps_per_s_with_resets", False),
    ]
    lines = [f"episodes {a['episodes']}, steps {a['steps']} (same commands, same outputs in both)", "",
             "| measure | ALFWorld-v0 | AlfredTWEnv | ratio |", "|---|---:|---:|---:|"]
    for label, key, is_time in rows:
        if is_time:
            lines.append(f"| {label} | {_fmt_ms(a[key])} | {_fmt_ms(b[key])} | {b[key] / a[key]:.1f}x |")
        else:
            lines.append(f"| {label} | {a[key]:,.1f} | {b[key]:,.1f} | {a[key] / b[key]:.1f}x |")
    if multi_rows:
        lines += ["", "| live envs in one process | RSS per env: ALFWorld-v0 (MB) | AlfredTWEnv (MB) | ratio | "
                  "round-robin steps/s: ALFWorld-v0 | AlfredTWEnv | ratio | resets (s): ALFWorld-v0 | AlfredTWEnv |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        by = {(r["arm"], r["envs"]): r for r in multi_rows}
        for n in sorted({r["envs"] for r in multi_rows}):
            o, s = by.get(("ALFWorld-v0", n)), by.get(("AlfredTWEnv", n))
            if not (o and s):
                continue
            osps, ssps = o["steps"] / o["step_s"], s["steps"] / s["step_s"]
            lines.append(f"| {n} | {o['rss_per_env_kb'] / 1024:.1f} | {s['rss_per_env_kb'] / 1024:.1f} | "
                         f"{s['rss_per_env_kb'] / o['rss_per_env_kb']:.1f}x | {osps:,.0f} | {ssps:,.1f} | "
                         f"{osps / ssps:.1f}x | {o['reset_s']:.1f} | {s['reset_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=12, help="generated games gen-0.. (6 families round robin)")
    ap.add_argument("--steps", type=int, default=30, help="commands of the random and perturbed episodes")
    ap.add_argument("--envs", default="1,16,64", help="live env counts for the RSS / round-robin runs ('' = none)")
    ap.add_argument("--multi-steps", type=int, default=8, help="round-robin steps per env in those runs")
    ap.add_argument("--config", default=None, help="alfworld base_config.yaml (default: the staged shared copy)")
    ap.add_argument("--json", default=None, help="write every measurement here")
    ap.add_argument("--worker", choices=ARMS, help=argparse.SUPPRESS)
    ap.add_argument("--multi", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--script", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker and args.multi:
        return multi(args.worker, args.script, args.config, args.multi, args.multi_steps)
    if args.worker:
        return worker(args.worker, args.script, args.config)

    _drop_benchmarks_dir()
    config = Path(args.config) if args.config else _shared_config()
    root = Path(tempfile.mkdtemp(prefix="alfworld-bench-"))
    try:
        t = time.perf_counter()
        script = make_script(args.games, args.steps, root)
        script_path = root / "script.json"
        script_path.write_text(json.dumps(script))
        env = dict(os.environ, ALFWORLD_DATA=str(root), PYTHONHASHSEED="0")
        sys.stderr.write(f"script: {len(script)} episodes, {sum(len(e['commands']) for e in script)} commands "
                         f"({time.perf_counter() - t:.0f} s); load average {os.getloadavg()}\n")
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        load = [os.getloadavg()]
        workers = {name: _Worker(name, script_path, config, env) for name in ARMS}
        episodes: dict[str, list[dict]] = {name: [] for name in ARMS}
        for k in range(len(script)):
            order = ARMS if k % 2 == 0 else ARMS[::-1]
            for name in order:
                episodes[name].append(workers[name].ask(episode=k))
            if episodes["ALFWorld-v0"][-1]["digest"] != episodes["AlfredTWEnv"][-1]["digest"]:
                raise SystemExit(f"episode {k} ({script[k]['kind']} on {script[k]['game']}): the two arms' outputs "
                                 "differ")
            if k % 6 == 5:
                load.append(os.getloadavg())
                sys.stderr.write(f"  {k + 1}/{len(script)} episodes; load {load[-1]}\n")
        closed = {name: w.close() for name, w in workers.items()}
        if closed["AlfredTWEnv"]["agentgym_imported"]:
            raise SystemExit("the AlfredTWEnv worker imported agentgym: it must run the stock code")
        summary = summarize(episodes)
        multi_rows = []
        counts = [int(x) for x in args.envs.split(",") if x.strip()]
        for i, n in enumerate(counts):
            for name in (ARMS if i % 2 == 0 else ARMS[::-1]):
                res = subprocess.run([sys.executable, __file__, "--worker", name, "--multi", str(n), "--script",
                                      str(script_path), "--config", str(config), "--multi-steps",
                                      str(args.multi_steps)], capture_output=True, text=True, env=env, check=True)
                multi_rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
                load.append(os.getloadavg())
                sys.stderr.write(f"  {name} x{n}: {multi_rows[-1]['rss_per_env_kb'] / 1024:.1f} MB/env; "
                                 f"load {load[-1]}\n")
        text = table(summary, multi_rows)
        conditions = (f"{started}; {platform.python_implementation()} {platform.python_version()}, "
                      f"{os.cpu_count()} CPUs; load average (1, 5, 15 min) at start {load[0]}, max 1-min during the "
                      f"run {max(x[0] for x in load):.1f}")
        sys.stdout.write(f"conditions: {conditions}\n\n{text}\n")
        if args.json:
            Path(args.json).write_text(json.dumps({"conditions": conditions, "summary": summary, "multi": multi_rows,
                                                   "episodes": episodes, "load": load,
                                                   "script": [{k: e[k] for k in ("game", "kind")} | {
                                                       "n": len(e["commands"])} for e in script]}, indent=1))
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _shared_config() -> Path:
    for cand in (os.environ.get("AGENTGYM_SHARED_DATA"), HERE.parent.parent / "shared" / "data"):
        if cand and (Path(cand) / "alfworld" / "base_config.yaml").is_file():
            return Path(cand) / "alfworld" / "base_config.yaml"
    raise SystemExit("alfworld's base_config.yaml not found: set AGENTGYM_SHARED_DATA or pass --config")


if __name__ == "__main__":
    raise SystemExit(main())
