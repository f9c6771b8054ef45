"""AppWorld-v0 timings: fork-server start, worker fork, reset, time per step, evaluation; oracle TGC/SGC.

Run: ``python benchmarks/appworld.py [--split test] [--n 6]`` (needs ``agentgym appworld setup``). Prints a table;
the ratio column compares each phase with one plain ``python -I -c pass`` start of the AppWorld venv's interpreter
measured in the same run (the floor of any process start). The fork server imports AppWorld once per agentgym
process; every episode then forks a fresh worker from it and every evaluation a fresh evaluator.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="test")
    ap.add_argument("--n", type=int, default=6, help="episodes (oracle) to time")
    args = ap.parse_args(argv)

    import agentgym
    from agentgym.envs.appworld import ENTRY
    from agentgym.envs.appworld.env import scenario_goal_completion
    from agentgym.envs.appworld.pool import Worker, close_servers, get_server

    ok, why = ENTRY.split_available(args.split)
    if not ok:
        sys.stderr.write(f"skipped: {why}\n")
        return 0
    env = agentgym.make("AppWorld-v0", split=args.split)
    spec = env._spec()
    t0 = time.perf_counter()
    subprocess.run([spec.python, "-I", "-c", "pass"], check=True)
    python_start = time.perf_counter() - t0

    close_servers()
    t0 = time.perf_counter()
    get_server(spec.python, spec.limits.network, spec.scratch_dir)
    server_start = time.perf_counter() - t0
    forks = []
    for _ in range(5):
        w = Worker(spec)
        w.wait_ready()
        forks.append(w.ready_seconds or 0.0)
        w.dispose()

    resets, steps, evals, results = [], [], [], []
    for tid in env.task_ids()[: args.n]:
        t = time.perf_counter()
        env.reset(options={"task_id": tid})
        resets.append(time.perf_counter() - t)
        done = False
        while not done:
            t = time.perf_counter()
            obs, r, term, trunc, info = env.step(env.oracle_action())
            dt = time.perf_counter() - t
            done = term or trunc
            (evals if done else steps).append(dt)
        results.append((tid, info["won"]))
    env.close()
    rows = [("python -I start (reference)", python_start), ("fork server start (once per process)", server_start),
            ("worker fork to ready (median)", statistics.median(forks)),
            ("reset incl. fork (median)", statistics.median(resets)),
            ("step, code cell (median)", statistics.median(steps)),
            ("last step incl. fresh-process evaluation (median)", statistics.median(evals))]
    sys.stdout.write(f"{'phase':52s} {'seconds':>9s} {'x ref':>8s}\n")
    for name, sec in rows:
        sys.stdout.write(f"{name:52s} {sec:9.3f} {sec / python_start:8.1f}\n")
    tgc = sum(w for _, w in results) / len(results)
    sys.stdout.write(f"oracle on {len(results)} {args.split} tasks: TGC {tgc:.2%}, "
                     f"SGC {scenario_goal_completion(results):.2%}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
