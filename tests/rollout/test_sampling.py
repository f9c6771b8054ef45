"""Token sampling (agentgym.rollout.sampling): the distribution is the one named (T = 1 is the whole vocabulary, not
transformers' default top-k 50), each row draws from its own keyed stream (common random numbers), and the inverse-CDF
draw has the model's probabilities."""

from __future__ import annotations

import numpy as np
import pytest

from agentgym.rollout.sampling import GREEDY, Sampling, row_seeds, row_uniforms

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_sampling_settings_are_checked_and_recorded():
    assert Sampling().identity() == {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    assert GREEDY.greedy and GREEDY.identity() == {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
    for bad in (dict(temperature=-1.0), dict(top_k=-1), dict(top_k=2.5), dict(top_p=0.0), dict(top_p=1.5),
                dict(temperature=float("nan"))):
        with pytest.raises(ValueError):
            Sampling(**bad)


def test_row_uniforms_are_exact_integer_streams():
    seeds = row_seeds([(1, 2, 3), (1, 2, 4), "text key", 7])
    assert seeds.dtype == np.uint64 and len(set(seeds.tolist())) == 4
    u0, u1 = row_uniforms(seeds, 0), row_uniforms(seeds, 1)
    assert np.all((u0 >= 0) & (u0 < 1)) and not np.array_equal(u0, u1)
    assert np.array_equal(row_uniforms(seeds[1:2], 0), u0[1:2])  # a row's stream ignores the other rows
    many = row_uniforms(row_seeds(list(range(20000))), 3)
    assert abs(many.mean() - 0.5) < 0.01 and abs(np.quantile(many, 0.1) - 0.1) < 0.01


def _draws(probs: np.ndarray, n: int, sampling: Sampling = Sampling()) -> np.ndarray:
    """``n`` one-token draws (rows keyed 0..n-1) from the distribution ``probs`` through generate_kwargs' processors."""
    from agentgym.rollout.sampling import generate_kwargs

    procs = generate_kwargs(sampling, list(range(n)), prompt_width=1)["logits_processor"]
    scores = torch.log(torch.as_tensor(probs, dtype=torch.float32)).repeat(n, 1)
    out = procs(torch.zeros((n, 1), dtype=torch.long), scores)
    assert torch.all(torch.isfinite(out).sum(dim=1) == 1)  # one token left per row: greedy decoding emits it
    return out.argmax(dim=1).numpy()


def test_inverse_cdf_draws_have_the_models_probabilities():
    probs = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625])
    n = 8000
    freq = np.bincount(_draws(probs, n), minlength=5) / n
    # binomial s.d. at most sqrt(0.25 / 8000) = 0.0056: 0.03 is more than 5 of them
    assert np.all(np.abs(freq - probs) < 0.03), freq
    # a zero-probability token is never drawn
    assert 2 not in set(_draws(np.array([0.5, 0.5, 0.0]), 2000).tolist())


def test_temperature_one_samples_the_whole_vocabulary_and_top_k_cuts_it():
    """transformers applies top_k=50 to a sampling generate() call that leaves it unset; Sampling() must not: over
    a flat distribution of 400 tokens, draws land outside any 50 tokens most of the time."""
    probs = np.full(400, 1 / 400)
    full = _draws(probs, 400)
    assert len(set(full.tolist())) > 150
    cut = _draws(probs + np.linspace(0, 1e-4, 400), 400, Sampling(top_k=50))
    assert set(cut.tolist()) <= set(range(350, 400))  # the 50 likeliest


def test_generate_never_falls_back_to_the_models_generation_config(tmp_path):
    from adapters.tiny import build_tiny_model, build_tokenizer

    from agentgym.rollout.sampling import generate_kwargs

    tok = build_tokenizer([f"w{i}" for i in range(300)])
    model = build_tiny_model(tok, hidden_size=16, seed=0)
    model.generation_config.top_k = 5  # a checkpoint's own default must not cut the distribution
    model.generation_config.do_sample = True
    ids = torch.as_tensor([[tok.bos_token_id, 5, 6, 7]])
    kw = generate_kwargs(Sampling(), [(0, r) for r in range(64)], prompt_width=4)
    out = model.generate(input_ids=ids.repeat(64, 1), attention_mask=torch.ones((64, 4), dtype=torch.long),
                         max_new_tokens=1, pad_token_id=tok.pad_token_id, **kw)
    first = out[:, 4].tolist()
    assert len(set(first)) > 5  # more than the generation config's top 5
    again = model.generate(input_ids=ids.repeat(64, 1), attention_mask=torch.ones((64, 4), dtype=torch.long),
                           max_new_tokens=1, pad_token_id=tok.pad_token_id, **kw)
    assert again[:, 4].tolist() == first  # the same keys, the same draws
