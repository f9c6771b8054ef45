"""retrieval: corpora, dense (FAISS + sentence-transformers) and BM25 indexes, a batched HTTP server and client.

Usable without agentgym. Importing this package is light: numpy, faiss, torch, sentence-transformers and bm25s
are imported only when an index or encoder is built or loaded. BM25 indexes and the server need only the
``retrieval`` extra (no torch); dense indexes and encoders need ``retrieval-dense``. Main entry points::

    from retrieval import load_corpus, build_index, load_index, RetrievalClient, serve
    index = build_index(load_corpus("corpus.jsonl"), kind="flat")     # or "ivf", "hnsw", "bm25"
    index.save("my_index"); index = load_index("my_index")
    hits = index.search(["who wrote hamlet"], topk=3)[0]

See :mod:`retrieval.index`, :mod:`retrieval.server`, :mod:`retrieval.client` and :mod:`retrieval.cli`.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import *  # noqa: F401,F403  (light: no third-party imports)
from .errors import __all__ as _errors_all
from .types import Hit, Passage

_LAZY = {
    "ChunkConfig": "corpus", "Corpus": "corpus", "load_corpus": "corpus", "write_corpus": "corpus",
    "corpus_checksum": "corpus",
    "Encoder": "encoders", "EncoderConfig": "encoders", "default_model_path": "encoders",
    "DEFAULT_MODEL": "encoders", "E5_PREFIXES": "encoders",
    "IndexParams": "index", "Retriever": "index", "DenseIndex": "index", "BM25Index": "index",
    "build_index": "index", "load_index": "index", "INDEX_KINDS": "index",
    "RetrievalServer": "server", "ServerConfig": "server", "serve": "server",
    "RetrievalClient": "client",
}

__all__ = ["Hit", "Passage", *_errors_all, *_LAZY]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{mod}", __name__), name)
