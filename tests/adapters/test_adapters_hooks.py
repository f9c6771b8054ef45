"""Model-side hooks (adapters.hooks) against direct forward passes of a tiny random causal LM, and the SGCD
summarizers (the OpenAI-compatible one against a server this test starts on 127.0.0.1)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from adapters.hooks import (EPS_GRID, answer_probability, calibrate_fingerprint_layer,  # noqa: E402
                            hidden_fingerprints, information_gain, linear_probe_accuracy, teacher_student_scores)
from adapters.summarizers import (EpisodeSummary, OpenAISummarizer, RuleBasedSummarizer,  # noqa: E402
                                  SummarizerError)
from adapters.tiny import build_tiny_model, build_tokenizer  # noqa: E402

WORDS = [f"w{i}" for i in range(40)]


@pytest.fixture(scope="module")
def lm():
    tok = build_tokenizer(WORDS)
    return tok, build_tiny_model(tok, hidden_size=32, layers=3, seed=1)


def _seqs(rng, n, lo=3, hi=12, vocab=50):
    return [list(rng.integers(4, vocab, size=int(rng.integers(lo, hi)))) for _ in range(n)]


def test_adapters_hooks_fingerprints_match_forward(lm):
    tok, model = lm
    rng = np.random.default_rng(0)
    seqs = _seqs(rng, 5)
    x = hidden_fingerprints(model, seqs, layer=-2, batch_size=2)
    assert x.shape == (5, 32) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    for i, s in enumerate(seqs):  # unpadded single forward, last token, same layer
        with torch.no_grad():
            h = model(input_ids=torch.tensor([s]), output_hidden_states=True).hidden_states[-2][0, -1].double()
        np.testing.assert_allclose(x[i], (h / h.norm()).numpy(), atol=1e-5)
    # positions: causal, so position p of a sequence is the last token of its prefix [:p+1]
    pos = [[0, len(s) // 2, len(s) - 1] for s in seqs]
    xp = hidden_fingerprints(model, seqs, layer=-2, positions=pos)
    prefixes = [s[:p + 1] for s, ps in zip(seqs, pos) for p in ps]
    np.testing.assert_allclose(xp, hidden_fingerprints(model, prefixes, layer=-2), atol=1e-5)
    with pytest.raises(IndexError):
        hidden_fingerprints(model, seqs, layer=10)
    with pytest.raises(IndexError):
        hidden_fingerprints(model, seqs[:1], positions=[[99]])


def test_adapters_hooks_calibration_scan(lm):
    """App. H: every (layer, eps) of the grid is scanned and equals a direct recomputation; the layer is the best
    probe among the non-degenerate ones; eps comes from App. F's median-cluster-size search on that layer."""
    from estimators import greedy_cosine_clusters

    tok, model = lm
    rng = np.random.default_rng(1)
    # four "task families" of six observations: a shared middle, a varying first token, one common last token
    fams = [list(rng.integers(4, 50, size=6)) for _ in range(4)]
    seqs = [[10 + j] + mid + [7] for mid in fams for j in range(6)]
    labels = np.repeat(np.arange(4), 6)
    layers = [0, -3, -2, -1]
    cal = calibrate_fingerprint_layer(model, seqs, labels, layers=layers)
    assert [(c.layer, c.eps) for c in cal.scans] == [(layer, e) for layer in layers for e in EPS_GRID]
    assert EPS_GRID == (0.05, 0.10, 0.15, 0.20)
    for c in cal.scans:  # the reported numbers, recomputed from hidden_fingerprints (a separate code path)
        x = hidden_fingerprints(model, seqs, layer=c.layer)
        sizes = np.bincount(greedy_cosine_clusters(x.astype(np.float64), c.eps))
        assert c.n_clusters == sizes.size and c.median_cluster_size == float(np.median(sizes))
        assert c.singleton_fraction == pytest.approx(float((sizes == 1).sum()) / len(seqs))
        assert c.probe_accuracy == pytest.approx(linear_probe_accuracy(x, labels))
    # layer 0 (the embeddings) at the shared last token: one cluster at every eps, so never chosen
    assert all(c.n_clusters == 1 and c.singleton_fraction == 0.0 for c in cal.scans if c.layer == 0)
    eligible = {c.layer for c in cal.scans if c.n_clusters >= 5 and c.singleton_fraction < 0.9}
    assert cal.layer in eligible and 0 not in eligible
    probe = {c.layer: c.probe_accuracy for c in cal.scans}
    assert probe[cal.layer] == max(probe[layer] for layer in eligible)
    # eps: the App. F search on the chosen layer, every probe inside [0.02, 0.40], the result its returned eps
    ec = cal.eps_calibration
    assert ec is not None and cal.eps == ec.eps and 1 <= len(ec.probes) <= 6
    assert all(0.02 <= e <= 0.40 for e, _ in ec.probes)
    x = hidden_fingerprints(model, seqs, layer=cal.layer).astype(np.float64)
    med = float(np.median(np.bincount(greedy_cosine_clusters(x, cal.eps))))
    assert (cal.eps, med) in ec.probes
    assert ec.inside_target == (4.0 <= med <= 8.0)
    # groups: clusters never span two groups, so there are at least as many
    by_family = calibrate_fingerprint_layer(model, seqs, labels, layers=[cal.layer], groups=labels)
    for a, b in zip(by_family.scans, (c for c in cal.scans if c.layer == cal.layer)):
        assert a.n_clusters >= max(b.n_clusters, 4)
    # no layer qualifies: neither a layer nor an eps
    none = calibrate_fingerprint_layer(model, seqs, labels, layers=[0])
    assert none.layer is None and none.eps is None and none.eps_calibration is None and "no layer" in none.reason
    # the probe separates linearly separable labels
    x = np.eye(8)[np.repeat(np.arange(4), 6) * 2]
    assert linear_probe_accuracy(x + 0.01 * rng.standard_normal(x.shape), np.repeat(np.arange(4), 6)) == 1.0


