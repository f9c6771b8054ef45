"""WebShop's search engine: a pure-Python BM25 that reproduces pyserini/Anserini's Lucene ranking.

WebShop searches a Lucene index of one document per product (``contents`` = lower-cased title, description, first
bullet point and option text; :func:`~agentgym.envs.webshop.catalog.document_text`) with
``LuceneSearcher.search(query, k=50)``. To give the same result lists without Java, this module reproduces each
part of that pipeline:

* **Analysis** (Anserini ``DefaultEnglishAnalyzer``): Lucene ``StandardTokenizer`` (UAX#29 word boundaries, plus
  emoji tokens), ``EnglishPossessiveFilter`` (trailing ``'s``), lower-casing, Lucene's 33 English stop words and
  Lucene's Porter stemmer (:mod:`.porter`). The word segmentation uses the ``regex`` module's Unicode word
  boundaries (``(?w)\\b``); Lucene's emoji rule covers the Extended_Pictographic ranges of the emoji data its
  grammar was generated from, which includes symbols (★, ☞, ♡ ...) that the ``regex`` module's Unicode data
  does not mark, so those ranges are listed explicitly (checked against every Lucene token of the catalogue). On the 1,000 catalogue documents and 2,838 reference queries this
  gives Lucene's tokens exactly.
* **Query**: a bag of words, one SHOULD clause per distinct token boosted by its count (Anserini's
  ``BagOfWordsQueryGenerator``). Lucene limits a BooleanQuery to 1,024 clauses; longer queries raise
  :class:`QueryTooLongError` (the original crashes).
* **Scoring**: BM25 with k1 = 0.9, b = 0.4, ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` and per-term
  ``idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` in single precision, where ``dl`` is the document length
  after Lucene's one-byte norm quantisation (``SmallFloat.intToByte4``: 24 exact values, then 4 significant bits)
  — the detail that plain BM25 libraries miss and that changes most top-50 lists.
* **Ranking**: Anserini sorts by score (single precision), ties by document id ascending, also at the k-th
  place. Only documents matching at least one query term are returned.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ...errors import AgentGymError, MissingDependencyError
from .porter import stem

__all__ = ["LUCENE_STOP_WORDS", "analyze", "BM25Index", "SearchHit", "QueryTooLongError", "K1", "B",
           "MAX_CLAUSES", "length_table"]

logger = logging.getLogger(__name__)

K1 = 0.9
B = 0.4
MAX_CLAUSES = 1024

LUCENE_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split())

# Lucene's emoji token class: Extended_Pictographic as in the emoji data Lucene's grammar was built from. Current
# Unicode data (what ``regex`` knows) dropped some symbol ranges that Lucene still emits as tokens; they are added.
_EMOJI_CLASS = (r"[\p{Extended_Pictographic}\u2600-\u2605\u2607-\u2612\u2614-\u2685\u2690-\u2705\u2708-\u2712"
                r"\u2714\u2716\u271d\u2721\u2728\u2733\u2734\u2744\u2747\u274c\u274e\u2753-\u2755\u2757"
                r"\u2763-\u2767\u2795-\u2797\u27a1\u27b0\u27bf]")
# A word token starts with a letter, a decimal digit or a connector (ExtendNumLet) and contains a letter or digit.
_LEADING_QUOTES = "'\u2019\u2018.\uff07"
_POSSESSIVE_QUOTES = "'\u2019\uff07"
_MAX_TOKEN_LENGTH = 255


class QueryTooLongError(AgentGymError, ValueError):
    """The query has more distinct terms than Lucene's BooleanQuery allows (1,024)."""

    kind = "bad_task"


class _Patterns:
    _compiled = None

    @classmethod
    def get(cls):
        if cls._compiled is None:
            try:
                import regex
            except ImportError as e:  # pragma: no cover - regex is a declared dependency of the extra
                raise MissingDependencyError("regex", "webshop", "WebShop's Lucene-compatible tokenizer") from e
            cls._compiled = (regex.compile(r"(?w)\b"), regex.compile(r"[\p{Alphabetic}\p{Nd}_]"),
                             regex.compile(r"[\p{Alphabetic}\p{Nd}]"), regex.compile(_EMOJI_CLASS))
        return cls._compiled


def _segments(text: str) -> list[str]:
    """The tokens Lucene's StandardTokenizer emits for ``text`` (before any filter)."""
    boundary, word_start, has_alnum, emoji = _Patterns.get()
    positions = [m.start() for m in boundary.finditer(text)]
    out = []
    for a, b in zip(positions, positions[1:]):
        seg = text[a:b].lstrip(_LEADING_QUOTES)  # a quote is never the first character of a Lucene token
        if not seg:
            continue
        if (word_start.match(seg) and has_alnum.search(seg)) or emoji.match(seg):
            while len(seg) > _MAX_TOKEN_LENGTH:  # StandardTokenizer splits over-long tokens
                out.append(seg[:_MAX_TOKEN_LENGTH])
                seg = seg[_MAX_TOKEN_LENGTH:]
            out.append(seg)
    return out


