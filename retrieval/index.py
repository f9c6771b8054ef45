"""Indexes behind one interface: FAISS Flat / IVF / HNSW / IVF-PQ / OPQ (any ``faiss.index_factory`` string) over
dense embeddings, and BM25 (bm25s, pure Python).

Every index is a :class:`Retriever`: ``search(queries, topk) -> list[list[Hit]]`` (one list per query, best first,
``min(topk, len(corpus))`` hits), ``save(dir)``, and ``metadata``. Build with :func:`build_index`, load with
:func:`load_index`.

An index directory holds ``meta.json`` (format version, kind, metric, dimension, encoder identity, corpus checksum,
passage count, parameters), ``passages.jsonl`` and the engine's files (``index.faiss`` or ``bm25/``). Loading
verifies the checksum of the passages and the vector count, and refuses an encoder whose identity differs from the
one recorded (:class:`~retrieval.errors.EncoderMismatchError`).

Dense indexes use inner product (cosine with the default normalized encoders) and run on GPUs when
``faiss.get_num_gpus() > 0`` (FAISS has no GPU HNSW, which stays on CPU); with several GPUs the index is *sharded*
across them (each GPU holds 1/n of the vectors, as Search-R1's server does), not replicated. For corpora past one
machine's memory (Search-R1's wiki-18: 21M passages x 768 = 64.5 GB as Flat): ``ivfpq`` / ``opq`` compress vectors
to ``pq_m`` bytes (``IVF{nlist},PQ{m}``, ``OPQ{m},IVF{nlist},PQ{m}``), ``factory`` takes any
``faiss.index_factory`` string, ``load_index(..., mmap=True)`` maps the index file instead of reading it, and
``shards=n`` splits a Flat or IVF-family index into a ``faiss.IndexShards`` of n parts (on CPU too, where it is
searched shard after shard). See benchmarks/RESULTS_retrieval.md for memory, build time, QPS and recall.

Threads: ``IndexParams.omp_threads`` bounds FAISS's OpenMP threads, the torch encoder's threads and BLAS pools. OpenMP
thread counts are per calling thread, so the limit is applied in the thread that searches: the server's search
thread calls :meth:`Retriever.prepare_search_thread` (default included); in-process, ``search`` applies an explicit
``omp_threads`` in each new thread that searches, and leaves the process alone by default (torch's and OpenBLAS's
counts are process-wide: a trainer that searches in-process keeps its own settings unless it asks).
Searches are serialized with a lock: concurrent BLAS calls from several threads oversubscribe the cores, so batching
queries (see :mod:`retrieval.server`) is the way to throughput. faiss's ``distance_compute_blas_threshold`` is
lowered (to 20 queries) so batched searches use BLAS.

faiss, torch and bm25s are imported lazily.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from .corpus import ChunkConfig, Corpus, load_corpus, write_corpus
from .encoders import Encoder, EncoderConfig, check_same_encoder, passage_text
from .errors import (BadRequestError, EmptyIndexError, EncoderMismatchError, IndexFormatError,
                     MissingDependencyError)
from .types import Hit, Passage

__all__ = ["IndexParams", "Retriever", "DenseIndex", "BM25Index", "build_index", "load_index", "INDEX_KINDS",
           "DENSE_KINDS", "FORMAT_VERSION", "default_search_threads", "limit_threads", "shard_index",
           "factory_string"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
DENSE_KINDS = ("flat", "ivf", "hnsw", "ivfpq", "opq", "factory")
INDEX_KINDS = DENSE_KINDS + ("bm25",)
#: kinds built with an inverted file (trained; ``nprobe`` applies; can be sharded like Flat)
_IVF_KINDS = ("ivf", "ivfpq", "opq")


def _faiss():
    try:
        import faiss
    except ImportError as e:
        raise MissingDependencyError("faiss-cpu", "dense (FAISS) indexes", extra="retrieval-dense") from e
    return faiss


@dataclass(frozen=True)
class IndexParams:
    """Engine parameters (ignored where they do not apply).

    Attributes:
        nlist: IVF cells (None: about 4*sqrt(n), at most n/39 so each cell has training points).
        nprobe: IVF cells visited per query.
        hnsw_m / ef_construction / ef_search: HNSW graph degree and beam widths.
        pq_m: sub-quantizers of ``ivfpq`` / ``opq`` (bytes per vector at 8 bits); must divide the dimension
            (None: dim/8).
        pq_nbits: bits per sub-quantizer code (8: 256 centroids each, FAISS's default).
        factory: the ``faiss.index_factory`` string of kind ``factory`` (inner product), e.g. ``"IVF4096,PQ48"``.
        use_gpu: None: GPU when faiss sees one; False: CPU; True: GPU or an error.
        shards: split the index into this many ``IndexShards`` parts (Flat and IVF kinds); on several GPUs the
            index is sharded across all of them whatever this says.
        blas_threshold: faiss's ``distance_compute_blas_threshold`` (batches of at least this many queries use
            BLAS; faiss-cpu's default 128000 keeps every batch off BLAS, while single queries are faster off it);
            None leaves faiss's value. A process-wide faiss setting.
        omp_threads: threads of a search -- FAISS's OpenMP, the torch encoder, BLAS pools. None (default): a quarter
            of the usable cores, between 1 and 8 (:func:`default_search_threads`), which suits cores shared with a
            trainer (OpenMP threads spin-wait and collapse when the cores are taken); 0: leave the libraries'
            defaults (every core); n: n.
        k1 / b: BM25 parameters (Pyserini's defaults, as Search-R1's BM25 baseline).
        stopwords: BM25 stopword list name (``"en"``) or None.
    """

    nlist: int | None = None
    nprobe: int = 16
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    pq_m: int | None = None
    pq_nbits: int = 8
    factory: str | None = None
    use_gpu: bool | None = None
    shards: int = 1
    blas_threshold: int | None = 20
    omp_threads: int | None = None
    k1: float = 0.9
    b: float = 0.4
    stopwords: str | None = "en"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "IndexParams":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def default_search_threads() -> int:
    """A quarter of the cores this process may use, at least 1 and at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(8, cores // 4))


def resolve_threads(omp_threads: int | None) -> int | None:
    """The thread count ``omp_threads`` stands for (None: leave the libraries alone)."""
    if omp_threads is None:
        return default_search_threads()
    if omp_threads < 0:
        raise ValueError(f"omp_threads must be >= 0, got {omp_threads}")
    return omp_threads or None


def limit_threads(n: int | None) -> None:
    """Bound FAISS's OpenMP, torch and BLAS threads *in the calling thread* (OpenMP's count is per thread) to n.
    Only libraries already imported are touched."""
    if n is None:
        return
    import sys

    if "faiss" in sys.modules:
        sys.modules["faiss"].omp_set_num_threads(n)
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=n)


def _check_request(queries: Sequence[str], topk: int) -> None:
    if isinstance(queries, str) or not isinstance(queries, (list, tuple)):
        raise BadRequestError("queries must be a list of strings")
    if not all(isinstance(q, str) for q in queries):
        raise BadRequestError("every query must be a string")
    if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
        raise BadRequestError(f"topk must be a positive integer, got {topk!r}")


class Retriever(ABC):
    """The common interface of every index (see the module docstring)."""

    kind: str

    def __init__(self, corpus: Corpus, params: IndexParams):
        self.corpus = corpus
        self.params = params
        self._lock = threading.Lock()
        self._threads_set = threading.local()

    def __len__(self) -> int:
        return len(self.corpus)

    @property
    def passages(self) -> tuple[Passage, ...]:
        return self.corpus.passages

    @abstractmethod
    def _search(self, queries: list[str], k: int) -> tuple[list[list[int]], list[list[float]]]:
        """Row indices and scores, best first, for k <= len(corpus)."""

    def search_threads(self) -> int | None:
        """The thread limit of this index's searches (None: the libraries' defaults)."""
        return resolve_threads(self.params.omp_threads)

    def prepare_search_thread(self) -> None:
        """Apply the thread limit in the calling thread (see the module docstring)."""
        limit_threads(self.search_threads())
        self._threads_set.done = True

    def search(self, queries: Sequence[str], topk: int = 3) -> list[list[Hit]]:
        """The ``topk`` best passages for each query (thread-safe; searches are serialized)."""
        _check_request(queries, topk)
        if not queries:
            return []
        if self.params.omp_threads and not getattr(self._threads_set, "done", False):
            self.prepare_search_thread()  # an explicit limit holds in any thread that searches
        k = min(int(topk), len(self.corpus))
        with self._lock:
            rows, scores = self._search(list(queries), k)
        out = []
        for r, s in zip(rows, scores):
            hits = [Hit(self.corpus.passages[i], float(v), rank) for rank, (i, v) in
                    enumerate((i, v) for i, v in zip(r, s) if i >= 0)]
            out.append(hits)
        return out

    def metadata(self) -> dict:
        return {"format_version": FORMAT_VERSION, "kind": self.kind, "n_passages": len(self.corpus),
                "corpus_checksum": self.corpus.checksum, "corpus_source": self.corpus.source,
                "chunking": self.corpus.chunking.to_dict(), "params": self.params.to_dict(), **self._meta()}

    def _meta(self) -> dict:
        return {}

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the index to ``directory`` (created; existing index files are replaced)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        write_corpus(self.corpus.passages, d / "passages.jsonl")
        self._save_engine(d)
        meta = dict(self.metadata(), created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        # meta.json last: a directory with meta.json is complete.
        (d / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return d

    @abstractmethod
    def _save_engine(self, d: Path) -> None: ...


class DenseIndex(Retriever):
    """A FAISS index of passage embeddings (kind ``flat``, ``ivf`` or ``hnsw``), with the encoder for queries."""

    def __init__(self, kind: str, corpus: Corpus, encoder: Encoder, index, params: IndexParams, on_gpu: bool):
        super().__init__(corpus, params)
        if kind not in DENSE_KINDS:
            raise ValueError(f"dense kind must be one of {DENSE_KINDS}, got {kind!r}")
        self.kind, self.encoder, self.index, self.on_gpu = kind, encoder, index, on_gpu
        self.dim = int(index.d)
        if int(index.ntotal) != len(corpus):
            raise EmptyIndexError(f"the {kind} index holds {index.ntotal} vectors for {len(corpus)} passages")
        self._configure()

    def _configure(self) -> None:
        faiss = _faiss()
        if self.params.blas_threshold is not None:
            faiss.cvar.distance_compute_blas_threshold = int(self.params.blas_threshold)
        if self.kind == "hnsw":
            self.index.hnsw.efSearch = self.params.ef_search
        elif self.on_gpu:
            # nprobe of a single GPU index and of every shard index_cpu_to_all_gpus made; a no-op without an IVF
            try:
                faiss.GpuParameterSpace().set_index_parameter(self.index, "nprobe", self.params.nprobe)
            except RuntimeError:
                pass
        else:
            for part in _parts(self.index):
                ivf = _try_extract_ivf(part)
                if ivf is not None:
                    ivf.nprobe = self.params.nprobe

    def _meta(self) -> dict:
        # encoder_config reloads the encoder; it holds no device (the machine's choice, not the index's)
        return {"metric": "inner_product", "dim": self.dim, "encoder": self.encoder.config.identity(),
                "encoder_config": self.encoder.config.to_dict()}

    def search_vectors(self, vectors, topk: int):
        """Raw FAISS search of query vectors (float32, (n, dim)) -> (scores, row ids)."""
        import numpy as np

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise EncoderMismatchError(f"query vectors have shape {vectors.shape}; this index has dim {self.dim}")
        with self._lock:
            return self.index.search(vectors, min(int(topk), len(self.corpus)))

    def _search(self, queries, k):
        qv = self.encoder.encode_queries(queries)
        scores, ids = self.index.search(qv, k)
        return ids.tolist(), scores.tolist()

    def _save_engine(self, d: Path) -> None:
        faiss = _faiss()
        idx = faiss.index_gpu_to_cpu(self.index) if self.on_gpu else self.index
        if isinstance(idx, faiss.IndexShards):
            idx = _merge_shards(idx)
        tmp = d / "index.faiss.tmp"
        faiss.write_index(idx, str(tmp))
        os.replace(tmp, d / "index.faiss")


def _want_gpu(use_gpu: bool | None, kind: str) -> bool:
    faiss = _faiss()
    n = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if use_gpu is True and n == 0:
        raise MissingDependencyError("faiss-gpu", "use_gpu=True (faiss sees no GPU)")
    if kind == "hnsw":
        if use_gpu:
            logger.warning("FAISS has no GPU HNSW index; the hnsw index stays on CPU")
        return False
    return n > 0 if use_gpu is None else bool(use_gpu)


def _to_gpu(index):
    """All GPUs; with several, each holds a shard of the vectors (a replica each would cap the index at one GPU's
    memory)."""
    faiss = _faiss()
    co = faiss.GpuMultipleClonerOptions()
    co.shard = True
    return faiss.index_cpu_to_all_gpus(index, co=co)


def _try_extract_ivf(index):
    try:
        return _faiss().extract_index_ivf(index)
    except RuntimeError:
        return None


def _parts(index) -> list:
    """The sub-indexes of an IndexShards (downcast), or [index]."""
    faiss = _faiss()
    if isinstance(index, faiss.IndexShards):
        return [faiss.downcast_index(index.at(i)) for i in range(index.count())]
    return [index]


def shard_index(index, n: int):
    """``index`` split into a ``faiss.IndexShards`` of ``n`` parts holding consecutive vector ranges; search results
    equal the unsharded index's. Flat indexes are split by reconstructing their vectors; IVF-family indexes
    (``IVF``, ``IVF-PQ``, with or without OPQ) by copying inverted-list entries by id range, keeping the trained
    quantizers. The shards are searched one after another on CPU (not in parallel threads: those would escape the
    thread limit)."""
    faiss = _faiss()
    if n <= 1:
        return index
    total = int(index.ntotal)
    if n > total:
        raise ValueError(f"cannot split {total} vectors into {n} shards")
    bounds = [total * i // n for i in range(n + 1)]
    parts = []  # the Python objects own the sub-indexes; the IndexShards only points at them
    flat = faiss.downcast_index(index)
    if isinstance(flat, faiss.IndexFlat):
        shards = faiss.IndexShards(index.d, False, True)  # threaded=False, successive_ids=True
        for a, b in zip(bounds, bounds[1:]):
            part = faiss.IndexFlat(index.d, index.metric_type)
            part.add(index.reconstruct_n(a, b - a))
            shards.add_shard(part)
            parts.append(part)
    else:
        ivf = _try_extract_ivf(index)
        if ivf is None:
            raise ValueError(f"sharding supports Flat and IVF-family indexes, not {type(flat).__name__}")
        shards = faiss.IndexShards(index.d, False, False)  # ids are kept by the inverted lists
        for a, b in zip(bounds, bounds[1:]):
            part = faiss.clone_index(index)
            part_ivf = faiss.extract_index_ivf(part)
            part_ivf.reset()
            ivf.copy_subset_to(part_ivf, faiss.InvertedLists.SUBSET_TYPE_ID_RANGE, a, b)
            part.ntotal = part_ivf.ntotal
            shards.add_shard(part)
            parts.append(part)
    shards.referenced_objects = parts  # faiss's own idiom for keeping sub-indexes alive
    if int(shards.ntotal) != total:
        raise IndexFormatError(f"sharding kept {shards.ntotal} of {total} vectors")
    return shards


def _merge_shards(shards):
    """One index equal to the shards (to save a sharded index as a single file)."""
    faiss = _faiss()
    parts = _parts(shards)
    first = parts[0]
    if isinstance(first, faiss.IndexFlat):
        merged = faiss.IndexFlat(first.d, first.metric_type)
        for p in parts:
            merged.add(p.reconstruct_n(0, p.ntotal))
        return merged
    merged = faiss.clone_index(first)
    ivf = faiss.extract_index_ivf(merged)
    for p in parts[1:]:
        other = faiss.clone_index(p)  # merge_from empties its argument: merge a copy (kept alive while merging)
        ivf.merge_from(faiss.extract_index_ivf(other), 0)
    merged.ntotal = ivf.ntotal
    return merged


def factory_string(kind: str, dim: int, n: int, params: IndexParams) -> str | None:
    """The ``faiss.index_factory`` string of a trained kind (None for flat and hnsw, built directly)."""
    nlist = params.nlist or max(1, int(4 * math.sqrt(n)))
    nlist = max(1, min(nlist, n // 39 or 1))
    m = params.pq_m or dim // 8
    if kind in ("ivfpq", "opq") and (m < 1 or dim % m):
        raise ValueError(f"pq_m={m} must divide the dimension {dim}")
    if kind == "ivf":
        return f"IVF{nlist},Flat"
    pq = f"PQ{m}" if params.pq_nbits == 8 else f"PQ{m}x{params.pq_nbits}"
    if kind == "ivfpq":
        return f"IVF{nlist},{pq}"
    if kind == "opq":
        return f"OPQ{m},IVF{nlist},{pq}"
    if kind == "factory":
        if not params.factory:
            raise ValueError("kind 'factory' needs IndexParams.factory (a faiss.index_factory string)")
        return params.factory
    return None


def _new_faiss_index(kind: str, dim: int, n: int, params: IndexParams, vectors):
    faiss = _faiss()
    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    if kind == "hnsw":
        idx = faiss.IndexHNSWFlat(dim, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        idx.hnsw.efConstruction = params.ef_construction
        return idx
    idx = faiss.index_factory(dim, factory_string(kind, dim, n, params), faiss.METRIC_INNER_PRODUCT)
    ivf = _try_extract_ivf(idx)
    if ivf is not None and hasattr(faiss.downcast_index(ivf), "do_polysemous_training"):
        # polysemous codes (Hamming pre-filtering) are never used here, and training them is most of a PQ build
        faiss.downcast_index(ivf).do_polysemous_training = False
    if not idx.is_trained:
        idx.train(vectors)
    if not idx.is_trained:
        raise EmptyIndexError(f"the {kind} index did not train")
    return idx


def _as_encoder(encoder: Encoder | EncoderConfig | str | None) -> Encoder:
    if isinstance(encoder, Encoder):
        return encoder
    if isinstance(encoder, str):
        encoder = EncoderConfig(model=encoder)
    return Encoder(encoder)


def build_dense(corpus: Corpus, kind: str, encoder: Encoder | EncoderConfig | str | None = None,
                params: IndexParams | None = None, show_progress: bool = False) -> DenseIndex:
    """Encode the corpus and build a FAISS index of ``kind``."""
    params = params or IndexParams()
    enc = _as_encoder(encoder)
    texts = [passage_text(p.title, p.text) for p in corpus.passages]
    vectors = enc.encode_passages(texts, show_progress=show_progress)
    return dense_from_vectors(corpus, kind, enc, vectors, params)


def dense_from_vectors(corpus: Corpus, kind: str, encoder: Encoder, vectors, params: IndexParams) -> DenseIndex:
    """A FAISS index of precomputed passage ``vectors`` (row i is passage i)."""
    import numpy as np

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(corpus) or vectors.shape[0] == 0:
        raise EmptyIndexError(f"got vectors of shape {vectors.shape} for {len(corpus)} passages")
    if vectors.shape[1] != encoder.dim:
        raise EncoderMismatchError(f"vectors have dim {vectors.shape[1]}, the encoder {encoder.dim}")
    index = _new_faiss_index(kind, vectors.shape[1], vectors.shape[0], params, vectors)
    on_gpu = _want_gpu(params.use_gpu, kind)
    if on_gpu:
        index = _to_gpu(index)
    index.add(vectors)
    if not on_gpu and params.shards > 1:
        index = shard_index(index, params.shards)
    return DenseIndex(kind, corpus, encoder, index, params, on_gpu)


class BM25Index(Retriever):
    """Okapi BM25 over title + text with the ``bm25s`` package (sparse matrices; no Java). Lower-cased word
    tokens, English stopwords removed, no stemming. Passages that share no term with the query are not returned,
    so a query may get fewer than ``topk`` hits (none for a query of unknown words)."""

    kind = "bm25"

    def __init__(self, corpus: Corpus, params: IndexParams, model=None, tokenizer=None):
        super().__init__(corpus, params)
        bm25s = _bm25s()
        from bm25s.tokenization import Tokenizer

        if model is None:
            tokenizer = Tokenizer(stopwords=params.stopwords or [], stemmer=None)
            ids = tokenizer.tokenize([passage_text(p.title, p.text) for p in corpus.passages],
                                     update_vocab=True, return_as="ids", show_progress=False)
            model = bm25s.BM25(k1=params.k1, b=params.b)
            model.index(ids, show_progress=False)
        self.model, self.tokenizer = model, tokenizer
        _check_bm25_documents(model, len(corpus))

    def _meta(self) -> dict:
        return {"metric": "bm25", "dim": None, "encoder": None}

    def _search(self, queries, k):
        ids = self.tokenizer.tokenize(queries, update_vocab=False, return_as="ids", show_progress=False)
        rows, scores = self.model.retrieve(ids, k=k, show_progress=False, n_threads=0)
        rows, scores = rows.tolist(), scores.tolist()
        # A score of 0 means no query term occurs in the passage: not a match, so it is not returned.
        keep = [[(i if v > 0 else -1) for i, v in zip(r, s)] for r, s in zip(rows, scores)]
        return keep, scores

    def _save_engine(self, d: Path) -> None:
        out = d / "bm25"
        if out.exists():
            shutil.rmtree(out)
        self.model.save(str(out), show_progress=False)
        self.tokenizer.save_vocab(str(out))

    @classmethod
    def load(cls, d: Path, corpus: Corpus, params: IndexParams) -> "BM25Index":
        bm25s = _bm25s()
        from bm25s.tokenization import Tokenizer

        model = bm25s.BM25.load(str(d / "bm25"))
        tok = Tokenizer(stopwords=params.stopwords or [], stemmer=None)
        tok.load_vocab(str(d / "bm25"))
        return cls(corpus, params, model=model, tokenizer=tok)


def _check_bm25_documents(model, n_passages: int) -> None:
    """The BM25 model must index exactly the passages: its recorded document count, and every document id its
    score matrix refers to, against the corpus (a model saved for another passages.jsonl fails here)."""
    scores = getattr(model, "scores", None)
    if not isinstance(scores, dict) or "num_docs" not in scores or "indices" not in scores:
        raise IndexFormatError("the BM25 model has no document count (bm25s scores without 'num_docs'); rebuild "
                               "the index")
    n_docs = int(scores["num_docs"])
    if n_docs != n_passages:
        raise EmptyIndexError(f"the BM25 index holds {n_docs} documents for {n_passages} passages")
    ids = scores["indices"]
    if len(ids) and (int(ids.max()) >= n_passages or int(ids.min()) < 0):
        raise IndexFormatError(f"the BM25 score matrix refers to document {int(ids.max())}, beyond the "
                               f"{n_passages} passages")


def _bm25s():
    try:
        import bm25s
    except ImportError as e:
        raise MissingDependencyError("bm25s", "BM25 retrieval") from e
    return bm25s


def build_index(corpus: Corpus | str | os.PathLike, kind: str = "flat",
                encoder: Encoder | EncoderConfig | str | None = None, params: IndexParams | None = None,
                chunking: ChunkConfig | None = None, show_progress: bool = False) -> Retriever:
    """Build an index of ``kind`` (``flat``, ``ivf``, ``hnsw``, ``bm25``) over a corpus or a corpus file.

    ``encoder`` (dense kinds only) is an :class:`Encoder`, an :class:`EncoderConfig`, a model name/path, or None
    for the default MiniLM.
    """
    if kind not in INDEX_KINDS:
        raise ValueError(f"index kind must be one of {INDEX_KINDS}, got {kind!r}")
    if not isinstance(corpus, Corpus):
        corpus = load_corpus(corpus, chunking)
    elif chunking is not None:
        raise ValueError("chunking applies when loading a corpus file; chunk the Corpus yourself")
    params = params or IndexParams()
    if kind == "bm25":
        if encoder is not None:
            raise ValueError("a BM25 index takes no encoder")
        return BM25Index(corpus, params)
    return build_dense(corpus, kind, encoder, params, show_progress)


def read_metadata(directory: str | os.PathLike) -> dict:
    d = Path(directory)
    meta_path = d / "meta.json"
    if not meta_path.is_file():
        raise IndexFormatError(f"{d} is not an index directory (no meta.json)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise IndexFormatError(f"{meta_path}: invalid JSON ({e.msg})") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise IndexFormatError(f"{meta_path}: format_version {meta.get('format_version')!r}, this code reads "
                               f"{FORMAT_VERSION}")
    if meta.get("kind") not in INDEX_KINDS:
        raise IndexFormatError(f"{meta_path}: unknown index kind {meta.get('kind')!r}")
    return meta


def load_index(directory: str | os.PathLike, encoder: Encoder | EncoderConfig | str | None = None,
               use_gpu: bool | None = None, omp_threads: int | None = None, mmap: bool = False,
               shards: int | None = None) -> Retriever:
    """Load an index saved by :meth:`Retriever.save`.

    For dense indexes, ``encoder=None`` loads the encoder recorded in the metadata; a given encoder must have the
    same identity (model name, prefixes, normalization, max length) and dimension, else
    :class:`~retrieval.errors.EncoderMismatchError`. Raises :class:`~retrieval.errors.IndexFormatError` when the
    passages do not match the recorded checksum or count. ``use_gpu`` / ``omp_threads`` / ``shards`` override the
    saved parameters. ``mmap=True`` memory-maps ``index.faiss`` (read-only; pages load on demand, so an index larger
    than RAM can be served from a fast disk, and several processes share one copy in the page cache).
    """
    d = Path(directory)
    meta = read_metadata(d)
    corpus = load_corpus(d / "passages.jsonl")
    corpus = Corpus(corpus.passages, corpus.checksum, meta.get("corpus_source", ""),
                    ChunkConfig(**meta.get("chunking", {})))
    if corpus.checksum != meta.get("corpus_checksum") or len(corpus) != meta.get("n_passages"):
        raise IndexFormatError(f"{d}: passages.jsonl ({len(corpus)} passages, {corpus.checksum}) does not match "
                               f"meta.json ({meta.get('n_passages')} passages, {meta.get('corpus_checksum')})")
    params = IndexParams.from_dict(meta.get("params", {}))
    if use_gpu is not None or omp_threads is not None or shards is not None:
        over = {k: v for k, v in (("use_gpu", use_gpu), ("omp_threads", omp_threads), ("shards", shards))
                if v is not None}
        params = IndexParams.from_dict(dict(params.to_dict(), **over))
    if meta["kind"] == "bm25":
        if encoder is not None:
            raise EncoderMismatchError(f"{d} is a BM25 index; it takes no encoder")
        return BM25Index.load(d, corpus, params)
    built = meta.get("encoder") or {}
    if encoder is None:
        enc = Encoder(EncoderConfig.from_dict(meta.get("encoder_config", {})))
    else:
        given = encoder.config if isinstance(encoder, Encoder) else (
            EncoderConfig(model=encoder) if isinstance(encoder, str) else encoder)
        check_same_encoder(built, given.identity())
        enc = _as_encoder(encoder)
    if enc.dim != meta.get("dim"):
        raise EncoderMismatchError(f"encoder {enc.config.model!r} has dim {enc.dim}; the index has {meta.get('dim')}")
    faiss = _faiss()
    path = d / "index.faiss"
    if not path.is_file():
        raise IndexFormatError(f"{d}: index.faiss is missing")
    flags = (getattr(faiss, "IO_FLAG_MMAP_IFC", faiss.IO_FLAG_MMAP) | faiss.IO_FLAG_READ_ONLY) if mmap else 0
    index = faiss.read_index(str(path), flags)
    on_gpu = _want_gpu(params.use_gpu, meta["kind"])
    if on_gpu:
        index = _to_gpu(index)
    elif params.shards > 1:
        index = shard_index(index, params.shards)
    if int(index.d) != meta.get("dim"):
        raise IndexFormatError(f"{path}: dim {index.d} but meta.json says {meta.get('dim')}")
    return DenseIndex(meta["kind"], corpus, enc, index, params, on_gpu)
