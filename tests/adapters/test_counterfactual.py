"""The counterfactual warm start (:mod:`adapters.counterfactual`, issue 32 item 6): renamed TextCraft transcripts are
consistent (the actions are the goal line's), never spell an excluded goal item, refuse what they cannot rewrite,
and train through ``agentgym train --warm-start --warm-start-counterfactual-steps`` with a key that records it."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]'")

from adapters.counterfactual import Renamer, parse_transcript, render_transcript, response_labels  # noqa: E402

SPLIT = "gen-depth1"
TASKS = [f"gen-d1-{i}" for i in range(12)]


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory):
    from adapters.warm_start import _transcripts, oracle_sft_rows

    d = tmp_path_factory.mktemp("oracle")
    sft = oracle_sft_rows("TextCraft-v0", TASKS, d, env_kwargs={"split": SPLIT}, max_turns=4,
                          first_context="observation")
    return _transcripts(sft)


def test_oracle_transcripts_round_trip(transcripts):
    assert len(transcripts) == len(TASKS)
    for t in transcripts:
        recipes, goal = parse_transcript(t)
        assert render_transcript(recipes, goal) == t


def test_other_text_is_refused(transcripts):
    t = transcripts[0]
    with pytest.raises(ValueError):
        parse_transcript(t.replace("<action>get ", "<action>get 1 ", 1))  # the action is not the line's
    with pytest.raises(ValueError):
        parse_transcript("Goal: craft stick.")
    with pytest.raises(ValueError, match="not a depth-1"):  # a second craft (depth 2) is not rewritten
        parse_transcript(t + "<action>craft 1 x using 1 y</action>")


def test_renamed_transcripts_are_consistent_and_avoid_excluded_names(transcripts):
    recipes0, g0 = parse_transcript(transcripts[0])
    excluded = [recipes0[g0].item, "oak planks", "stick"]
    renamer = Renamer(transcripts, exclude=excluded)
    rng = random.Random(0)
    goals = set()
    for _ in range(300):
        t = renamer.sample(rng)
        recipes, goal = parse_transcript(t)  # consistent: the actions are the goal line's gets and craft
        names = {x for r in recipes for x in (r.item, *(i for _, i in r.ingredients))}
        assert not names & set(excluded), t
        assert all(w in renamer.words for x in names for w in x.split())
        goals.add(recipes[goal].item)
    assert len(goals) > 100  # the goals vary: recalling a goal's recipe does not work
    # the same seed draws the same stream
    a, b = random.Random(5), random.Random(5)
    assert [renamer.sample(a) for _ in range(5)] == [renamer.sample(b) for _ in range(5)]


def test_response_labels_train_the_responses_and_their_eos(transcripts):
    from adapters.tiny import build_tokenizer, env_vocabulary

    tok = build_tokenizer(env_vocabulary("TextCraft-v0", 0, env_kwargs={"split": SPLIT}, task_ids=TASKS))
    t = transcripts[0]
    ids, labels = response_labels(tok, t)
    assert len(ids) == len(labels)
    a0, a1 = tok.convert_tokens_to_ids("<action>"), tok.convert_tokens_to_ids("</action>")
    targets = [(i, y) for i, y in enumerate(labels) if y != -100]
    # every response token is predicted from the one before it, and </action> is followed by EOS
    n_actions = ids.count(a0)
    assert sum(y == tok.eos_token_id for _, y in targets) == n_actions == ids.count(a1)
    assert sum(y == a0 for _, y in targets) == n_actions
    text = tok.decode([y if y != tok.eos_token_id else a1 for _, y in targets])
    assert text.count("<action>") == n_actions and "Got" not in text and "Crafting" not in text


def test_counterfactual_warm_start_through_agentgym_train(transcripts, tmp_path):
    from adapters.train import parse_settings, run_warm_start, warm_start_key

    model = tmp_path / "tiny"
    base = ["--env", "TextCraft-v0", "--split", SPLIT, "--task-ids", ",".join(TASKS[:6]), "--cpu",
            "--max-turns", "4", "--max-new-tokens", "24", "--context-first", "observation", "--eval-samples", "1"]
    from adapters.train import run as train_run

    train_run(parse_settings(base + ["--save-tiny-model", str(model)]))
    s = parse_settings(base + ["--model", str(model), "--output-dir", str(tmp_path / "run"), "--warm-start",
                               "--steps", "0", "--warm-start-counterfactual-steps", "20"])
    out = run_warm_start(s)
    record = json.loads((tmp_path / "run" / "warm-start" / "warm_start.json").read_text())
    assert record["config"]["counterfactual_steps"] == 20
    assert len(record["checks"]) == 1 and "counterfactual_loss" in record["checks"][0]
    assert warm_start_key(s)["config"]["warm_start"]["counterfactual_steps"] == 20
    assert (tmp_path / "run" / "warm-start" / "model.safetensors").is_file() and out.endswith("warm-start")
