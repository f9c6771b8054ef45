"""Index types for corpora past one machine's memory, and the search thread limit.

IVF-PQ, OPQ and ``faiss.index_factory`` strings build, save, load (also memory-mapped) and search with the same
answers; a Flat or IVF-family index split into 2 ``IndexShards`` on CPU answers exactly as the unsharded one (the
path multi-GPU sharding takes), and a sharded index saves as one file. The vectors are synthetic (clustered,
32-d) and queries are looked up by id (``q<i>``), so these tests need faiss but no text encoder. Recall and speed
at 1M vectors are measured in benchmarks/retrieval.py (section 4), not here.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from retrieval_testkit import need

need("faiss")

import faiss  # noqa: E402

from retrieval.corpus import Corpus  # noqa: E402
from retrieval.encoders import Encoder, EncoderConfig  # noqa: E402
from retrieval.index import (IndexParams, default_search_threads, dense_from_vectors, factory_string,  # noqa: E402
                             load_index, shard_index)
from retrieval.types import Passage  # noqa: E402

N, DIM = 8_000, 32


@pytest.fixture(scope="module", autouse=True)
def one_faiss_thread():
    """Training PQ/OPQ with OpenMP on cores other processes use collapses (spin-waits): one thread, restored."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


class LookupEncoder(Encoder):
    """Query ``q<i>`` is row i of a fixed matrix (FAISS is what is under test, not a text encoder)."""

    def __init__(self, matrix):  # noqa: super().__init__ would load a sentence-transformers model
        self.matrix, self.dim = matrix, matrix.shape[1]
        self.config = EncoderConfig(model="synthetic-lookup", normalize=True, max_seq_length=None)

    def encode_queries(self, queries, show_progress=False):
        return self.matrix[[int(q[1:]) for q in queries]]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((64, DIM)).astype(np.float32)
    x = centers[rng.integers(0, 64, N)] + 0.3 * rng.standard_normal((N, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.choice(N, 200, replace=False)] + 0.05 * rng.standard_normal((200, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    corpus = Corpus.from_passages([Passage(str(i), f"t{i}", f"passage {i}") for i in range(N)], "synthetic")
    return x, corpus, LookupEncoder(q)


QUERIES = [f"q{i}" for i in range(200)]


def _ids(index, k=10):
    return [[h.id for h in row] for row in index.search(QUERIES, k)]


def _same_up_to_ties(a, b) -> bool:
    """Equal hit lists, except that ids tied at the same score may come in another order, and ids tied at the last
    score may differ (PQ codes make exact ties common; merging shards breaks them in another order)."""
    for ra, rb in zip(a, b):
        sa, sb = [round(h.score, 4) for h in ra], [round(h.score, 4) for h in rb]
        if sa != sb:
            return False
        last = sa[-1] if sa else None
        above = lambda row: sorted((round(h.score, 4), h.id) for h in row if round(h.score, 4) != last)  # noqa: E731
        if above(ra) != above(rb):
            return False
    return len(a) == len(b)


def _recall(got, want):
    return float(np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got, want)]))


@pytest.fixture(scope="module")
def exact(data):
    x, corpus, enc = data
    return _ids(dense_from_vectors(corpus, "flat", enc, x, IndexParams(use_gpu=False)))


def test_factory_strings():
    p = IndexParams(nlist=1024, pq_m=48)
    assert factory_string("ivfpq", 384, 10**6, p) == "IVF1024,PQ48"
    assert factory_string("opq", 384, 10**6, p) == "OPQ48,IVF1024,PQ48"
    assert factory_string("ivfpq", 768, 21_000_000, IndexParams(nlist=65536)) == "IVF65536,PQ96"  # dim/8 bytes
    assert factory_string("ivfpq", 384, 10**6, IndexParams(nlist=1024, pq_m=48, pq_nbits=4)) == "IVF1024,PQ48x4"
    assert factory_string("factory", 64, 10, IndexParams(factory="HNSW32")) == "HNSW32"
    with pytest.raises(ValueError, match="divide"):
        factory_string("ivfpq", 384, 10**6, IndexParams(pq_m=50))
    with pytest.raises(ValueError, match="factory"):
        factory_string("factory", 64, 10, IndexParams())


