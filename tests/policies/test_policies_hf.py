"""hf:PATH with a tiny randomly initialized Llama built here (word-level tokenizer, chat template; no downloads)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import agentgym  # noqa: E402,F401
from agentgym.eval.results import episode_fields  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from agentgym.rollout.hf_policy import HFPolicy, pick_device  # noqa: E402
from agentgym.rollout.loading import load_policy  # noqa: E402
from agentgym.rollout.policy import PromptContext  # noqa: E402
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
    mps = getattr(torch.backends, "mps", None)
    accelerated = torch.cuda.is_available() or (mps is not None and mps.is_available())
    if not accelerated:  # this machine: auto means CPU, and the weights are really there
        assert batched.device == "cpu" and next(batched.model.parameters()).device.type == "cpu"
    else:
        assert batched.device in ("cuda", "mps") and next(batched.model.parameters()).device.type == batched.device
    a, b = batched(prompts), single(prompts)
    assert [str(x) for x in a] == [str(x) for x in b]  # left padding does not change greedy outputs
    for r, p in zip(a, prompts):
        assert r.usage["completion_tokens"] <= 6 and r.usage["batch_size"] == 3
        # The chat template wrapped the prompt: role markers + prompt words + the generation marker.
        assert r.usage["prompt_tokens"] == len(p.split()) + 2


def fake_torch(cuda: bool, mps: bool | None):
    """Stand-ins for the two availability probes pick_device reads (no GPU here to probe for real)."""
    backends = SimpleNamespace(mps=SimpleNamespace(is_available=lambda: mps)) if mps is not None else SimpleNamespace()
    return SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: cuda), backends=backends)


@pytest.mark.parametrize("cuda, mps, want", [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu"),
                                             (False, None, "cpu")])
def test_pick_device_auto_order(cuda, mps, want):
    assert pick_device(fake_torch(cuda, mps)) == want
    assert pick_device(fake_torch(cuda, mps), "cuda:1") == "cuda:1"  # an explicit device is kept as asked


def test_sampling_is_seeded_per_episode_and_turn_not_per_call(tiny_model):
    mk = lambda bs: load_policy(f"hf:{tiny_model}", temperature=1.0, seed=7, max_new_tokens=8, batch_size=bs)  # noqa
    prompts = ["goal craft", "goal craft", "get 1 stick", "inventory"]
    # Two members of one group (same prompt), another task, and a later turn of the first episode.
    ctx = [PromptContext("t0", 3, 0, 0, (3, 0, 0)), PromptContext("t0", 3, 1, 0, (3, 0, 1)),
           PromptContext("t1", 3, 0, 0, (3, 1, 0)), PromptContext("t0", 3, 0, 1, (3, 0, 0))]
    state = torch.random.get_rng_state()
    pol = mk(2)
    pol(["warm-up call: the outputs below must not depend on what came before"])
    x = [str(r) for r in pol(prompts, contexts=ctx)]
    assert x[0] != x[1]  # the members of a group are not given the same sample
    # Another policy instance, another batch size, another order and batch composition: the same draws.
    order = [3, 1, 0, 2]
    y = mk(3)([prompts[i] for i in order], contexts=[ctx[i] for i in order])
    assert [str(y[order.index(i)]) for i in range(4)] == x
    assert [str(r) for r in mk(1)(prompts[1:2], contexts=ctx[1:2])] == x[1:2]
    # Without contexts, equal prompts of a call still get distinct, reproducible seeds.
    a, b = mk(2)(prompts), mk(4)(prompts)
    assert [str(r) for r in a] == [str(r) for r in b] and str(a[0]) != str(a[1])
    assert torch.equal(state, torch.random.get_rng_state())  # the global generator is left alone


def test_dtype_flag(tiny_model):
    p16 = load_policy(f"hf:{tiny_model}", dtype="bfloat16", device="cpu", max_new_tokens=2)
    assert isinstance(p16, HFPolicy) and p16.device == "cpu"
    assert next(p16.model.parameters()).dtype == torch.bfloat16 and len(p16(["get 1"])) == 1
    with pytest.raises(Exception, match="dtype"):
        load_policy(f"hf:{tiny_model}", dtype="int8")
    with pytest.raises(Exception, match="cannot load"):
        load_policy("hf:/nonexistent/model-dir")


def test_runner_gives_group_members_their_own_samples(tiny_model):
    pol = load_policy(f"hf:{tiny_model}", temperature=1.0, seed=11, max_new_tokens=6, batch_size=3)
    kw = dict(env_kwargs={"split": "gen-depth1"}, max_turns=2)
    a = collect_groups("TextCraft-v0", ["gen-d1-0"], 3, pol, **kw)
    b = collect_groups("TextCraft-v0", ["gen-d1-0"], 3, pol, **kw)
    responses = [[r.response for r in t.turns] for t in a.trajectories]
    assert len({r[0] for r in responses}) == 3  # same first prompt, three different samples
    assert responses == [[r.response for r in t.turns] for t in b.trajectories]


def test_runner_with_local_model(tiny_model):
    pol = load_policy(f"hf:{tiny_model}", max_new_tokens=8, batch_size=4)
    res = collect_groups("TextCraft-v0", ["gen-d1-0", "gen-d1-1"], 2, pol, env_kwargs={"split": "gen-depth1"},
                         max_turns=2)
    assert not res.errors and all(len(t.turns) == 2 for t in res.trajectories)
    row = episode_fields(res.trajectories[0])
    assert len(row["requests"]) == 2 and row["completion_tokens"] > 0 and row["prompt_tokens"] > 100
    # An untrained model writes no well-formed action: the env flags it, the runner does not fail.
    assert row["invalid_actions"] == 2


def test_async_runner_batches_whatever_is_waiting_up_to_batch_size(tiny_model):
    """Dynamic batching: the async runner hands generate() the prompts waiting at that moment, at most batch_size;
    greedy answers do not depend on the batch, so the episodes equal lockstep's."""
    pol = load_policy(f"hf:{tiny_model}", max_new_tokens=4, batch_size=3, dtype="float32")
    calls = []
    generate = pol._generate
    pol._generate = lambda prompts, *rest: calls.append(len(prompts)) or generate(prompts, *rest)
    kw = dict(env_kwargs={"split": "gen-depth1"}, max_turns=2)
    a = collect_groups("TextCraft-v0", ["gen-d1-0", "gen-d1-1"], 2, pol, schedule="async", **kw)
    async_calls, calls[:] = list(calls), []
    b = collect_groups("TextCraft-v0", ["gen-d1-0", "gen-d1-1"], 2, pol, schedule="lockstep", **kw)
    assert [[r.response for r in t.turns] for t in a.trajectories] == \
        [[r.response for r in t.turns] for t in b.trajectories]
    assert max(async_calls) == 3 and sum(async_calls) == 8  # never more than batch_size per generate call
    assert calls == [3, 1, 3, 1]  # lockstep: one fixed batch per turn, split by batch_size
