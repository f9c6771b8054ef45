"""Corpora: JSONL files of ``{id, title, text}`` records, optional chunking, and a checksum.

* ``id`` is optional: a record without one gets its 0-based line number (as a string). Ids must be unique.
* ``title`` is optional (empty); ``text`` is required and non-empty. A ``contents`` field (wiki-18's and
  Search-R1's form, ``"Title"`` + newline + text) is accepted in place of title/text; a ``contents`` whose first line
  is not a quoted title is kept as given (``Passage.raw_contents``) with an empty title and the whole string as text.
* :func:`write_corpus` (and so every index directory's ``passages.jsonl``) writes wiki-18's ``{id, contents}``
  records, which Search-R1's own retrieval server can load as its corpus.
* Chunking (``chunk_words``) splits each text into windows of that many words with ``chunk_overlap`` words shared
  between neighbours; chunk ids are ``<id>#<k>``. Chunks keep their passage's title.
* The checksum is a SHA-256 over the passages *after* chunking (ids, titles, texts, kept raw ``contents``, in
  order), so an index records
  exactly what it holds and a changed corpus or chunking is detected.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .errors import CorpusError
from .types import Passage, split_contents

__all__ = ["ChunkConfig", "load_corpus", "chunk_passages", "corpus_checksum", "write_corpus", "Corpus"]


@dataclass(frozen=True)
class ChunkConfig:
    """Word-window chunking; ``chunk_words=None`` keeps passages whole."""

    chunk_words: int | None = None
    chunk_overlap: int = 0

    def __post_init__(self):
        if self.chunk_words is not None and self.chunk_words < 1:
            raise CorpusError(f"chunk_words must be >= 1, got {self.chunk_words}")
        if self.chunk_overlap < 0 or (self.chunk_words is not None and self.chunk_overlap >= self.chunk_words):
            raise CorpusError(f"chunk_overlap must be in [0, chunk_words), got {self.chunk_overlap}")

    def to_dict(self) -> dict:
        return {"chunk_words": self.chunk_words, "chunk_overlap": self.chunk_overlap}


def _passage_from_record(rec: object, lineno: int, path: str) -> Passage:
    if not isinstance(rec, dict):
        raise CorpusError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
    title, text, raw = rec.get("title", ""), rec.get("text"), None
    if text is None and isinstance(rec.get("contents"), str):
        title, text, raw = split_contents(rec["contents"])
    if not isinstance(text, str) or not text.strip():
        raise CorpusError(f"{path}:{lineno}: 'text' must be a non-empty string")
    if not isinstance(title, str):
        raise CorpusError(f"{path}:{lineno}: 'title' must be a string")
    pid = rec.get("id", lineno - 1)
    if not isinstance(pid, (str, int)) or isinstance(pid, bool):
        raise CorpusError(f"{path}:{lineno}: 'id' must be a string or an integer")
    return Passage(id=str(pid), title=title, text=text, raw_contents=raw)


def chunk_passages(passages: Iterable[Passage], config: ChunkConfig) -> list[Passage]:
    """Split passages into word windows (see the module docstring)."""
    if config.chunk_words is None:
        return list(passages)
    step = config.chunk_words - config.chunk_overlap
    out = []
    for p in passages:
        words = p.text.split()
        if len(words) <= config.chunk_words:
            out.append(p)
            continue
        for k, start in enumerate(range(0, len(words), step)):
            out.append(Passage(f"{p.id}#{k}", p.title, " ".join(words[start:start + config.chunk_words])))
            if start + config.chunk_words >= len(words):
                break
    return out


def corpus_checksum(passages: Sequence[Passage]) -> str:
    """``sha256:<hex>`` over the ordered passages (see the module docstring)."""
    h = hashlib.sha256()
    for p in passages:
        for field in (p.id, p.title, p.text):
            b = field.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
        if p.raw_contents is not None:  # renders differently from the same title/text in wiki-18's form
            b = p.raw_contents.encode("utf-8")
            h.update(b"\xffraw" + len(b).to_bytes(8, "little"))
            h.update(b)
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True)
class Corpus:
    """Passages with their checksum and where they came from."""

    passages: tuple[Passage, ...]
    checksum: str
    source: str = ""
    chunking: ChunkConfig = ChunkConfig()

    def __len__(self) -> int:
        return len(self.passages)

    @classmethod
    def from_passages(cls, passages: Iterable[Passage], source: str = "",
                      chunking: ChunkConfig = ChunkConfig()) -> "Corpus":
        ps = tuple(chunk_passages(passages, chunking))
        if not ps:
            raise CorpusError(f"corpus {source or '(in memory)'} has no passages")
        seen: set[str] = set()
        for p in ps:
            if p.id in seen:
                raise CorpusError(f"corpus {source or '(in memory)'}: duplicate passage id {p.id!r}")
            seen.add(p.id)
        return cls(ps, corpus_checksum(ps), source, chunking)


def load_corpus(path: str | os.PathLike, chunking: ChunkConfig | None = None) -> Corpus:
    """Read a JSONL corpus (blank lines skipped) and apply ``chunking``; raises :class:`CorpusError`."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file {path} does not exist")
    passages = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise CorpusError(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
            passages.append(_passage_from_record(rec, lineno, str(path)))
    return Corpus.from_passages(passages, str(path), chunking or ChunkConfig())


def write_corpus(passages: Iterable[Passage], path: str | os.PathLike) -> None:
    """Write passages as JSONL in wiki-18's ``{id, contents}`` form (:meth:`Passage.to_dict`)."""
    with Path(path).open("w", encoding="utf-8") as f:
        for p in passages:
            f.write(json.dumps(p.to_dict(), ensure_ascii=False) + "\n")
