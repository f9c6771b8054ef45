"""Load generator of benchmarks/retrieval.py: keep-alive HTTP clients in separate processes, and server processes.

A *cell* of the load table is ``run_cell(url, clients, queries_per_request, ...)``: ``clients`` concurrent
keep-alive connections (asyncio, raw sockets, spread over at most two client processes), each sending
``POST /retrieve`` with ``queries_per_request`` HotpotQA questions and waiting for the answer before sending the
next request, as a trainer's rollout worker does with a ``requests.Session``. Every answer is checked: HTTP 200, a
JSON ``result`` with one list per query and ``topk`` documents per list (``min_hits`` for BM25, which may return
fewer). A non-200 answer or a malformed one is an *error*; a connection closed or reset by the server is a *drop*
(the client reconnects, at most ``max_reconnects`` times). Loops are bounded by a duration and a request count.

Servers run as their own processes (``start_server``), so their thread settings and their CPU use are their own.
Only 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import random
import subprocess
import time
from dataclasses import dataclass

HOST = "127.0.0.1"


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def _request_bytes(port: int, queries: list[str], topk: int) -> bytes:
    body = json.dumps({"queries": queries, "topk": topk, "return_scores": True}).encode()
    head = (f"POST /retrieve HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head + body  # one write, as requests/http.client send a bytes body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length is None:
        raise ConnectionError("no Content-Length in the answer")
    return status, await reader.readexactly(length)


async def _connection(port, pool, per_request, topk, min_hits, deadline, max_requests, max_reconnects, rng, out):
    reader = writer = None
    reconnects = 0
    sent = 0
    while sent < max_requests and time.perf_counter() < deadline:
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection(HOST, port, limit=2**26)
            except OSError:
                out["refused"] += 1
                if reconnects >= max_reconnects:
                    return
                reconnects += 1
                await asyncio.sleep(0.05)
                continue
        queries = [pool[rng.randrange(len(pool))] for _ in range(per_request)]
        request = _request_bytes(port, queries, topk)
        t = time.perf_counter()
        sent += 1
        try:
            writer.write(request)
            await writer.drain()
            status, body = await _read_response(reader)
        except (OSError, asyncio.IncompleteReadError, ConnectionError, ValueError):
            out["dropped"] += 1
            writer.close()
            reader = writer = None
            if reconnects >= max_reconnects:
                return
            reconnects += 1
            continue
        dt = time.perf_counter() - t
        ok = status == 200
        if ok:
            try:
                rows = json.loads(body)["result"]
                ok = len(rows) == per_request and all(min_hits <= len(r) <= topk for r in rows)
            except (ValueError, KeyError, TypeError):
                ok = False
        if ok:
            out["lat"].append(dt)
            out["queries"] += per_request
        else:
            out["errors"] += 1
            if len(out["samples"]) < 3:
                out["samples"].append(f"HTTP {status}: {body[:200]!r}")
    if writer is not None:
        writer.close()


def client_process(args: tuple) -> dict:
    """One client process: ``n_conns`` keep-alive connections until ``duration`` s or ``max_requests`` each."""
    port, n_conns, pool, per_request, topk, min_hits, duration, max_requests, seed = args
    out = {"lat": [], "queries": 0, "errors": 0, "dropped": 0, "refused": 0, "samples": []}

    async def main():
        deadline = time.perf_counter() + duration
        await asyncio.gather(*[_connection(port, pool, per_request, topk, min_hits, deadline, max_requests, 3,
                                           random.Random(seed * 1000 + i), out) for i in range(n_conns)])

    out["start"] = time.time()
    asyncio.run(main())
    out["end"] = time.time()
    return out


@dataclass
class CellResult:
    clients: int
    per_request: int
    qps: float
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    dropped: int
    samples: list


def run_cell(port: int, clients: int, per_request: int, pool: list[str], topk: int, min_hits: int,
             duration: float, max_requests: int = 100_000, seed: int = 0) -> CellResult:
    n_proc = min(2, clients)
    split = [clients // n_proc + (1 if i < clients % n_proc else 0) for i in range(n_proc)]
    ctx = mp.get_context("spawn")
    with ctx.Pool(n_proc) as procs:
        outs = procs.map(client_process, [(port, n, pool, per_request, topk, min_hits, duration, max_requests,
                                           seed * 10 + i) for i, n in enumerate(split)], chunksize=1)
    lat = [x for o in outs for x in o["lat"]]
    wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
    return CellResult(clients, per_request, sum(o["queries"] for o in outs) / wall, len(lat) / wall,
                      1e3 * pct(lat, 50), 1e3 * pct(lat, 99), len(lat), sum(o["errors"] for o in outs),
                      sum(o["dropped"] + o["refused"] for o in outs), [s for o in outs for s in o["samples"]])


class ServerProcess:
    """A server subprocess: ``cmd`` must print a line ending with its URL (``... on http://127.0.0.1:PORT ...``)
    once it listens. Stopped with SIGINT, then SIGKILL after ``grace`` seconds."""

    def __init__(self, cmd: list[str], log_path: str, env: dict | None = None, ready_timeout: float = 600.0):
        self.cmd, self.log_path = cmd, log_path
        # a file, not a pipe: a server that logs while nobody reads a pipe would block on a full pipe
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, **(env or {})))
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            with open(log_path) as f:
                for line in f:
                    if " on http://" in line:
                        url = line.split(" on ", 1)[1].split()[0]
                        self.url, self.port = url, int(url.rsplit(":", 1)[1].split("/")[0])
                        return
            time.sleep(0.2)
        self.stop()
        with open(log_path) as f:
            tail = f.read()[-4000:]
        raise RuntimeError(f"{' '.join(cmd)} did not start:\n{tail}")

    def stop(self, grace: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(2)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
