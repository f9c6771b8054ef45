"""Section 4 of benchmarks/retrieval.py: index types for corpora past one machine's memory, on synthetic vectors.

For ``n`` (default 1,000,000) synthetic 384-d unit vectors (MiniLM's width) and 500 queries from the same
distribution, each index type is built with :mod:`retrieval.index`'s own construction (``factory_string``), written
to disk, read back and searched:

* memory: the index file's size and the resident memory (RSS) the process gains reading it, read normally and
  memory-mapped (``load_index(mmap=True)``: pages load as searches touch them, so the RSS after searching is also
  given);
* build time (training on a 100,000-vector sample + adding every vector), with ``faiss_threads`` OpenMP threads;
* queries/s searching the 500 queries in batches of 64 (as the server's batches) and the median latency of a
  single query, with the search thread limited like the server's (:func:`retrieval.index.limit_threads`);
* recall@10 against exact (Flat) search.

Flat split into 2 ``IndexShards`` (the multi-GPU path, on CPU) is a row too. HNSW is not built at this size on 2
cores: its build time is projected from a timed 20,000-vector build (``n log n``). The last table projects memory
for Search-R1's wiki-18 corpus, 21,015,324 passages x 768 (e5-base-v2's width).

The vectors: ``n_clusters`` Gaussian clusters whose centres and spreads follow a power-law spectrum over the
dimensions (real sentence embeddings are anisotropic and clustered; uniform random vectors are neither, and on them
every approximate index looks far worse than on real data). Recall on real embeddings differs: section 5 has IVF and
HNSW recall on the real MiniLM vectors of the HotpotQA corpus.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from pathlib import Path

import numpy as np

WIKI18_PASSAGES = 21_015_324
E5_DIM = 768


def synthetic_vectors(n: int, dim: int, n_queries: int, seed: int = 0, n_clusters: int = 4096):
    """(vectors, queries): float32 unit vectors, clustered with a power-law spectrum (see the module docstring)."""
    rng = np.random.default_rng(seed)
    spectrum = (np.arange(1, dim + 1, dtype=np.float32) ** -0.5)
    centres = rng.standard_normal((n_clusters, dim), dtype=np.float32) * spectrum

    def draw(m: int) -> np.ndarray:
        out = np.empty((m, dim), dtype=np.float32)
        for a in range(0, m, 200_000):
            b = min(m, a + 200_000)
            x = centres[rng.integers(0, n_clusters, b - a)]
            x += 0.6 * rng.standard_normal((b - a, dim), dtype=np.float32) * spectrum
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            out[a:b] = x
        return out

    return draw(n), draw(n_queries)


def rss_bytes() -> tuple[int, int]:
    """(anonymous, file-backed) resident bytes of this process: a read index is anonymous memory, a memory-mapped
    one file pages (which the kernel can drop and re-read)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out.get("RssAnon", 0), out.get("RssFile", 0)


def _timed_search(index, queries, k=10):
    single = []
    for q in queries[:50]:
        t = time.perf_counter()
        index.search(q[None, :], k)
        single.append(time.perf_counter() - t)
    t = time.perf_counter()
    ids = np.concatenate([index.search(queries[a:a + 64], k)[1] for a in range(0, len(queries), 64)])
    return ids, len(queries) / (time.perf_counter() - t), 1e3 * statistics.median(single)


def _recall(ids, truth) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(ids.tolist(), truth.tolist())]))


def _set_nprobe(index, nprobe):
    from retrieval.index import _try_extract_ivf

    ivf = _try_extract_ivf(index)
    if ivf is not None:  # None: not an IVF index (Flat)
        ivf.nprobe = nprobe


