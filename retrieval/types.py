"""Small records shared by the corpus, the indexes, the server and the client."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Passage", "Hit"]


@dataclass(frozen=True)
class Passage:
    """One retrievable unit of text. ``id`` is unique within a corpus."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """Search-R1's ``contents`` field: the quoted title on the first line, then the text."""
        return f'"{self.title}"\n{self.text}'

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "text": self.text}


@dataclass(frozen=True)
class Hit:
    """One search result: the passage, its score under the index's metric (higher is better) and 0-based rank."""

    passage: Passage
    score: float
    rank: int

    @property
    def id(self) -> str:
        return self.passage.id

    def to_document(self) -> dict:
        """The passage as a Search-R1 ``document`` (``id`` and ``contents``, plus ``title``/``text``)."""
        p = self.passage
        return {"id": p.id, "title": p.title, "text": p.text, "contents": p.contents}
