"""Command line: ``build``, ``serve`` and ``search`` (hooked into ``agentgym retrieval ...``; also
``python -m retrieval ...``).

* ``build --corpus F --out DIR [--kind flat|ivf|hnsw|ivfpq|opq|factory | --bm25] [--factory STR] [--pq-m M]
  [--encoder M] [--query-prefix P] [--passage-prefix P] [--chunk-words N --chunk-overlap M] [--batch-size B]
  [--device D] [--cpu]``
* ``serve --index DIR [--host 127.0.0.1] [--port P] [--max-batch N] [--batch-wait-ms T] [--max-topk K]
  [--max-queries N] [--max-results N] [--max-answer-bytes B] [--cpu] [--omp-threads N] [--mmap] [--shards N]
  [--request-timeout S] [--write-timeout S] [--idle-timeout S] [--auth-token T] [--allow-remote]
  [--allowed-origin O]`` (a non-loopback ``--host`` needs a token or ``--allow-remote``)
* ``search --index DIR [--topk K] [--json] QUERY [QUERY ...]`` (``--index`` may also be a server URL)

Exit status 0 on success, 2 on bad arguments or a retrieval error (the message goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Sequence

from .errors import RetrievalError

__all__ = ["main", "build_parser", "TOKEN_ENV"]

#: the environment variable ``serve`` reads its bearer token from (and the client sends, when set)
TOKEN_ENV = "AGENTGYM_RETRIEVAL_TOKEN"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's ``(default: X)`` after each option's help, except where the help already names its default or the
    default is None (those helps say it in words)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default is None:
            return text
        return super()._get_help_string(action)


def build_parser(prog: str = "agentgym retrieval") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Build, serve and query retrieval indexes.",
                                formatter_class=_HelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, formatter_class=_HelpFormatter)

    b = command("build", help="build an index from a JSONL corpus {id,title,text}")
    b.add_argument("--corpus", required=True, help="JSONL corpus file")
    b.add_argument("--out", required=True, help="index directory to write")
    kind = b.add_mutually_exclusive_group()
    kind.add_argument("--kind", choices=("flat", "ivf", "hnsw", "ivfpq", "opq", "factory", "bm25"), default=None,
                      help="index type (default flat; ivfpq/opq compress for large corpora, see --pq-m)")
    kind.add_argument("--bm25", action="store_true", help="build a BM25 index (same as --kind bm25)")
    b.add_argument("--encoder", default=None,
                   help="sentence-transformers model path or name (default: the packaged all-MiniLM-L6-v2)")
    b.add_argument("--query-prefix", default="", help='prefix for queries (e5: "query: ")')
    b.add_argument("--passage-prefix", default="", help='prefix for passages (e5: "passage: ")')
    b.add_argument("--e5", action="store_true", help='use e5 prefixes "query: " / "passage: "')
    b.add_argument("--max-seq-length", type=int, default=256, help="encoder's longest input, in tokens")
    b.add_argument("--batch-size", type=int, default=64, help="encoding batch size")
    b.add_argument("--device", default=None, help="encoder device (cpu, cuda, ...; default: what "
                                                   "sentence-transformers picks)")
    b.add_argument("--chunk-words", type=int, default=None, help="split passages into windows of N words "
                                                                 "(default: no split)")
    b.add_argument("--chunk-overlap", type=int, default=0, help="words shared by neighbouring chunks")
    b.add_argument("--nlist", type=int, default=None, help="IVF cells (default: about 4 x sqrt(passages), at most passages/39)")
    b.add_argument("--nprobe", type=int, default=16, help="IVF cells searched per query")
    b.add_argument("--hnsw-m", type=int, default=32, help="HNSW graph neighbours per node")
    b.add_argument("--pq-m", type=int, default=None,
                   help="PQ sub-quantizers of ivfpq/opq (bytes per vector; must divide the dimension; default dim/8)")
    b.add_argument("--pq-nbits", type=int, default=8, help="bits per PQ code (8: 256 centroids per sub-quantizer)")
    b.add_argument("--factory", default=None,
                   help='a faiss.index_factory string for --kind factory, e.g. "OPQ64,IVF65536,PQ64" (default: '
                        'none; required by --kind factory)')
    b.add_argument("--cpu", action="store_true", help="keep the FAISS index on CPU even when a GPU is visible")
    b.add_argument("--no-progress", action="store_true", help="no progress bar while encoding")

    s = command("serve", help="serve an index over HTTP (POST /retrieve, GET /health)")
    s.add_argument("--index", required=True, help="index directory")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    s.add_argument("--port", type=int, default=8000, help="port to bind (0: any free port; the URL is printed)")
    s.add_argument("--max-batch", type=int, default=512, help="most queries per search call")
    s.add_argument("--batch-wait-ms", type=float, default=0.0,
                   help="wait this long for more requests before a search (default 0: a search takes every request "
                        "already waiting; under load they pile up while the previous search runs)")
    s.add_argument("--max-topk", type=int, default=100, help="largest topk a request may ask for")
    s.add_argument("--max-queries", type=int, default=4096, help="most queries per request")
    s.add_argument("--max-results", type=int, default=32768,
                   help="most results per request, queries x topk (422 beyond)")
    s.add_argument("--max-answer-bytes", type=int, default=64 * 1024 * 1024,
                   help="largest answer in bytes (413 beyond)")
    s.add_argument("--cpu", action="store_true", help="keep the FAISS index on CPU")
    s.add_argument("--omp-threads", type=int, default=None,
                   help="threads of the search (FAISS OpenMP, the torch encoder, BLAS); default: a quarter of the "
                        "usable cores, 1 to 8 (suits cores shared with a trainer); 0: the libraries' defaults "
                        "(every core)")
    s.add_argument("--mmap", action="store_true",
                   help="memory-map the FAISS index file instead of reading it into memory")
    s.add_argument("--shards", type=int, default=None,
                   help="split the index into N shards (faiss IndexShards; on GPUs: one shard per GPU; default: "
                        "one shard, or one per GPU)")
    s.add_argument("--request-timeout", type=float, default=30.0,
                   help="seconds a client has to send a whole request (408 beyond)")
    s.add_argument("--write-timeout", type=float, default=30.0,
                   help="seconds a client may leave its answer unread before the connection is dropped")
    s.add_argument("--idle-timeout", type=float, default=60.0,
                   help="seconds a connection may stay open with no request in progress")
    s.add_argument("--auth-token", default=None,
                   help=f"require 'Authorization: Bearer TOKEN' on every request (default: ${TOKEN_ENV}; unset: no "
                        "token, loopback binds only)")
    s.add_argument("--allow-remote", action="store_true",
                   help="serve a non-loopback --host without a token (refused otherwise)")
    s.add_argument("--allowed-origin", action="append", metavar="ORIGIN",
                   help="an Origin (scheme://host[:port]) a web page may call the server from; without a token its "
                        "host is also answered besides loopback names (repeatable; default: none)")

    q = command("search", help="search an index directory or a server URL")
    q.add_argument("--index", required=True, help="index directory or http://host:port")
    q.add_argument("--topk", type=int, default=3, help="passages per query")
    q.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    q.add_argument("--timeout", type=float, default=30.0, help="client timeout for a server URL")
    q.add_argument("queries", nargs="+", help="query text(s)")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return p


def _build(args, out) -> None:
    from .corpus import ChunkConfig, load_corpus
    from .encoders import DEFAULT_MODEL, E5_PREFIXES, EncoderConfig
    from .index import IndexParams, build_index

    kind = "bm25" if args.bm25 else (args.kind or "flat")
    corpus = load_corpus(args.corpus, ChunkConfig(args.chunk_words, args.chunk_overlap))
    params = IndexParams(nlist=args.nlist, nprobe=args.nprobe, hnsw_m=args.hnsw_m, pq_m=args.pq_m,
                         pq_nbits=args.pq_nbits, factory=args.factory, use_gpu=False if args.cpu else None)
    encoder = None
    if kind != "bm25":
        qp, pp = E5_PREFIXES if args.e5 else (args.query_prefix, args.passage_prefix)
        encoder = EncoderConfig(model=args.encoder or DEFAULT_MODEL, query_prefix=qp, passage_prefix=pp,
                                max_seq_length=args.max_seq_length, batch_size=args.batch_size,
                                device=args.device)
    elif args.encoder:
        raise RetrievalError("--encoder does not apply to a BM25 index")
    index = build_index(corpus, kind, encoder=encoder, params=params, show_progress=not args.no_progress)
    index.save(args.out)
    print(f"built {kind} index of {len(corpus)} passages ({corpus.checksum}) in {args.out}", file=out)


def _serve(args, out) -> None:
    from .index import load_index
    from .server import RetrievalServer, ServerConfig

    cfg = ServerConfig(host=args.host, port=args.port, max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
                       max_topk=args.max_topk, max_queries=args.max_queries, max_results=args.max_results,
                       max_answer_bytes=args.max_answer_bytes, request_timeout_s=args.request_timeout,
                       write_timeout_s=args.write_timeout, idle_timeout_s=args.idle_timeout,
                       allow_remote=args.allow_remote, allowed_origins=tuple(args.allowed_origin or ()),
                       auth_token=args.auth_token if args.auth_token is not None else os.environ.get(TOKEN_ENV) or None)
    # the config and the bind rule first: a bad flag, token or host fails before a big index is loaded
    from .http_limits import check_bind

    check_bind(cfg.host, cfg.auth_token, cfg.allow_remote, "the retrieval server")
    index = load_index(args.index, use_gpu=False if args.cpu else None, omp_threads=args.omp_threads,
                       mmap=args.mmap, shards=args.shards)
    server = RetrievalServer(index, cfg)
    print(f"serving {index.kind} index of {len(index)} passages on {server.url} (POST /retrieve, GET /health; "
          f"search threads: {index.search_threads() or 'library default'})", file=out, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


def _search(args, out) -> None:
    if args.index.startswith("http://"):
        from .client import RetrievalClient

        rows = RetrievalClient(args.index, timeout=args.timeout).search(args.queries, args.topk)
    else:
        from .index import load_index

        rows = load_index(args.index).search(args.queries, args.topk)
    for query, hits in zip(args.queries, rows):
        if args.json:
            print(json.dumps({"query": query, "hits": [dict(h.to_document(), score=h.score) for h in hits]},
                             ensure_ascii=False), file=out)
            continue
        print(f"query: {query}", file=out)
        if not hits:
            print("  (no results)", file=out)
        for h in hits:
            text = h.passage.text if len(h.passage.text) <= 200 else h.passage.text[:197] + "..."
            print(f"  {h.rank + 1}. [{h.score:.4f}] ({h.passage.id}) {h.passage.title}: {text}", file=out)


def main(argv: Sequence[str] | None = None, prog: str = "agentgym retrieval") -> int:
    """Run one subcommand; returns the exit status."""
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    out = sys.stdout  # the CLI's output is its product; library code logs instead
    try:
        {"build": _build, "serve": _serve, "search": _search}[args.command](args, out)
    except (RetrievalError, OSError, ValueError) as e:  # ValueError: a bind the token rule refuses
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m retrieval.cli"))
