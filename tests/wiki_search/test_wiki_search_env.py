"""WikiSearch-v0: the Search-R1 protocol, answer scoring, oracle and random policies, retrievers in-process and
over HTTP (127.0.0.1), splits from the staged data."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("bm25s") is None:
    pytest.skip("pip install -e '.[retrieval]' (missing bm25s)", allow_module_level=True)

import agentgym  # noqa: E402
from agentgym.envs.wiki_search.answers import exact_match, f1_score, normalize_answer  # noqa: E402
from agentgym.envs.wiki_search.demo import DEMO_PASSAGES, DEMO_QUESTIONS  # noqa: E402
from agentgym.envs.wiki_search.env import WikiSearchEnv  # noqa: E402
from agentgym.envs.wiki_search.retrievers import RetrieverUnavailableError  # noqa: E402
from agentgym.errors import EnvCrashError, TaskError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def shared(name: str) -> Path | None:
    for root in (os.environ.get("AGENTGYM_SHARED_DATA"), REPO.parent / "shared" / "data"):
        if root and (Path(root) / name).exists():
            return Path(root) / name
    return None


# ---- answer normalization and scoring ---------------------------------------------------------------------
@pytest.mark.parametrize("raw, norm", [
    ("The Beatles", "beatles"),
    ("  an Apple a day ", "apple day"),
    ("U.S.A.", "usa"),
    ("Saint-Paul, Minnesota!", "saintpaul minnesota"),
    ("THE the ThE", ""),
    ("theater", "theater"),          # articles only as whole words
    ("Ångström  unit", "ångström unit"),
    ("1,000 km", "1000 km"),
    ("a\tb\nc", "b c"),
])
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match_and_f1():
    assert exact_match("the Vistula.", ["Vistula River", "Vistula"]) == 1.0
    assert exact_match("Vistula river", "vistula") == 0.0
    assert exact_match("", ["x"]) == 0.0
    assert f1_score("Vistula river", ["Vistula"]) == pytest.approx(2 / 3)
    assert f1_score("polonium and radium", ["radium and polonium"]) == 1.0
    assert f1_score("Paris France", ["Lyon"]) == 0.0
    assert f1_score("yes", ["no"]) == 0.0 and f1_score("no", ["no"]) == 1.0
    assert f1_score("yes it is", ["yes"]) == 0.0  # HotpotQA: yes/no must match exactly
    assert f1_score("x", []) == 0.0


# ---- the protocol on the embedded demo split -------------------------------------------------------------
def test_demo_split_is_embedded_and_consistent():
    env = agentgym.make("WikiSearch-v0")
    assert env.split == "demo" and len(env.task_ids()) == len(DEMO_QUESTIONS) == 22
    ids = {p[0] for p in DEMO_PASSAGES}
    for tid, q, golds, support in DEMO_QUESTIONS:
        assert set(support) <= ids and golds
        assert not any(normalize_answer(g) in normalize_answer(q).split() for g in golds), tid


def test_search_then_answer_protocol():
    env = agentgym.make("WikiSearch-v0")
    obs, info = env.reset(options={"task_id": "demo-06"})
    assert obs == "Question: What is the official capital of the country where Mount Kilimanjaro stands?"
    assert info["golden_answers"] == ["Dodoma"] and info["em"] is None and info["n_searches"] == 0
    assert "Dodoma" not in obs and "Dodoma" not in env.prompt()
    obs, r, term, trunc, info = env.step("<think>find the mountain</think><search>Mount Kilimanjaro in Africa</search>")
    # Search-R1's rendering: the title is the first line of wiki-18's contents, quotes included
    assert obs.startswith('<information>Doc 1(Title: "Mount Kilimanjaro") Mount Kilimanjaro is a dormant volcano')
    assert obs.endswith("</information>") and obs.count("\nDoc ") == 2
    assert (r, term, trunc) == (0.0, False, False) and info["action_tag"] == "search" and info["process_ok"]
    obs, r, term, trunc, info = env.step("<search>capital of Tanzania</search>")
    assert "Dodoma" in obs and info["n_searches"] == 2
    obs, r, term, trunc, info = env.step("<answer> dodoma. </answer>")
    assert (r, term, trunc) == (1.0, True, False) and info["won"] and info["score"] == 1.0
    assert info["em"] == 1.0 and info["f1"] == 1.0 and info["answer"] == "dodoma."
    assert "<search>capital of Tanzania</search>" in env.prompt()  # history keeps the tag


def test_wrong_answer_scores_zero_with_partial_f1():
    env = agentgym.make("WikiSearch-v0")
    env.reset(options={"task_id": "demo-03"})
    _, r, term, _, info = env.step("<answer>the Vistula canal</answer>")
    assert r == 0.0 and term and not info["won"] and info["em"] == 0.0 and info["f1"] == pytest.approx(2 / 3)
    assert info["score"] == 0.0


def test_first_tag_wins_and_invalid_actions():
    env = agentgym.make("WikiSearch-v0", invalid_action_penalty=0.1)
    env.reset(options={"task_id": "demo-02"})
    _, r, term, _, info = env.step("<answer>84</answer> <search>polonium</search>")
    assert term and r == 1.0
    env.reset(options={"task_id": "demo-02"})
    obs, r, term, _, info = env.step("<search>   </search>")
    assert not info["action_valid"] and r == pytest.approx(-0.1) and not term and "empty" in obs
    obs, r, term, _, info = env.step("<search>" + "word " * 300 + "</search>")
    assert not info["action_valid"] and "too long" in info["invalid_reason"]
    obs, r, term, _, info = env.step("<search>qqqzzzxxy</search>")
    assert obs == "<information></information>" and info["process_ok"] is False  # Search-R1's empty result
    obs, r, term, _, info = env.step("<search>broken \ud800 decode</search>")
    assert not info["action_valid"] and "not valid Unicode" in info["invalid_reason"] and not term


def test_truncation_without_answer_scores_zero():
    env = agentgym.make("WikiSearch-v0", max_turns=2)
    env.reset(options={"task_id": "demo-01"})
    env.step("<search>Marie Curie</search>")
    _, r, term, trunc, info = env.step("<search>radium</search>")
    assert (r, term, trunc) == (0.0, False, True) and info["em"] is None


def test_oracle_solves_every_demo_task():
    env = agentgym.make("WikiSearch-v0")
    for tid in env.task_ids():
        env.reset(options={"task_id": tid})
        total, done, steps = 0.0, False, 0
        while not done:
            _, r, term, trunc, info = env.step(env.oracle_action())
            total, done, steps = total + r, term or trunc, steps + 1
        assert total == 1.0 and info["em"] == 1.0 and info["f1"] == 1.0 and steps == 2, tid


def test_bm25_finds_a_supporting_passage_for_every_demo_question():
    env = agentgym.make("WikiSearch-v0")
    titles = {pid: t for pid, t, _ in DEMO_PASSAGES}
    for tid, q, _, support in DEMO_QUESTIONS:
        hits = env.retriever.search([q], 3)[0]
        assert {titles[s] for s in support} & {h.passage.title for h in hits}, tid


def test_random_policy_is_valid_and_seeded():
    def run(seed):
        env = agentgym.make("WikiSearch-v0")
        rng = np.random.default_rng(seed)
        env.reset(seed=seed)
        trace = []
        for _ in range(6):
            a = env.random_action(rng)
            obs, r, term, trunc, info = env.step(a)
            assert info["action_valid"], a
            trace.append((a, obs, r))
            if term or trunc:
                break
        return trace

    assert run(3) == run(3)
    assert len({tuple(map(tuple, run(s))) for s in range(5)}) > 1


def test_reset_options():
    env = agentgym.make("WikiSearch-v0")
    obs, info = env.reset(options={"task": {"question": "Who wrote Don Juan?", "golden_answers": ["Lord Byron"]}})
    assert obs == "Question: Who wrote Don Juan?"
    _, r, *_ = env.step("<answer>Lord Byron</answer>")
    assert r == 1.0
    assert env.reset(options={"task_index": 0})[1]["task_id"] == "demo-01"
    for bad in ({"task_id": "nope"}, {"task_index": 99}, {"bogus": 1}, {"task": {"question": "q"}},
                {"task": {"question": "", "golden_answers": ["a"]}}):
        with pytest.raises(TaskError):
            env.reset(options=bad)
    with pytest.raises(TaskError):
        agentgym.make("WikiSearch-v0", split="nope")
    with pytest.raises(TaskError):
        agentgym.make("WikiSearch-v0", topk=0)
    with pytest.raises(TaskError):
        agentgym.make("WikiSearch-v0", retriever="sparse")


def test_retriever_over_http_matches_in_process():
    from retrieval.server import RetrievalServer, ServerConfig

    local = agentgym.make("WikiSearch-v0")
    with RetrievalServer(local.retriever, ServerConfig(port=0)) as srv:
        remote = agentgym.make("WikiSearch-v0", retriever_url=srv.url)
        for tid in ("demo-05", "demo-12"):
            a, b = local.reset(options={"task_id": tid})[0], remote.reset(options={"task_id": tid})[0]
            assert a == b
            act = local.oracle_action()
            assert local.step(act)[0] == remote.step(act)[0]
        port = srv.port
    remote.reset(options={"task_id": "demo-01"})
    with pytest.raises(RetrieverUnavailableError) as e:  # the server is gone: an env failure, not a 0 reward
        remote.step("<search>Marie Curie</search>")
    assert isinstance(e.value, EnvCrashError) and str(port) in str(e.value)


def test_custom_retriever_object():
    class Fixed:
        def search(self, queries, topk=3):
            from retrieval.types import Hit, Passage

            return [[Hit(Passage("x", "Only", f"echo {q}"), 1.0, 0)] for q in queries]

    env = WikiSearchEnv(retriever=Fixed())
    env.reset(options={"task_id": "demo-01"})
    assert env.step("<search>hello</search>")[0] == '<information>Doc 1(Title: "Only") echo hello</information>'


def test_check_env_passes():
    from gymnasium.utils.env_checker import check_env

    check_env(agentgym.make("WikiSearch-v0"), skip_render_check=True)


# ---- staged data splits ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hotpot_env():
    if shared("wiki_search/qa/hotpotqa_distractor_500.jsonl") is None or \
            shared("wiki_search/corpus/hotpotqa_distractor_paragraphs_4968.jsonl") is None:
        pytest.skip("staged wiki_search data not found (set AGENTGYM_SHARED_DATA)")
    return agentgym.make("WikiSearch-v0", split="hotpotqa-500")


def test_hotpotqa_500_split(hotpot_env):
    env = hotpot_env
    assert len(env.task_ids()) == 500 and len(env.retriever) == 4968
    assert all(len(t.gold_titles) == 2 for t in env.tasks())
    wins = 0
    for tid in env.task_ids(25):
        obs, info = env.reset(options={"task_id": tid})
        assert obs == f"Question: {env.task.question}" and info["golden_answers"] == list(env.task.golden_answers)
        obs, *_ = env.step(env.oracle_action())
        assert obs.startswith('<information>Doc 1(Title: "')
        _, r, term, _, info = env.step(env.oracle_action())
        wins += r
    assert wins == 25


def test_eval_splits_need_an_index():
    if shared("wiki_search/qa/nq_eval.jsonl") is None:
        pytest.skip("staged wiki_search data not found (set AGENTGYM_SHARED_DATA)")
    with pytest.raises(TaskError, match="full Wikipedia index"):
        agentgym.make("WikiSearch-v0", split="nq")
    from retrieval.server import RetrievalServer, ServerConfig

    local = agentgym.make("WikiSearch-v0")
    with RetrievalServer(local.retriever, ServerConfig(port=0)) as srv:
        env = agentgym.make("WikiSearch-v0", split="bamboogle", retriever_url=srv.url)
        assert len(env.task_ids()) == 125
        obs, info = env.reset(seed=0)
        assert obs.startswith("Question: ") and info["golden_answers"]


def test_a_query_the_server_cannot_search_is_an_invalid_action():
    """The retrieval server answers an empty row and an 'errors' entry for a query its index fails on: the env
    reports an invalid action with the server's reason (the agent's text), not an env crash and not a search."""
    from retrieval.server import RetrievalServer, ServerConfig

    local = agentgym.make("WikiSearch-v0")

    class Fussy:
        def search(self, queries, topk=3):
            if any("BOOM" in q for q in queries):
                raise ValueError("the encoder chokes on this")
            return local.retriever.search(queries, topk)

    with RetrievalServer(Fussy(), ServerConfig(port=0)) as srv:
        env = agentgym.make("WikiSearch-v0", retriever_url=srv.url, invalid_action_penalty=0.1)
        env.reset(options={"task_id": "demo-01"})
        obs, r, term, _, info = env.step("<search>BOOM goes the query</search>")
        assert not info["action_valid"] and "the encoder chokes on this" in info["invalid_reason"]
        assert r == pytest.approx(-0.1) and not term and info["n_searches"] == 0
        obs, *_ = env.step("<search>Marie Curie</search>")
        assert obs.startswith('<information>Doc 1(Title: "Marie Curie")')