def section_scale(n: int, cache: Path, lines: list[str], faiss_threads: int, progress=print) -> None:
    import faiss

    from retrieval.index import IndexParams, _new_faiss_index, limit_threads, shard_index

    dim, nprobe, m = 384, 16, 48
    nlist = 1024 if n >= 500_000 else max(16, int(4 * math.sqrt(n)) // 4)
    load_start = os.getloadavg()
    progress(f"4. scale: generating {n:,} x {dim} vectors")
    x, queries = synthetic_vectors(n, dim, 500)
    train = x[np.random.default_rng(1).choice(n, min(n, 100_000), replace=False)]
    limit_threads(faiss_threads)
    params = IndexParams(nlist=nlist, nprobe=nprobe, pq_m=m)
    params96 = IndexParams(nlist=nlist, nprobe=nprobe, pq_m=2 * m)
    kinds = [("flat", "Flat (exact)", params), ("ivf", f"IVF{nlist},Flat", params),
             ("ivfpq", f"IVF{nlist},PQ{m}", params), ("ivfpq", f"IVF{nlist},PQ{2 * m}", params96),
             ("opq", f"OPQ{m},IVF{nlist},PQ{m}", params)]
    rows, truth = [], None
    path = cache / "scale-index.faiss"
    for kind, label, kparams in kinds:
        progress(f"   {label}: build")
        t = time.perf_counter()
        index = _new_faiss_index(kind, dim, n, kparams, train)  # the package's own construction
        index.add(x)
        build = time.perf_counter() - t
        _set_nprobe(index, nprobe)
        faiss.write_index(index, str(path))
        size = path.stat().st_size
        del index
        gc.collect()
        for mmap in (False, True):
            progress(f"   {label}: search ({'mmap' if mmap else 'in memory'})")
            before = rss_bytes()
            flags = (faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY) if mmap else 0
            index = faiss.read_index(str(path), flags)
            loaded = tuple(max(0, a - b) for a, b in zip(rss_bytes(), before))
            _set_nprobe(index, nprobe)
            ids, qps, p50 = _timed_search(index, queries)
            after = tuple(max(0, a - b) for a, b in zip(rss_bytes(), before))
            if truth is None:
                truth = ids
            rows.append((label + (", mmap" if mmap else ""), build if not mmap else None, size, loaded, after,
                         qps, p50, _recall(ids, truth)))
            if kind == "flat" and not mmap:
                progress("   Flat in 2 IndexShards")
                sharded = shard_index(index, 2)
                sids, sqps, sp50 = _timed_search(sharded, queries)
                rows.append(("Flat, 2 IndexShards (CPU)", None, size, None, None, sqps, sp50, _recall(sids, truth)))
                del sharded
            del index
            gc.collect()
    path.unlink(missing_ok=True)
    progress("   HNSW: a 20,000-vector build for the projection")
    t = time.perf_counter()
    h = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
    h.hnsw.efConstruction = 200
    h.add(x[:20_000])
    t_small = time.perf_counter() - t
    hnsw_projected = t_small * (n / 20_000) * math.log(n) / math.log(20_000)
    del h, x, train
    gc.collect()

    load_end = os.getloadavg()
    lines.append(f"## 4. Index types at scale: {n:,} synthetic {dim}-d vectors (faiss-cpu, top 10)\n")
    lines.append(f"Clustered vectors with a power-law spectrum (benchmarks/retrieval_scale.py); 500 queries from the "
                 f"same distribution; recall@10 against Flat. Build = training on a 100,000-vector sample + adding "
                 f"all vectors, {faiss_threads} faiss thread(s); search with {faiss_threads} thread(s), batches of "
                 f"64 (q/s) and single queries (median ms); nprobe {nprobe}. Resident memory the process gains "
                 f"reading the file, after loading and after the 550 searches, as heap (anonymous) + file-backed "
                 f"pages (the mapped file's pages the searches touched; the kernel can drop them). Load average "
                 f"(1 min) at the start "
                 f"{load_start[0]:.1f}, at the end {load_end[0]:.1f}.\n")
    lines.append("| index | build (s) | file (MB) | bytes/vector | resident after load: heap + file (MB) | "
                 "after searching: heap + file (MB) | batch 64: q/s | batch 1: median ms | recall@10 |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    mb = 1024 * 1024
    for label, build, size, loaded, after, qps, p50, rec in rows:
        def mem(x):
            return "-" if x is None else f"{x[0] / mb:,.0f} + {x[1] / mb:,.0f}"

        lines.append(f"| {label} | {'-' if build is None else f'{build:.0f}'} | {size / mb:,.0f} | {size / n:.0f} | "
                     f"{mem(loaded)} | {mem(after)} | {qps:,.0f} | {p50:.2f} | {rec:.3f} |")
    lines.append(f"| HNSW32 (efConstruction 200) | not built: ~{hnsw_projected / 60:.0f} min projected | - | - | - | - | "
                 f"- | - | - |")
    lines.append(f"\nHNSW: a 20,000-vector build took {t_small:.1f} s; x (n / 20,000) x log n / log 20,000 gives "
                 f"~{hnsw_projected / 60:.0f} min for {n:,} (section 2b times HNSW at 100,000).\n")

    n21, d = WIKI18_PASSAGES, E5_DIM
    nl, m21 = 65536, d // 8
    gb = 1e9
    proj = [("Flat", n21 * d * 4, "the vectors (Search-R1's e5_Flat.index)"),
            (f"IVF{nl},Flat", n21 * (d * 4 + 8) + nl * d * 4, "vectors + 8-byte ids + centroids"),
            (f"IVF{nl},PQ{m21}", n21 * (m21 + 8) + nl * d * 4 + m21 * 256 * (d // m21) * 4,
             f"{m21}-byte codes + ids + centroids + codebooks"),
            (f"OPQ{m21},IVF{nl},PQ{m21}", n21 * (m21 + 8) + nl * d * 4 + m21 * 256 * (d // m21) * 4 + d * d * 4,
             "as IVF-PQ + the rotation"),
            ("HNSW32", n21 * (d * 4 + 32 * 2 * 4 + 16), "vectors + a 64-link graph level 0 (+ upper levels)")]
    lines.append(f"Projected index memory for Search-R1's wiki-18 ({n21:,} passages x {d}, e5-base-v2):\n")
    lines.append("| index | memory (GB) | what |\n|---|---:|---|")
    for label, size, what in proj:
        lines.append(f"| {label} | {size / gb:,.1f} | {what} |")
    lines.append("\nThe measured PQ48 at 384 dimensions has 8 dimensions per sub-quantizer, like PQ96 at 768: its recall is "
                 "the closer guide to wiki-18's compressed rows (re-ranking the top hits with exact vectors, or a "
                 "larger nprobe, trades memory or time back for recall).\n")
    lines.append("Flat and HNSW need a machine with that much RAM (or, sharded, that much GPU memory across GPUs: "
                 "`--shards` / several GPUs); IVF-PQ and OPQ fit in a few GB, at the recall cost measured above; "
                 "`--mmap` serves any of them from disk through the page cache.\n")
