"""What the retrieval attack tests share: a real server process on 127.0.0.1 (``python -m retrieval serve``) whose
memory is read from ``/proc``, raw HTTP on sockets, and a *canary* in a process of its own (so that the attackers'
work in the test process never slows the canary's measurements) that keeps asking known queries and records every
latency and every wrong answer.

Every loop is bounded by a count or a deadline, every socket has a timeout, and every server is stopped.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOTPOT = "wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl"


# ---- the index and the server ------------------------------------------------------------------------------
def corpus_records(n: int) -> list[dict]:
    """``n`` HotpotQA paragraphs from the staged data; without it, the embedded demo encyclopedia repeated up to
    ``n`` passages (the attacks need many passages, not real ones)."""
    for root in (os.environ.get("AGENTGYM_SHARED_DATA"), REPO.parent / "shared" / "data"):
        path = Path(root) / HOTPOT if root else None
        if path is not None and path.is_file():
            with path.open(encoding="utf-8") as f:
                return [dict(json.loads(line), id=f"p{i}") for i, line in zip(range(n), f)]
    from agentgym.envs.wiki_search.tasks import demo_passages

    demo = demo_passages()
    return [dict(title=p["title"], text=p["text"] + f" (copy {i})", id=f"p{i}")
            for i, p in zip(range(n), (demo[i % len(demo)] for i in range(n)))]


def build_bm25_dir(out: Path, n: int = 2000) -> Path:
    """A BM25 index of :func:`corpus_records` saved in ``out``."""
    from retrieval.corpus import Corpus
    from retrieval.index import build_index
    from retrieval.types import Passage

    corpus = Corpus.from_passages([Passage(id=r["id"], title=r["title"], text=r["text"])
                                   for r in corpus_records(n)], "fuzz")
    build_index(corpus, "bm25").save(out)
    return out


class ServerProcess:
    """``python -m retrieval serve --index DIR --port 0 FLAGS...`` in a child process (its URL read from the line it
    prints); ``rss_mb()`` / ``peak_rss_mb()`` read ``VmRSS`` / ``VmHWM`` of that process from ``/proc``. A context
    manager: SIGINT (a graceful stop) at exit, then SIGKILL if it has not exited within 30 s."""

    def __init__(self, index_dir: Path, *flags: str, host: str = "127.0.0.1", env: dict | None = None):
        self.index_dir = index_dir
        self.cmd = [sys.executable, "-m", "retrieval", "serve", "--index", str(index_dir), "--host", host,
                    "--port", "0", *flags]
        self.env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.port = 0
        self.banner = ""

    def __enter__(self) -> "ServerProcess":
        self._log = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a full pipe would stall the server
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self._log, text=True, env=self.env,
                                     cwd=REPO)
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.proc.poll() is None:
            if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                self.banner = self.proc.stdout.readline()
                break
        sel.close()
        m = re.search(r"on (http://(\S+?):(\d+)) ", self.banner)
        if m is None:
            self.__exit__()
            raise RuntimeError(f"the server did not start: {self.banner!r} {self.log()[-2000:]}")
        self.url, self.port = m.group(1), int(m.group(3))
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:  # (the log file stays readable until this object goes)
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()

    def log(self) -> str:
        """What the server wrote to stderr so far."""
        self._log.seek(0)
        return self._log.read()

    def _status_kb(self, field: str) -> int:
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise RuntimeError(f"no {field} in /proc/{self.proc.pid}/status")

    def rss_mb(self) -> float:
        return self._status_kb("VmRSS") / 1024

    def peak_rss_mb(self) -> float:
        return self._status_kb("VmHWM") / 1024


# ---- raw HTTP ---------------------------------------------------------------------------------------------------
def request_bytes(port: int, body: bytes, path: str = "/retrieve", method: str = "POST",
                  headers: dict | None = None) -> bytes:
    hdrs = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json", "Content-Length": str(len(body)),
            **(headers or {})}
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items() if v is not None)
    return head.encode("latin-1") + b"\r\n" + body


def read_response(sock: socket.socket, timeout: float) -> tuple[int, dict, bytes] | None:
    """(status, headers with lowercased names, body) of one response, or None if the server closed first."""
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\r\n\r\n" not in buf:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 16)
        except (ConnectionResetError, socket.timeout):
            return None
        if not chunk:
            return None
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    n = int(headers.get("content-length", "0"))
    parts = [body]
    have = len(body)
    while have < n:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(min(1 << 20, n - have))
        if not chunk:
            break
        parts.append(chunk)
        have += len(chunk)
    return int(lines[0].split()[1]), headers, b"".join(parts)[:n]


def exchange(port: int, body: bytes, timeout: float = 60.0, **kw) -> tuple[int, dict, bytes] | None:
    """One request on a fresh connection; its response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request_bytes(port, body, **kw))
        return read_response(s, timeout)


def search_body(queries: list[str], topk: int = 3, return_scores: bool = True) -> bytes:
    return json.dumps({"queries": queries, "topk": topk, "return_scores": return_scores}).encode()


# ---- the canary ------------------------------------------------------------------------------------------------------
def _canary_main(port: int, queries: list[str], expected: dict, stop, out) -> None:
    """The canary process: one kept-alive connection (reopened if it breaks), one query per request, a 10 ms pause,
    until ``stop`` is set or 20,000 requests; puts (latencies, failures) on ``out``."""
    latencies: list[float] = []
    failures: list[str] = []
    sock = None
    for i in range(20_000):
        if stop.is_set():
            break
        q = queries[i % len(queries)]
        t0 = time.perf_counter()
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(request_bytes(port, search_body([q], 3)))
            r = read_response(sock, 30)
        except OSError as e:
            r, why = None, f"{type(e).__name__}: {e}"
        else:
            why = "closed without an answer"
        latencies.append(time.perf_counter() - t0)
        if r is None:
            failures.append(why)
            if sock is not None:
                sock.close()
            sock = None
            continue
        status, _, body = r
        got = [d["document"]["id"] for d in json.loads(body)["result"][0]] if status == 200 else status
        if got != expected[q]:
            failures.append(f"{q!r}: {got}")
        time.sleep(0.01)
    if sock is not None:
        sock.close()
    out.put((latencies, failures))


class Canary:
    """A canary process for the block's duration (see :func:`_canary_main`); after it, ``latencies``, ``failures``
    and ``p99``. ``expected`` maps each query to its hit ids (asked before the attack)."""

    def __init__(self, port: int, queries: list[str], expected: dict):
        ctx = mp.get_context("spawn")
        self._stop, self._out = ctx.Event(), ctx.Queue()
        self._proc = ctx.Process(target=_canary_main, args=(port, queries, expected, self._stop, self._out),
                                 daemon=True)
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def __enter__(self) -> "Canary":
        self._proc.start()
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(1.0)  # a few answers after the attack too
        self._stop.set()
        try:
            self.latencies, self.failures = self._out.get(timeout=60)
        finally:
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()

    @property
    def p99(self) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))] if xs else float("inf")


def expected_answers(port: int, queries: list[str]) -> dict:
    """Each query's hit ids at topk 3, asked one by one before an attack (what the canary must keep getting)."""
    out = {}
    for q in queries:
        status, _, body = exchange(port, search_body([q], 3))
        assert status == 200, (status, body[:200])
        out[q] = [d["document"]["id"] for d in json.loads(body)["result"][0]]
    return out
