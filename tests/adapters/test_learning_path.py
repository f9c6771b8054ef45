"""What learning needs before any training: the saved tiny model reloads with its own tokenizer (transformers'
``AutoTokenizer``, as ``agentgym train`` and ``hf:`` policies load it) and the oracle wins with its actions after an
encode/decode round trip; training and evaluation show the model the same context (:mod:`agentgym.context`);
``export-sft`` writes plain-text rows in that form; the advantage controls of the learning lab."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers", reason="needs the 'trl' extra: pip install -e '.[trl]'")

import agentgym  # noqa: E402
from agentgym.context import ContextForm, policy_context  # noqa: E402

SPLIT = "gen-depth1"
N_TASKS = 8


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from adapters.tiny import save_tiny_model

    d = tmp_path_factory.mktemp("tiny")
    save_tiny_model(str(d), "TextCraft-v0", env_kwargs={"split": SPLIT}, n_tasks=N_TASKS)
    return d


def test_learning_tiny_model_reloads_with_its_tokenizer_and_the_oracle_wins_through_it(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.rollout.hf_policy import HFConfig, HFPolicy

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert "Qwen2" not in type(tok).__name__  # transformers 5.x forces Qwen2Tokenizer on qwen2 directories
    assert AutoModelForCausalLM.from_pretrained(tiny_dir).config.model_type == "llama"
    policy_tok = HFPolicy(HFConfig(path=str(tiny_dir), device="cpu")).tokenizer
    env = agentgym.make("TextCraft-v0", split=SPLIT)
    wins, actions = 0, 0
    for k, tid in enumerate(env.task_ids(N_TASKS)):
        env.reset(seed=k, options={"task_id": tid})
        prompt = env.prompt()
        assert tok.decode(tok(prompt, add_special_tokens=False)["input_ids"]) == prompt
        info = {}
        for _ in range(10):
            action = env.oracle_action()
            ids = tok(action, add_special_tokens=False)["input_ids"]
            assert tok.unk_token_id not in ids, action
            back = tok.decode(ids + [tok.eos_token_id], skip_special_tokens=True)
            assert back == action == policy_tok.decode(policy_tok(action, add_special_tokens=False)["input_ids"])
            actions += 1
            _obs, _r, term, trunc, info = env.step(back)
            if term or trunc:
                break
        wins += bool(info.get("won"))
    assert wins == N_TASKS and actions >= N_TASKS


def test_learning_training_and_eval_see_the_same_context(tiny_dir):
    """The tokens a training rollout conditions each action on decode to the text ``agentgym eval`` gives a text
    policy at that turn (transcript form, the default of both); the env's answers to bad actions are in the tiny
    model's vocabulary."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adapters.episodes import EpisodeConfig, play_episodes
    from agentgym.context import DEFAULT_CONTEXT_FORM
    from adapters.train import TrainSettings

    assert TrainSettings().context_form == DEFAULT_CONTEXT_FORM == "transcript"
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    env = agentgym.make("TextCraft-v0", split=SPLIT)
    tids = env.task_ids(2)
    eos = tok.eos_token_id
    for first, force_eos in (("prompt", False), ("observation", False), ("observation", True)):
        # force_eos: every response ends with EOS (transformers' forced_eos_token_id at the last new token), as a
        # trained model's do; the EOS is not text, so it must not enter the next turn's context
        gen = {"forced_eos_token_id": eos} if force_eos else {}
        cfg = EpisodeConfig(max_turns=3, max_new_tokens=8, max_completion_tokens=400, first_context=first,
                            generation_kwargs=gen)
        eps = play_episodes(model, tok, "TextCraft-v0", [(tids[0], 0, 0, 0), (tids[1], 1, 1, 1)], cfg,
                            env_kwargs={"split": SPLIT})
        for ep in eps:
            if force_eos:
                assert len(ep.turns) == 3  # random actions: the episode runs to max_turns
                ends = [ep.completion_ids[t.span[1] - 1] for t in ep.turns]
                assert ends[:-1] != [eos, eos] and ends[-1] == eos and ep.completion_ids.count(eos) == 1
            replay = agentgym.make("TextCraft-v0", split=SPLIT, max_turns=3,
                                   context_form={"kind": "transcript", "first": first})
            replay.reset(seed=ep.seed, options={"task_id": ep.task_id})
            full = ep.full_ids()
            assert len(ep.turns) >= 1
            for t in ep.turns:
                seen = full[:len(ep.prompt_ids) + t.span[0]]
                # the same text (a sampled token string may tokenize otherwise when re-encoded, as in any RL stack);
                # decoded with its special tokens, so an EOS left in the history would show
                assert tok.decode(seen) == policy_context(replay)
                replay.step(t.response)
            if first == "observation":
                assert ep.prompt_text == replay.reset(seed=ep.seed, options={"task_id": ep.task_id})[0]
    # the rebuilt-prompt form is the env's prompt; training refuses it with a clear error
    other = agentgym.make("TextCraft-v0", split=SPLIT, context_form="prompt")
    other.reset(seed=0, options={"task_id": tids[0]})
    other.step("<action>inventory</action>")
    assert policy_context(other) == other.prompt()
    from adapters.train import SettingsError, build_trainer, parse_settings

    with pytest.raises(SettingsError, match="transcript"):
        build_trainer(parse_settings(["--model", str(tiny_dir), "--context-form", "prompt", "--cpu"]))
    with pytest.raises(ValueError):
        ContextForm.parse("growing")


