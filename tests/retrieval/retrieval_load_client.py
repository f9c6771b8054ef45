"""A client process of the server load test (imported by spawned processes: keep it light)."""

from __future__ import annotations

import random


def run_client(args: tuple[str, int, int, list[str]]) -> list:
    """Send ``n_requests`` bounded requests of 1-8 queries; return (queries, topk, [(id, score), ...]) or the
    error text of each request."""
    url, seed, n_requests, pool = args
    from retrieval.client import RetrievalClient
    from retrieval.errors import RetrievalError

    rng = random.Random(seed)
    client = RetrievalClient(url, timeout=60)
    out = []
    for _ in range(n_requests):
        queries = rng.sample(pool, rng.randint(1, 8))
        topk = rng.randint(1, 5)
        try:
            rows = client.search(queries, topk)
            out.append((queries, topk, [[(h.id, h.score) for h in r] for r in rows]))
        except RetrievalError as e:
            out.append((queries, topk, f"{type(e).__name__}: {e}"))
    return out
