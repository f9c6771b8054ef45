"""hf:PATH with a tiny randomly initialized Llama built here (word-level tokenizer, chat template; no downloads)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import agentgym  # noqa: E402,F401
from agentgym.rollout.hf_policy import HFPolicy  # noqa: E402
from agentgym.rollout.policy import load_policy  # noqa: E402
from agentgym.rollout.runner import collect_groups  # noqa: E402

WORDS = ("<action> </action> <think> </think> inventory craft get using from the a of and minecraft planks stick "
         "crafting table you have 1 2 3 4 goal task observation step your turn now it's is").split()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    specials = ["[PAD]", "[UNK]", "<s>", "</s>", "<|user|>", "<|system|>", "<|assistant|>"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece()  # joins words with spaces
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                bos_token="<s>", eos_token="</s>")
    fast.chat_template = ("{% for m in messages %}<|{{ m.role }}|> {{ m.content }} {% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    fast.save_pretrained(path)
    cfg = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                                   pad_token_id=0, bos_token_id=2, eos_token_id=3)
    torch.manual_seed(0)  # only to build the fixture's weights
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)


def test_batched_generation_matches_one_prompt_at_a_time(tiny_model):
    prompts = ["goal craft a stick", "your inventory is planks and a crafting table now craft the stick", "get 2"]
    batched = load_policy(f"hf:{tiny_model}", device="auto", dtype="float32", batch_size=3, max_new_tokens=6)
    single = load_policy(f"hf:{tiny_model}", dtype="float32", batch_size=1, max_new_tokens=6)
    assert batched.device == ("cuda" if torch.cuda.is_available() else batched.device)
    a, b = batched(prompts), single(prompts)
    assert [str(x) for x in a] == [str(x) for x in b]  # left padding does not change greedy outputs
    for r, p in zip(a, prompts):
        assert r.usage["completion_tokens"] <= 6 and r.usage["batch_size"] == 3
        # The chat template wrapped the prompt: role markers + prompt words + the generation marker.
        assert r.usage["prompt_tokens"] == len(p.split()) + 2


def test_sampling_is_seeded_and_leaves_the_global_generator_alone(tiny_model):
    mk = lambda: load_policy(f"hf:{tiny_model}", temperature=1.0, seed=7, max_new_tokens=8, batch_size=2)  # noqa
    state = torch.random.get_rng_state()
    x, y = mk()(["goal craft", "get 1 stick", "inventory"]), mk()(["goal craft", "get 1 stick", "inventory"])
    assert [str(r) for r in x] == [str(r) for r in y]
    assert torch.equal(state, torch.random.get_rng_state())


def test_dtype_flag(tiny_model):
    p16 = load_policy(f"hf:{tiny_model}", dtype="bfloat16", device="cpu", max_new_tokens=2)
    assert isinstance(p16, HFPolicy) and p16.device == "cpu"
    assert next(p16.model.parameters()).dtype == torch.bfloat16 and len(p16(["get 1"])) == 1
    with pytest.raises(Exception, match="dtype"):
        load_policy(f"hf:{tiny_model}", dtype="int8")
    with pytest.raises(Exception, match="cannot load"):
        load_policy("hf:/nonexistent/model-dir")


def test_runner_with_local_model(tiny_model):
    pol = load_policy(f"hf:{tiny_model}", max_new_tokens=8, batch_size=4)
    res = collect_groups("TextCraft-v0", ["gen-d1-0", "gen-d1-1"], 2, pol, env_kwargs={"split": "gen-depth1"},
                         max_turns=2)
    assert not res.errors and all(len(t.turns) == 2 for t in res.trajectories)
    row = res.trajectories[0].summary()
    assert len(row["requests"]) == 2 and row["completion_tokens"] > 0 and row["prompt_tokens"] > 100
    # An untrained model writes no well-formed action: the env flags it, the runner does not fail.
    assert row["invalid_actions"] == 2