def analyze(text: str) -> list[str]:
    """Anserini's DefaultEnglishAnalyzer: tokenize, strip possessives, lower-case, drop stop words, Porter-stem."""
    out = []
    for tok in _segments(text):
        if len(tok) >= 2 and tok[-2] in _POSSESSIVE_QUOTES and tok[-1] in "sS":
            tok = tok[:-2]
        tok = tok.lower()
        if not tok or tok in LUCENE_STOP_WORDS:
            continue
        out.append(stem(tok))
    return out


def _long_to_int4(i: int) -> int:
    num_bits = i.bit_length()
    if num_bits < 4:
        return i
    shift = num_bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_NUM_FREE_VALUES = 255 - _long_to_int4(2**31 - 1)  # = 24


def _int_to_byte4(i: int) -> int:
    return i if i < _NUM_FREE_VALUES else _NUM_FREE_VALUES + _long_to_int4(i - _NUM_FREE_VALUES)


def _byte4_to_int(b: int) -> int:
    return b if b < _NUM_FREE_VALUES else _NUM_FREE_VALUES + _int4_to_long(b - _NUM_FREE_VALUES)


def length_table() -> list[int]:
    """Lucene's decoded document lengths for each of the 256 norm bytes."""
    return [_byte4_to_int(i) for i in range(256)]


@dataclass(frozen=True)
class SearchHit:
    doc_id: str
    score: float


class BM25Index:
    """An inverted index over pre-analyzed documents, scored like Lucene 8's BM25Similarity.

    Args:
        doc_ids: the document ids in index order (Lucene's internal doc order: the order of the document file).
        doc_tokens: each document's analyzed tokens (e.g. Anserini's own, or :func:`analyze` of its contents).
    """

    def __init__(self, doc_ids: Sequence[str], doc_tokens: Sequence[Sequence[str]], *, k1: float = K1,
                 b: float = B):
        if len(doc_ids) != len(doc_tokens):
            raise ValueError("doc_ids and doc_tokens differ in length")
        self.doc_ids = list(doc_ids)
        self.k1, self.b = k1, b
        n = len(self.doc_ids)
        self._rank_key = np.argsort(np.array(self.doc_ids, dtype=object), kind="stable")
        # Position of each doc in id order, for the Anserini tie-break (score desc, id asc).
        self._id_order = np.empty(n, dtype=np.int64)
        self._id_order[self._rank_key] = np.arange(n)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        lengths = np.zeros(n, dtype=np.int64)
        for d, toks in enumerate(doc_tokens):
            lengths[d] = len(toks)
            for term, tf in Counter(toks).items():
                p = postings.setdefault(term, ([], []))
                p[0].append(d)
                p[1].append(tf)
        self._postings = {t: (np.array(ds, dtype=np.int64), np.array(tfs, dtype=np.float32))
                          for t, (ds, tfs) in postings.items()}
        # Lucene: avgdl = (float)(sumTotalTermFreq / (double) docCount); cache[i] = k1 * ((1 - b) + b * L[i] / avgdl)
        avgdl = np.float32(lengths.sum() / max(n, 1))
        table = np.array(length_table(), dtype=np.float32)
        cache = np.float32(k1) * ((np.float32(1) - np.float32(b)) + np.float32(b) * table / avgdl)
        norm_bytes = np.array([_int_to_byte4(int(x)) for x in lengths], dtype=np.int64)
        self._doc_norm = cache.astype(np.float32)[norm_bytes]
        self.avgdl = float(avgdl)
        self.num_docs = n

    def idf(self, term: str) -> float:
        df = len(self._postings[term][0]) if term in self._postings else 0
        return float(np.float32(math.log(1 + (self.num_docs - df + 0.5) / (df + 0.5))))

    def scores(self, query_tokens: Iterable[str]) -> np.ndarray:
        """Every document's BM25 score for the bag of ``query_tokens`` (0 where no term matches)."""
        counts = Counter(query_tokens)
        if len(counts) > MAX_CLAUSES:
            raise QueryTooLongError(f"the query has {len(counts)} distinct terms; Lucene allows {MAX_CLAUSES}")
        total = np.zeros(self.num_docs, dtype=np.float64)
        for term, boost in counts.items():
            post = self._postings.get(term)
            if post is None:
                continue
            docs, tf = post
            weight = np.float32(boost) * np.float32(self.idf(term))
            part = weight * (tf / (tf + self._doc_norm[docs])).astype(np.float32)
            total[docs] += part.astype(np.float32)
        return total.astype(np.float32)

    def search(self, query_tokens: Iterable[str], k: int = 50) -> list[SearchHit]:
        """The top ``k`` documents with a positive score, as Anserini orders them."""
        s = self.scores(query_tokens)
        hit = np.flatnonzero(s > 0)
        if hit.size == 0:
            return []
        # Anserini searches with Sort(score desc, id asc), so the id breaks ties also at the k-th place.
        top = hit[np.lexsort((self._id_order[hit], -s[hit]))][:k]
        return [SearchHit(self.doc_ids[i], float(s[i])) for i in top]
