"""How a local model samples its tokens: one definition for training rollouts, their evaluations and ``hf:`` policies.

:class:`Sampling` names the distribution explicitly: ``temperature`` (0 = greedy), ``top_k`` (0 = no cut) and
``top_p`` (1.0 = no cut). ``Sampling()`` is true temperature-1 sampling over the whole vocabulary. transformers
applies a default of ``top_k=50`` to every sampling ``generate`` call whose caller leaves ``top_k`` unset; these
settings never leave anything to the model's ``generation_config``: :func:`generate_kwargs` always turns
transformers' own sampling off and samples through its own logits processors.

Each row of a batch draws from its own stream of uniform numbers, keyed by integers the caller chooses (an
episode's identity and turn): :func:`row_uniforms`, a counter-based hash (SplitMix64) of the key and the token's
position in the response. A token is drawn by inverting the cumulative distribution at that uniform. So a row's
sample depends neither on the other rows of its batch nor on any global random state, and two models sampled with
the same keys share their random numbers (*common random numbers*): where their distributions agree they draw the
same tokens, so a before/after difference measures the models, not the draw. The uniforms are integer arithmetic
(exact on every machine); the inversion compares them with the model's probabilities, which differ across CPUs in
the last bits, so the draws agree across machines except at such a boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..hashing import stable_digest

__all__ = ["Sampling", "GREEDY", "row_seeds", "row_uniforms", "generate_kwargs"]


@dataclass(frozen=True)
class Sampling:
    """A sampling distribution: ``temperature`` > 0 samples (0: greedy), ``top_k`` keeps the k most likely tokens
    (0: all), ``top_p`` the smallest set holding that much probability (1.0: all)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0: no cut), got {self.top_k!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1: no cut), got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def identity(self) -> dict:
        """The settings as recorded in metrics and results rows (greedy: temperature 0 and no cuts)."""
        if self.greedy:
            return {"temperature": 0.0, "top_k": 0, "top_p": 1.0}
        return {"temperature": float(self.temperature), "top_k": int(self.top_k), "top_p": float(self.top_p)}


GREEDY = Sampling(temperature=0.0)

_MASK64 = (1 << 64) - 1


def row_seeds(keys: Sequence[Sequence[int] | int | str]) -> np.ndarray:
    """One 64-bit stream seed per row from its key (a sequence of integers, an integer or a string)."""
    out = []
    for k in keys:
        text = k if isinstance(k, str) else ",".join(str(int(x)) for x in (k if isinstance(k, (list, tuple)) else [k]))
        out.append(stable_digest(text, namespace="token-sampling"))
    return np.asarray(out, dtype=np.uint64)


def row_uniforms(seeds: np.ndarray, position: int) -> np.ndarray:
    """The uniform in [0, 1) of each row's stream at ``position`` (SplitMix64 of seed + position x golden ratio)."""
    with np.errstate(over="ignore"):
        z = np.asarray(seeds, dtype=np.uint64) + np.uint64((int(position) + 1) * 0x9E3779B97F4A7C15 & _MASK64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


class _InverseCdfSampler:
    """A logits processor that draws one token per row (the row's uniform at this position, inverted through the
    row's distribution) and masks every other token, so that greedy decoding emits the drawn token."""

    def __init__(self, seeds: np.ndarray, prompt_width: int):
        self.seeds = np.asarray(seeds, dtype=np.uint64)
        self.prompt_width = int(prompt_width)

    def __call__(self, input_ids, scores):
        import torch

        position = int(input_ids.shape[1]) - self.prompt_width
        u = torch.as_tensor(row_uniforms(self.seeds, position), dtype=torch.float64, device=scores.device)
        probs = torch.softmax(scores.double(), dim=-1)
        cdf = probs.cumsum(dim=-1)
        # the first token whose cumulative probability exceeds u x total: a token of non-zero probability
        picks = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1), right=True).squeeze(1)
        picks = picks.clamp(max=scores.shape[-1] - 1)
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(scores.shape[0], device=scores.device), picks] = 0.0
        return out


def generate_kwargs(sampling: Sampling, keys: Sequence[Any] | None, prompt_width: int) -> dict:
    """The ``model.generate`` keyword arguments that sample ``sampling``'s distribution, row ``i`` from the stream
    of ``keys[i]`` (:func:`row_seeds`), for inputs left-padded to ``prompt_width`` tokens. Greedy needs no keys.
    transformers' own sampling is off (``do_sample=False``) and its sampling settings are cleared, so no default of
    the model's ``generation_config`` (such as ``top_k=50``) applies."""
    kw: dict[str, Any] = dict(do_sample=False, temperature=None, top_k=None, top_p=None)
    if sampling.greedy:
        return kw
    if keys is None:
        raise ValueError("sampling needs one key per row")
    import transformers

    procs: list = []
    if sampling.temperature != 1.0:
        procs.append(transformers.TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k:
        procs.append(transformers.TopKLogitsWarper(sampling.top_k))
    if sampling.top_p < 1.0:
        procs.append(transformers.TopPLogitsWarper(sampling.top_p))
    procs.append(_InverseCdfSampler(row_seeds(keys), prompt_width))
    kw["logits_processor"] = transformers.LogitsProcessorList(procs)
    return kw