@pytest.mark.parametrize("kind, params, min_recall", [
    ("ivf", IndexParams(nlist=64, nprobe=16), 0.9),
    ("ivfpq", IndexParams(nlist=64, nprobe=16, pq_m=8, pq_nbits=4), 0.15),
    ("opq", IndexParams(nlist=64, nprobe=16, pq_m=8, pq_nbits=4), 0.15),
    ("factory", IndexParams(factory="IVF64,SQ8", nprobe=16), 0.85),
])
def test_compressed_kinds_round_trip_and_mmap(kind, params, min_recall, data, exact, tmp_path):
    x, corpus, enc = data
    idx = dense_from_vectors(corpus, kind, enc, x, params.__class__(**{**params.to_dict(), "use_gpu": False}))
    got = _ids(idx)
    assert _recall(got, exact) >= min_recall  # a real approximation of exact search (chance: 10/8000)
    idx.save(tmp_path / kind)
    loaded = load_index(tmp_path / kind, encoder=enc, use_gpu=False)
    assert loaded.kind == kind and _ids(loaded) == got  # nprobe and the trained quantizers survive the round trip
    mapped = load_index(tmp_path / kind, encoder=enc, use_gpu=False, mmap=True)
    assert _ids(mapped) == got
    with open("/proc/self/maps") as f:
        assert str(tmp_path / kind / "index.faiss") in f.read()  # the file is mapped, not read into memory


@pytest.mark.parametrize("kind, params", [
    ("flat", IndexParams()), ("ivf", IndexParams(nlist=64, nprobe=8)),
    ("ivfpq", IndexParams(nlist=64, pq_m=8, pq_nbits=4)), ("opq", IndexParams(nlist=64, nprobe=8, pq_m=8, pq_nbits=4)),
])
def test_two_shards_answer_as_one_index(kind, params, data, tmp_path):
    x, corpus, enc = data
    one = dense_from_vectors(corpus, kind, enc, x, IndexParams(**{**params.to_dict(), "use_gpu": False}))
    two = dense_from_vectors(corpus, kind, enc, x, IndexParams(**{**params.to_dict(), "use_gpu": False, "shards": 2}))
    assert isinstance(two.index, faiss.IndexShards) and two.index.count() == 2
    assert [two.index.at(i).ntotal for i in range(2)] == [N // 2, N // 2]
    a = one.search(QUERIES, 10)
    assert _same_up_to_ties(a, two.search(QUERIES, 10))
    if kind in ("flat", "ivf"):  # no ties: the very same lists
        assert [[h.id for h in r] for r in a] == _ids(two)
    two.save(tmp_path / "sharded")  # saved as one index, loadable sharded or not
    assert _same_up_to_ties(a, load_index(tmp_path / "sharded", encoder=enc, use_gpu=False).search(QUERIES, 10))
    resharded = load_index(tmp_path / "sharded", encoder=enc, use_gpu=False, shards=3)
    assert resharded.index.count() == 3 and _same_up_to_ties(a, resharded.search(QUERIES, 10))


def test_hnsw_cannot_be_sharded(data):
    x, _corpus, _enc = data
    idx = faiss.IndexHNSWFlat(DIM, 8, faiss.METRIC_INNER_PRODUCT)
    idx.add(x[:500])
    with pytest.raises(ValueError, match="Flat and IVF"):
        shard_index(idx, 2)


def test_search_thread_limit_applies_in_the_searching_thread(data):
    """OpenMP thread counts are per calling thread: an explicit limit holds in whatever thread searches (the
    server's search thread calls prepare_search_thread, which also applies the automatic default); 0 leaves the
    libraries' defaults. (torch's and OpenBLAS's counts are process-wide: restored at the end.)"""
    import torch
    from threadpoolctl import threadpool_limits

    x, corpus, enc = data
    small = Corpus.from_passages(corpus.passages[:1000], "small")
    seen = {}

    def in_a_new_thread(key, fn):
        def run():
            fn()
            seen[key] = (faiss.omp_get_max_threads(), torch.get_num_threads())
        t = threading.Thread(target=run)
        t.start()
        t.join(60)

    torch_threads = torch.get_num_threads()
    with threadpool_limits(limits=None):  # restores the BLAS pools on exit
        try:
            one = dense_from_vectors(small, "flat", enc, x[:1000], IndexParams(use_gpu=False, omp_threads=1))
            in_a_new_thread("explicit", lambda: one.search(["q0"], 3))
            assert seen["explicit"] == (1, 1) and one.search_threads() == 1
            auto = dense_from_vectors(small, "flat", enc, x[:1000], IndexParams(use_gpu=False))
            assert auto.search_threads() == default_search_threads() >= 1
            in_a_new_thread("auto", auto.prepare_search_thread)
            assert seen["auto"] == (default_search_threads(), default_search_threads())
            lib = dense_from_vectors(small, "flat", enc, x[:1000], IndexParams(use_gpu=False, omp_threads=0))
            assert lib.search_threads() is None
        finally:
            torch.set_num_threads(torch_threads)