def test_learning_eval_records_the_context_form_and_export_writes_text_transcripts(tiny_dir, tmp_path):
    from agentgym import cli
    from agentgym.eval.export import ExportConfig, export_sft

    out = tmp_path / "hf.jsonl"
    rc = cli.main(["eval", "TextCraft-v0", "--split", SPLIT, "--episodes", "2", "--policy", f"hf:{tiny_dir}",
                   "--device", "cpu", "--max-tokens", "6", "--max-turns", "2", "--out", str(out)])
    assert rc == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all(r["env_kwargs"].get("context_form") == "transcript" for r in rows)
    oracle = tmp_path / "oracle.jsonl"
    assert cli.main(["eval", "TextCraft-v0", "--split", SPLIT, "--episodes", "2", "--out", str(oracle)]) == 0
    data = tmp_path / "sft.jsonl"
    export_sft(str(oracle), data, ExportConfig(per_turn=True, text=True, context_form="transcript"))
    turns = [json.loads(line) for line in data.read_text().splitlines()]
    assert all(isinstance(r["prompt"], str) and isinstance(r["completion"], str) for r in turns)
    env = agentgym.make("TextCraft-v0", split=SPLIT, context_form="transcript")
    by_task: dict = {}
    for r in turns:
        by_task.setdefault(r["task_id"], []).append(r)
    for tid, rs in by_task.items():  # each row's prompt is the transcript up to its turn
        env.reset(seed=rs[0]["seed"], options={"task_id": tid})
        for r in sorted(rs, key=lambda r: r["turn"]):
            assert r["prompt"] == policy_context(env)
            env.step(r["completion"])
    with pytest.raises(ValueError):
        ExportConfig(text=True)  # per-turn rows only


def test_learning_hf_eval_sees_a_transcript_as_raw_text(tiny_dir, monkeypatch):
    """``agentgym eval`` gives an ``hf:`` policy a transcript without its chat template (training encodes the raw
    transcript), the rebuilt prompt form with it; an ``hf:`` policy never generates a special token other than EOS
    (decoded text drops it, so it would be in no transcript)."""
    from agentgym import cli
    from agentgym.errors import PolicyError
    from agentgym.rollout import loading
    from agentgym.rollout.hf_policy import HFConfig, HFPolicy

    seen = []

    def capture(spec, **options):
        seen.append(options)
        raise PolicyError("captured")

    monkeypatch.setattr(loading, "load_policy", capture)
    base = ["eval", "TextCraft-v0", "--split", SPLIT, "--episodes", "1", "--policy", f"hf:{tiny_dir}"]
    for extra in ([], ["--context-form", "transcript"],
                  ["--env-arg", "context_form={'kind': 'transcript', 'first': 'observation'}"],
                  ["--context-form", "prompt"]):
        assert cli.main(base + extra) == 2
    assert [o.get("chat_template") for o in seen] == [False, False, False, None]
    policy = HFPolicy(HFConfig(path=str(tiny_dir), device="cpu"))
    tok = policy.tokenizer
    assert tok.eos_token_id not in policy._non_text_ids
    assert {tok.unk_token_id, tok.pad_token_id, tok.bos_token_id} <= set(policy._non_text_ids)


def test_learning_advantage_controls():
    from adapters.trl import control_advantages

    adv = np.array([[1.0, 1.0, 0.0], [-2.0, -2.0, -2.0], [0.5, 0.0, 0.0]], dtype=np.float32)
    mask = np.array([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=bool)
    assert np.array_equal(control_advantages(adv, mask, None), adv)
    assert not control_advantages(adv, mask, "zero").any()
    assert np.array_equal(control_advantages(adv, mask, "sign_flip"), -adv)
    sh = control_advantages(adv, mask, "shuffle", np.random.default_rng(3))
    assert not sh[~mask].any()
    row_values = sorted(float(sh[b][mask[b]][0]) for b in range(3))
    assert row_values == sorted([1.0, -2.0, 0.5])  # each row holds one episode's advantage, spread on its tokens
    assert all(np.unique(sh[b][mask[b]]).size == 1 for b in range(3))