def test_adapters_hooks_information_gain(lm):
    tok, model = lm
    rng = np.random.default_rng(2)
    ctxs = [[list(rng.integers(4, 50, size=4 + 3 * k)) for k in range(4)] for _ in range(2)]
    for c in ctxs:  # prefixes grow turn by turn
        for k in range(1, 4):
            c[k] = c[k - 1] + c[k][:3]
    golds = [[[7, 8]], [[9], [10, 11, 12]]]
    ig = information_gain(model, ctxs, golds, batch_size=3)
    for i in range(2):
        p = [max(answer_probability(model, [ctxs[i][k]], [g])[0] for g in golds[i]) for k in range(4)]
        np.testing.assert_allclose(ig[i][:2], np.diff(p)[:2], rtol=1e-4, atol=1e-7)  # float32 padding
        assert np.isnan(ig[i][2])  # the final (answer) turn has no IG
    # p is a length-normalized probability computed exactly
    c, g = ctxs[0][0], [7, 8]
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([c + g])).logits[0].double(), -1)
    want = float(torch.exp((lp[len(c) - 1, 7] + lp[len(c), 8]) / 2))
    np.testing.assert_allclose(answer_probability(model, [c], [g]), [want], rtol=1e-5)


def test_adapters_hooks_teacher_student_scores(lm):
    tok, model = lm
    rng = np.random.default_rng(3)
    prompts, resps = _seqs(rng, 3), _seqs(rng, 3, 2, 6)
    teachers = [p + [5, 6, 7] for p in prompts]
    sc = teacher_student_scores(model, prompts, teachers, resps, top_k=5, batch_size=2)
    L = max(len(r) for r in resps)
    assert sc.teacher_topk_logprob.shape == (3, L, 5) and sc.teacher_logprob_obs.shape == (3, L)
    for i, (p, t, r) in enumerate(zip(prompts, teachers, resps)):
        with torch.no_grad():
            ls = torch.log_softmax(model(input_ids=torch.tensor([p + r])).logits[0].float(), -1)
            lt = torch.log_softmax(model(input_ids=torch.tensor([t + r])).logits[0].float(), -1)
        for j, y in enumerate(r):
            np.testing.assert_allclose(sc.student_logprob_obs[i, j], ls[len(p) - 1 + j, y], atol=1e-5)
            np.testing.assert_allclose(sc.teacher_logprob_obs[i, j], lt[len(t) - 1 + j, y], atol=1e-5)
            top = torch.topk(lt[len(t) - 1 + j], 5)
            np.testing.assert_allclose(sc.teacher_topk_logprob[i, j], top.values, atol=1e-5)
            np.testing.assert_allclose(sc.student_logprob_on_teacher_topk[i, j], ls[len(p) - 1 + j, top.indices],
                                       atol=1e-5)
            assert sc.obs_in_topk[i, j] == (y in top.indices.tolist())
            for lp, at, tail, ent in ((lt[len(t) - 1 + j], "teacher", sc.teacher_tail, sc.teacher_entropy),
                                      (ls[len(p) - 1 + j], "student", sc.student_tail, sc.student_entropy)):
                outside = 0.0 if sc.obs_in_topk[i, j] else float(lp[y].exp())
                want_tail = max(1.0 - float(lp[top.indices].exp().sum()) - outside, 1e-12)
                np.testing.assert_allclose(tail[i, j], want_tail, rtol=1e-4, atol=1e-6, err_msg=at)
                np.testing.assert_allclose(ent[i, j], float(-(lp.exp() * lp).sum()), atol=1e-5, err_msg=at)
        assert not sc.valid[i, len(r):].any()
    # with the reference equal to nothing, teacher == student
    same = teacher_student_scores(model, prompts, prompts, resps, top_k=5)
    np.testing.assert_allclose(same.teacher_topk_logprob, same.student_logprob_on_teacher_topk, atol=1e-6)
    # the micro-batch size does not change anything; an empty response is a row of padding
    one = teacher_student_scores(model, prompts + [[4, 5]], teachers + [[4, 5, 6]], resps + [[]], top_k=5,
                                 batch_size=1)
    for name in ("teacher_topk_logprob", "student_logprob_on_teacher_topk", "teacher_tail", "student_tail",
                 "teacher_entropy", "student_entropy"):
        np.testing.assert_allclose(getattr(one, name)[:3], getattr(sc, name), atol=1e-5, err_msg=name)
    np.testing.assert_array_equal(one.teacher_topk_ids[:3], sc.teacher_topk_ids)
    assert not one.valid[3].any() and np.all(one.teacher_topk_logprob[3] == 0)


