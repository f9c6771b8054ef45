"""ALFWorld-v0 speed: engine steps/s with agentgym's memoised engine vs stock TextWorld, measured in the same run.

Usage: ``python benchmarks/alfworld.py [--games 6] [--repeats 2]``. Both arms replay the expert walkthroughs of the
first ``--games`` generated games (built and cached on first use), resetting each game ``--repeats`` times, in
separate fresh processes (the speed-ups patch the process). Prints steps/s of each arm and the ratio fast/stock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def _arm(mode: str, games: int, repeats: int) -> dict:
    # This script is itself named alfworld.py: drop its folder from the path so `import alfworld` is the package.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.modules.pop("alfworld", None)
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs import PddlEnv

    from agentgym.envs.alfworld.games import generated_game

    files = [generated_game(i).gamefile for i in range(games)]  # generation happens before the clock starts
    walkthroughs = [json.load(open(f))["walkthrough"] for f in files]
    if mode == "fast":
        from agentgym.envs.alfworld.engine import install_speedups

        install_speedups()
    env = AlfredInfos(AlfredDemangler(PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True)),
                                      shuffle=False))
    steps, won = 0, 0
    t0 = time.perf_counter()
    for f, walk in zip(files, walkthroughs):
        env.load(f)
        for _ in range(repeats):
            env.reset()
            for cmd in walk:
                gs, _, done = env.step(cmd)
                steps += 1
            won += bool(gs["won"])
    dt = time.perf_counter() - t0
    return {"mode": mode, "steps": steps, "seconds": dt, "steps_per_s": steps / dt, "won": won,
            "episodes": games * repeats}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--games", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--arm", choices=["stock", "fast"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.arm:
        print(json.dumps(_arm(args.arm, args.games, args.repeats)))
        return 0
    res = {}
    for arm in ("stock", "fast"):
        out = subprocess.run([sys.executable, __file__, "--arm", arm, "--games", str(args.games), "--repeats",
                              str(args.repeats)], capture_output=True, text=True, check=True)
        res[arm] = json.loads(out.stdout.strip().splitlines()[-1])
        r = res[arm]
        print(f"{arm:>5}: {r['steps']} steps in {r['seconds']:.2f}s = {r['steps_per_s']:.1f} steps/s "
              f"({r['won']}/{r['episodes']} episodes won)")
    print(f"ratio fast/stock: {res['fast']['steps_per_s'] / res['stock']['steps_per_s']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
