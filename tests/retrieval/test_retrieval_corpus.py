"""Corpus loading, chunking and checksums; the package stays light at import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from retrieval.corpus import ChunkConfig, Corpus, corpus_checksum, load_corpus, write_corpus
from retrieval.errors import CorpusError
from retrieval.types import Passage, passages_to_string


def _write(tmp_path, lines):
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_load_ids_titles_and_contents(tmp_path):
    p = _write(tmp_path, [json.dumps({"id": "a", "title": "A", "text": "alpha text"}),
                          "",
                          json.dumps({"title": "B", "text": "beta"}),
                          json.dumps({"id": 7, "contents": '"Gamma"\ngamma body'})])
    c = load_corpus(p)
    assert [(x.id, x.title, x.text) for x in c.passages] == [("a", "A", "alpha text"), ("2", "B", "beta"),
                                                             ("7", "Gamma", "gamma body")]
    assert c.passages[2].contents == '"Gamma"\ngamma body'
    assert c.checksum.startswith("sha256:") and len(c) == 3


@pytest.mark.parametrize("lines, match", [
    (['{"id": "a", "text": "x"}', '{"id": "a", "text": "y"}'], "duplicate passage id"),
    (['{"id": "a", "text": ""}'], "non-empty"),
    (['{"id": "a", "text": "x"}', "{not json"], r"c.jsonl:2: invalid JSON"),
    (['["a", "b"]'], "JSON object"),
    (['{"id": true, "text": "x"}'], "'id'"),
    ([""], "no passages"),
])
def test_bad_corpora_are_refused(tmp_path, lines, match):
    with pytest.raises(CorpusError, match=match):
        load_corpus(_write(tmp_path, lines))


def test_missing_file(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus(tmp_path / "nope.jsonl")


def test_chunking_windows_and_ids(tmp_path):
    words = " ".join(f"w{i}" for i in range(25))
    p = _write(tmp_path, [json.dumps({"id": "long", "title": "T", "text": words}),
                          json.dumps({"id": "short", "title": "S", "text": "one two"})])
    c = load_corpus(p, ChunkConfig(chunk_words=10, chunk_overlap=2))
    assert [x.id for x in c.passages] == ["long#0", "long#1", "long#2", "short"]
    assert c.passages[0].text.split() == [f"w{i}" for i in range(10)]
    assert c.passages[1].text.split()[:2] == ["w8", "w9"]  # overlap of 2 words
    assert c.passages[2].text.split()[-1] == "w24" and all(x.title == "T" for x in c.passages[:3])
    assert c.checksum != load_corpus(p).checksum  # chunking changes what is indexed
    with pytest.raises(CorpusError):
        ChunkConfig(chunk_words=5, chunk_overlap=5)


def test_checksum_tracks_content_and_order():
    a, b = Passage("1", "t", "x"), Passage("2", "t", "y")
    assert corpus_checksum([a, b]) == corpus_checksum([Passage("1", "t", "x"), Passage("2", "t", "y")])
    assert corpus_checksum([a, b]) != corpus_checksum([b, a])
    assert corpus_checksum([a]) != corpus_checksum([Passage("1", "t", "x ")])
    # Field boundaries are part of the digest.
    assert corpus_checksum([Passage("1", "ab", "c")]) != corpus_checksum([Passage("1", "a", "bc")])
    assert Corpus.from_passages([a, b]).checksum == corpus_checksum([a, b])


def test_import_is_light_and_independent_of_agentgym():
    code = ("import sys, retrieval; from retrieval import build_index, load_index, RetrievalClient, "
            "RetrievalServer, Hit, EncoderMismatchError; import retrieval.cli; "
            "heavy = [m for m in ('numpy', 'faiss', 'torch', 'sentence_transformers', 'transformers', 'bm25s', "
            "'agentgym', 'uvicorn', 'starlette', 'h11') if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_written_corpora_follow_wiki18_contents(tmp_path):
    """write_corpus (every index directory's passages.jsonl) writes wiki-18's {id, contents} with the quoted title
    on the first line; a contents string that is not in that form is kept as given; both read back exactly."""
    src = _write(tmp_path, [json.dumps({"id": "a", "title": "Aaron", "text": "Aaron is a prophet.\nSecond line"}),
                            json.dumps({"id": "b", "contents": "Unquoted head\nbody"}),
                            json.dumps({"id": "c", "title": "Two\nlines", "text": "t"})])
    c = load_corpus(src)
    out = tmp_path / "out.jsonl"
    write_corpus(c.passages, out)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert records[:2] == [{"id": "a", "contents": '"Aaron"\nAaron is a prophet.\nSecond line'},
                           {"id": "b", "contents": "Unquoted head\nbody"}]
    assert records[2] == {"id": "c", "title": "Two\nlines", "text": "t"}  # the convention cannot hold this title
    again = load_corpus(out)
    assert again.passages == c.passages and again.checksum == c.checksum
    assert [p.contents for p in again.passages][:2] == [records[0]["contents"], records[1]["contents"]]
    assert corpus_checksum([Passage("b", "", "x")]) != corpus_checksum([Passage("b", "", "x", raw_contents="x")])


def test_passages_to_string_is_search_r1s_rendering():
    """Search-R1 a14dc3a, generation.py _passages2string + strip: the title is the first line of contents, quotes
    included; the other lines are the text; one 'Doc i(Title: ...) ...' line per passage."""
    contents = ['"Aaron"\nAaron is a prophet.', 'Unquoted head\nbody\nmore', '"T"\n']
    assert passages_to_string(contents) == ('Doc 1(Title: "Aaron") Aaron is a prophet.\n'
                                            'Doc 2(Title: Unquoted head) body\nmore\n'
                                            'Doc 3(Title: "T")')
    assert passages_to_string([]) == ""
