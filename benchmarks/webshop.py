"""WebShop-v0: fidelity and cost, with the references measured in the same run.

    python benchmarks/webshop.py [--queries 2838] [--episodes 500] [--all-goals]

1. **Search**: our BM25 (Python analysis + Lucene-quantised BM25) against Anserini's top-50 lists for the 2,838
   reference queries (identical lists, identical first pages) and its latency per query; the reference in the same
   run is ``bm25s`` (``method="lucene"``, k1 0.9, b 0.4, exact lengths) over the *same* Lucene tokens, the usual
   pure-Python substitute: its agreement and latency, with the ratio (bm25s / ours: > 1 means we are faster).
2. **Reward**: the 6,000 reference cases (exact matches) and the cost per reward.
3. **Env**: construction, reset and step latency (p50/p99) under the oracle and the random policy.
4. **Scores**: the oracle's score and success on the test split (and on all 6,910 goals with ``--all-goals``), the
   ceiling computed directly from the reward (gold product + goal options), and the random policy's figures.
Prints markdown tables.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time

import numpy as np

import agentgym
from agentgym.data import find_data
from agentgym.envs.webshop.oracle import ceiling_reward
from agentgym.envs.webshop.reward import RewardGoal, get_reward
from agentgym.envs.webshop.search import BM25Index, analyze


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q))


def load_jsonl(name):
    with open(find_data(name), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def bench_search(catalog, refs):
    ids = [p.asin for p in catalog.products]
    toks = [catalog.doc_tokens[a] for a in ids]
    t0 = time.perf_counter()
    index = BM25Index(ids, toks)
    build = time.perf_counter() - t0
    times, same, page1 = [], 0, 0
    for q in refs:
        t0 = time.perf_counter()
        hits = [h.doc_id for h in index.search(analyze(q["query"]), 50)]
        times.append(time.perf_counter() - t0)
        ref = [h[0] for h in q["hits"]]
        same += hits == ref
        page1 += hits[:10] == ref[:10]
    rows = [("ours (Lucene-quantised BM25)", build, times, same, page1)]
    if importlib.util.find_spec("bm25s") is not None:
        import bm25s

        t0 = time.perf_counter()
        vocab = {t: i for i, t in enumerate(sorted({t for d in toks for t in d}))}
        retriever = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        retriever.index(bm25s.tokenization.Tokenized(ids=[[vocab[t] for t in d] for d in toks], vocab=vocab),
                        show_progress=False)
        build_ref = time.perf_counter() - t0
        times_ref, same_ref, page1_ref = [], 0, 0
        for q in refs:
            t0 = time.perf_counter()
            qt = [t for t in analyze(q["query"]) if t in vocab]
            if qt:
                docs, scores = retriever.retrieve([qt], k=50, show_progress=False, n_threads=1)
                # ties by id as Anserini does, and only positive scores
                pairs = sorted(((float(s), ids[int(d)]) for d, s in zip(docs[0], scores[0]) if s > 0),
                               key=lambda x: (-x[0], x[1]))
                hits = [a for _, a in pairs]
            else:
                hits = []
            times_ref.append(time.perf_counter() - t0)
            ref = [h[0] for h in q["hits"]]
            same_ref += hits == ref
            page1_ref += hits[:10] == ref[:10]
        rows.append(("bm25s 0.3 method=lucene (exact lengths)", build_ref, times_ref, same_ref, page1_ref))
    n = len(refs)
    print(f"\n### Search: {n} reference queries against Anserini's top-50\n")
    print("| engine | build (s) | identical top-50 | identical page 1 | p50 (ms) | p99 (ms) | ratio (p50) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = pct(rows[0][2], 50)
    for name, b, ts, s, p in rows:
        print(f"| {name} | {b:.3f} | {s}/{n} ({100 * s / n:.1f}%) | {p}/{n} ({100 * p / n:.1f}%) | "
              f"{1e3 * pct(ts, 50):.3f} | {1e3 * pct(ts, 99):.3f} | {pct(ts, 50) / base:.2f} |")


def bench_reward(catalog, cases):
    times, exact = [], 0
    for c in cases:
        gold = catalog.by_asin[c["goal_asin"]]
        goal = RewardGoal(gold.title, gold.query, gold.product_category, tuple(c["goal_attributes"]),
                          c["goal_options"], c["price_upper"], tuple(catalog.nouns[gold.asin]))
        p = catalog.by_asin[c["purchased_asin"]]
        t0 = time.perf_counter()
        total, info = get_reward(p, goal, c["price"], c["purchased_options"], catalog.nouns[p.asin])
        times.append(time.perf_counter() - t0)
        exact += total == c["reward"] and info == c["info"]
    print(f"\n### Reward: {len(cases)} reference cases\n")
    print("| exact (reward and breakdown) | p50 (ms) | p99 (ms) | total (s) |")
    print("|---:|---:|---:|---:|")
    print(f"| {exact}/{len(cases)} | {1e3 * pct(times, 50):.3f} | {1e3 * pct(times, 99):.3f} | {sum(times):.2f} |")


def play(env, task_ids, policy, seed=0):
    rng = np.random.default_rng(seed)
    resets, steps, scores, wins, turns = [], [], [], 0, []
    for k, tid in enumerate(task_ids):
        t0 = time.perf_counter()
        env.reset(seed=k, options={"task_id": tid})
        resets.append(time.perf_counter() - t0)
        info = {"score": 0.0, "won": False, "turn": 0}
        while True:
            action = env.oracle_action() if policy == "oracle" else env.random_action(rng)
            t0 = time.perf_counter()
            _, _, term, trunc, info = env.step(action)
            steps.append(time.perf_counter() - t0)
            if term or trunc:
                break
        scores.append(info["score"])
        wins += info["won"]
        turns.append(info["turn"])
    return resets, steps, scores, wins, turns


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=2838)
    ap.add_argument("--episodes", type=int, default=500, help="test-split episodes per policy")
    ap.add_argument("--all-goals", action="store_true", help="also run the oracle on all 6,910 goals")
    args = ap.parse_args()

    t0 = time.perf_counter()
    env = agentgym.make("WebShop-v0", split="test")
    t_make = time.perf_counter() - t0
    t0 = time.perf_counter()
    agentgym.make("WebShop-v0", split="test")
    t_make2 = time.perf_counter() - t0
    catalog = env.catalog
    print(f"make (cold: catalogue, noun table, BM25 index): {t_make:.3f} s; warm: {1e3 * t_make2:.1f} ms")

    bench_search(catalog, load_jsonl("webshop/reference/bm25_top50_reference.jsonl")[:args.queries])
    bench_reward(catalog, load_jsonl("webshop/reference/reward_cases_seed0.jsonl"))

    print(f"\n### Env: {args.episodes} test-split episodes per policy (max 15 turns)\n")
    print("| policy | score (x100) | success (%) | mean turns | reset p50 (ms) | reset p99 (ms) | step p50 (ms) | "
          "step p99 (ms) | steps/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ids = env.task_ids(args.episodes)
    for policy in ("oracle", "random"):
        resets, steps, scores, wins, turns = play(env, ids, policy)
        print(f"| {policy} | {100 * np.mean(scores):.1f} | {100 * wins / len(ids):.1f} | {np.mean(turns):.2f} | "
              f"{1e3 * pct(resets, 50):.3f} | {1e3 * pct(resets, 99):.3f} | {1e3 * pct(steps, 50):.3f} | "
              f"{1e3 * pct(steps, 99):.3f} | {len(steps) / sum(steps):.0f} |")

    print("\n### Ceiling (gold product + goal options, from the reward) vs the oracle through the pages\n")
    print("| goals | n | ceiling success (%) | ceiling score (x100) | oracle success (%) | oracle score (x100) |")
    print("|---|---:|---:|---:|---:|---:|")
    sets = [("seed-0 test (0-499)", "test", 0, args.episodes), ("human (13)", "human", 0, None),
            ("verl-agent first validation batch (128 worker seeds)", "verl-agent-val", 0, None)]
    if args.all_goals:
        sets += [("seed-0 all 6,910", "all", 0, None), ("seed-1000 first 500 (verl-agent val pool)", "test", 1000,
                                                         None)]
    for name, split, seed, n in sets:
        e = agentgym.make("WebShop-v0", split=split, goal_seed=seed)
        tids = e.task_ids(n)
        ceil = [ceiling_reward(e.get_task(t), catalog) for t in tids]  # each goal at its own seed's prices
        _, _, scores, wins, _ = play(e, tids, "oracle")
        print(f"| {name} | {len(tids)} | {100 * np.mean([c == 1.0 for c in ceil]):.1f} | {100 * np.mean(ceil):.1f} "
              f"| {100 * wins / len(tids):.1f} | {100 * np.mean(scores):.1f} |")


if __name__ == "__main__":
    main()
