"""Token-exact transcripts (issue 32): training, the in-training evaluation and ``agentgym eval --policy hf:`` condition
every response on the same token ids, even where a generated token string encodes otherwise (the word-level tiny
tokenizer encodes ``"using" + "matching"`` as one unknown word). The rollouts keep the ids they generate; an ``hf:``
policy keeps each episode's ids and appends only the encoded new text (:mod:`agentgym.rollout.hf_policy`). Checked on
every response of a short training run of the lab's settings, and every run records its sampling distribution."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl", reason="needs the 'trl' extra: pip install -e '.[trl]'")

import agentgym  # noqa: E402
from agentgym.context import policy_context  # noqa: E402

SPLIT = "gen-depth1"
TASKS = ["gen-d1-0", "gen-d1-1"]
FORM = {"kind": "transcript", "first": "observation"}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from adapters.tiny import build_tiny_model, build_tokenizer, env_vocabulary

    d = tmp_path_factory.mktemp("tiny")
    tok = build_tokenizer(env_vocabulary("TextCraft-v0", 0, env_kwargs={"split": SPLIT}, task_ids=TASKS))
    build_tiny_model(tok, hidden_size=32, seed=0).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _replay(policy, env, ep, key) -> int:
    """Feed episode ``ep``'s responses to ``policy``'s context builder (as ``agentgym eval`` would have asked it, turn
    by turn); check each turn's context ids equal the training's. Returns the number of responses whose text does
    not encode back to the generated ids."""
    tok = policy.tokenizer
    env.reset(seed=ep.seed, options={"task_id": ep.task_id})
    full = ep.full_ids()
    not_round_trip = 0
    for t in ep.turns:
        prompt = policy_context(env)
        ids = policy.context_ids(prompt, key)
        assert ids == full[:len(ep.prompt_ids) + t.span[0]], (ep.task_id, t.turn_idx, prompt)
        response_ids = ep.completion_ids[t.span[0]:t.span[1]]
        not_round_trip += tok(t.response, add_special_tokens=False)["input_ids"] != \
            [i for i in response_ids if i != tok.eos_token_id]
        policy._remember(key, prompt, ids, response_ids, t.response)
        env.step(t.response)
    return not_round_trip


def test_every_response_of_a_training_run_is_token_exact(tiny_dir, tmp_path, monkeypatch):
    """A two-step ``agentgym train`` run with the lab's settings (transcript from the first observation, 3 turns):
    every rollout and every in-training evaluation episode, replayed through an ``hf:`` policy's context builder,
    gives the same ids at every turn; most of these random responses do not survive decode -> encode, so the check
    has teeth. metrics.jsonl records the sampling distribution of the rollouts and of the evaluation."""
    import adapters.episodes as episodes_mod
    import adapters.task_eval as task_eval_mod
    import adapters.trl as trl_mod
    from adapters.train import TrainSettings, run
    from agentgym.rollout.hf_policy import HFConfig, HFPolicy

    played = []
    real = episodes_mod.play_episodes

    def recording(*a, **kw):
        eps = real(*a, **kw)
        played.extend(eps)
        return eps

    monkeypatch.setattr(trl_mod, "play_episodes", recording)
    monkeypatch.setattr(task_eval_mod, "play_episodes", recording)
    out = tmp_path / "run"
    run(TrainSettings(env="TextCraft-v0", model=str(tiny_dir), split=SPLIT, task_ids=TASKS, group_size=4,
                      batch_groups=2, steps=2, max_turns=3, max_new_tokens=12, max_completion_tokens=160,
                      learning_rate=1e-3, cpu=True, output_dir=str(out), eval_every=2, eval_samples=2,
                      save_steps=1000, context_first="observation"))
    assert len(played) >= 2 * 8 + 2 * (2 + 2 * 2)  # 2 steps of 8 rollouts, 2 evaluations of 2 greedy + 4 sampled
    policy = HFPolicy(HFConfig(path=str(tiny_dir), device="cpu", chat_template=False))
    env = agentgym.make("TextCraft-v0", split=SPLIT, max_turns=3, context_form=FORM)
    not_round_trip = sum(_replay(policy, env, ep, ("replay", k)) for k, ep in enumerate(played))
    responses = sum(len(ep.turns) for ep in played)
    assert not_round_trip > responses // 4, (not_round_trip, responses)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "agentgym/success" in r]
    evals = [r for r in rows if "eval/sampled_success" in r]
    assert steps and evals
    assert all((r["agentgym/temperature"], r["agentgym/top_k"], r["agentgym/top_p"]) == (1.0, 0.0, 1.0)
               for r in steps)
    assert all((r["eval/temperature"], r["eval/top_k"], r["eval/top_p"]) == (1.0, 0, 1.0) for r in evals)


def test_hf_policy_keeps_a_generated_token_string_that_encodes_otherwise(tiny_dir):
    """``"using"`` then ``"matching"`` (two bare-word pieces) decode to ``"usingmatching"``, which the tokenizer
    encodes as one unknown word: the policy's next context keeps the two generated ids."""
    from agentgym.rollout.hf_policy import HFConfig, HFPolicy

    policy = HFPolicy(HFConfig(path=str(tiny_dir), device="cpu", chat_template=False))
    tok = policy.tokenizer
    vocab = tok.get_vocab()
    response_ids = [vocab["using"], vocab["matching"]] if "matching" in vocab else [vocab["using"], vocab["craft"]]
    text = tok.decode(response_ids)
    assert tok(text, add_special_tokens=False)["input_ids"] != response_ids  # decode -> encode is not the identity
    env = agentgym.make("TextCraft-v0", split=SPLIT, max_turns=3, context_form=FORM)
    env.reset(seed=0, options={"task_id": TASKS[0]})
    prompt = policy_context(env)
    ids = policy.context_ids(prompt, ("k", (0,)))
    policy._remember(("k", (0,)), prompt, ids, response_ids + [tok.eos_token_id], text)
    env.step(text)
    nxt = policy_context(env)
    again = policy.context_ids(nxt, ("k", (0,)))
    assert again[:len(ids) + 2] == ids + response_ids  # the generated ids, EOS dropped
    assert again[len(ids) + 2:] == tok(nxt[len(prompt + text):], add_special_tokens=False)["input_ids"]
    # another episode, or a prompt that does not extend the kept transcript: encoded whole
    assert policy.context_ids(nxt, ("other", (0,))) == tok(nxt)["input_ids"]