def _episode(won=True):
    return EpisodeSummary(task="Goal: craft stick.", responses=["<action>get 2 planks</action>", "blah"],
                          observations=["Got 2 planks", "Invalid action"], rewards=[0.0, 1.0 if won else 0.0],
                          valid=[True, False], won=won, score=float(won), golden_answers=("stick",))


def test_adapters_rule_based_summarizer_is_deterministic():
    s = RuleBasedSummarizer()
    a, b = s(_episode()), s(_episode())
    assert a == b and "success" in a and "get 2 planks" in a and "Correct answer: stick" in a
    assert s(_episode(won=False)) != a


class _Handler(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append((self.path, body, self.headers.get("Authorization")))
        if body["model"] == "broken":
            self.send_response(500)
            self.end_headers()
            return
        out = json.dumps({"choices": [{"message": {"role": "assistant",
                                                   "content": "Step 1 mattered: planks."}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


def test_adapters_openai_summarizer_local_server():
    srv = HTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        s = OpenAISummarizer(base_url=url, model="m", api_key="k", timeout=5)
        assert s(_episode()) == "Step 1 mattered: planks."
        path, body, auth = _Handler.seen[-1]
        assert path == "/v1/chat/completions" and auth == "Bearer k"
        assert body["messages"][0]["role"] == "system" and "Gold answer: stick" in body["messages"][1]["content"]
        with pytest.raises(SummarizerError):
            OpenAISummarizer(base_url=url, model="broken", timeout=5, retries=1)(_episode())
    finally:
        srv.shutdown()
        srv.server_close()
