"""Small records shared by the corpus, the indexes, the server and the client."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Passage", "Hit", "passages_to_string", "split_contents"]


@dataclass(frozen=True)
class Passage:
    """One retrievable unit of text. ``id`` is unique within a corpus.

    ``raw_contents`` keeps a ``contents`` string that does not follow wiki-18's ``"Title"`` + newline + text
    convention (a corpus or a foreign server gave it so), so that :attr:`contents` gives back exactly what came in:
    Search-R1 renders a passage from its ``contents`` (see :func:`passages_to_string`), so nothing may be lost.
    """

    id: str
    title: str
    text: str
    raw_contents: str | None = None

    @property
    def contents(self) -> str:
        """Search-R1's ``contents`` field: wiki-18's convention, the quoted title on the first line, then the text
        (or ``raw_contents`` as given)."""
        if self.raw_contents is not None:
            return self.raw_contents
        return f'"{self.title}"\n{self.text}'

    def to_dict(self) -> dict:
        """The corpus record: ``{id, contents}`` in wiki-18's form (Search-R1's own server reads it as a corpus);
        ``{id, title, text}`` for a title with a newline, which the convention cannot hold."""
        if "\n" in self.title and self.raw_contents is None:
            return {"id": self.id, "title": self.title, "text": self.text}
        return {"id": self.id, "contents": self.contents}


def split_contents(contents: str) -> tuple[str, str, str | None]:
    """(title, text, raw_contents) of a ``contents`` string: wiki-18's ``"Title"`` + newline + text splits into
    title and text (``raw_contents`` None); anything else is kept whole as the text and as ``raw_contents``, so the
    passage gives back exactly that ``contents``."""
    head, _, rest = contents.partition("\n")
    if rest and len(head) >= 2 and head.startswith('"') and head.endswith('"'):
        return head[1:-1], rest, None
    return "", contents, contents


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


def passages_to_string(contents: "list[str]") -> str:
    """Search-R1's rendering of retrieved passages, ``_passages2string`` of ``search_r1/llm_agent/generation.py``
    (PeterGriffinJin/Search-R1 a14dc3a), followed by the ``.strip()`` its ``execute_predictions`` applies: for each
    passage the first line of ``contents`` is the title (quotes included: wiki-18 writes ``"Title"``), the other
    lines the text, rendered ``Doc i(Title: <title>) <text>``, one per line."""
    out = ""
    for idx, content in enumerate(contents):
        title = content.split("\n")[0]
        text = "\n".join(content.split("\n")[1:])
        out += f"Doc {idx + 1}(Title: {title}) {text}\n"
    return out.strip()