def test_hf_eval_and_the_training_rollout_play_the_same_greedy_episodes(tiny_dir, tmp_path):
    """The same model, greedy, on the same tasks: ``agentgym eval --policy hf:`` and the training's rollout
    (``adapters.episodes``, which the in-training evaluation plays) condition on the same ids, so they write the same
    responses, turn by turn (the issue saw 75 % vs 62.5 % for one checkpoint when the evaluation re-encoded the
    text). The rows record the greedy sampling settings."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adapters.episodes import EpisodeConfig, play_episodes
    from agentgym import cli
    from agentgym.eval.transcripts import load_episodes

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tasks = [f"gen-d1-{i}" for i in range(6)]
    cfg = EpisodeConfig(max_turns=3, max_new_tokens=12, max_completion_tokens=400, first_context="observation",
                        do_sample=False)
    eps = play_episodes(model, tok, "TextCraft-v0", [(t, 0, k, k) for k, t in enumerate(tasks)], cfg,
                        env_kwargs={"split": SPLIT})
    out = tmp_path / "hf.jsonl"
    rc = cli.main(["eval", "TextCraft-v0", "--split", SPLIT, "--tasks", ",".join(tasks), "--policy", f"hf:{tiny_dir}",
                   "--device", "cpu", "--max-tokens", "12", "--max-turns", "3", "--out", str(out), "--env-arg",
                   "context_form={'kind': 'transcript', 'first': 'observation'}"])
    assert rc == 0
    records = load_episodes(out)
    assert all(r.row["sampling"] == {"temperature": 0.0, "top_k": 0, "top_p": 1.0} for r in records)
    hf = {r.row["task_id"]: [t["response"] for t in r.transcript["turns"]] for r in records}
    assert hf == {e.task_id: [t.response for t in e.turns] for e in eps}
