"""``hf:PATH``: a batched text policy running a local Hugging Face ``transformers`` causal LM.

``PATH`` is a model directory (or a hub id already in the local cache: nothing is downloaded unless
``local_files_only=False``). Prompts are rendered with the tokenizer's chat template when it has one (``[system?,
user=prompt]``, generation prompt added), else used as plain text; they are generated in batches of ``batch_size``
with left padding. Under the episode-asynchronous runner the policy gets *dynamic* batches: the prompts waiting at
that moment, at most ``batch_size`` per ``generate`` call (``max_batch_size``); prompts that arrive while it generates
form the next batch, so an episode whose answer is done moves on instead of waiting for a whole turn's batch.
``device="auto"`` picks CUDA, then Apple MPS, then CPU; ``dtype="auto"`` is bfloat16 on CUDA
(float16 if the GPU lacks bf16) and float32 elsewhere.

Decoding is greedy unless ``temperature > 0``. Sampling is reproducible with ``seed`` set: each prompt draws from its
own ``torch.Generator`` seeded with :func:`~agentgym.rollout.policy.request_seeds` (a stable digest of ``seed`` and
the prompt's episode and turn, which the runner passes as ``contexts``), so a prompt's sample depends neither on the
call order, nor on the other prompts of its batch, nor on the process-global torch generator (left untouched): a
resumed eval samples what an uninterrupted one would have. ``transformers`` and ``torch`` are imported when the policy
is built, never by ``import agentgym``.
Every answer is a :class:`~agentgym.rollout.policy.PolicyResponse` with its token counts and latency.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Sequence

from ..context import eos_token_ids, non_text_token_ids
from ..errors import MissingDependencyError, PolicyError
from .policy import PolicyResponse, PromptContext, request_seeds

__all__ = ["HFConfig", "HFPolicy", "pick_device"]

logger = logging.getLogger(__name__)

_DTYPES = ("auto", "float32", "float16", "bfloat16")


@dataclass
class HFConfig:
    path: str
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    dtype: str = "auto"  # auto | float32 | float16 | bfloat16
    batch_size: int = 8
    max_new_tokens: int = 256
    temperature: float = 0.0  # 0: greedy
    top_p: float | None = None
    seed: int | None = None
    system_prompt: str | None = None
    chat_template: bool = True  # use the tokenizer's chat template when it has one
    local_files_only: bool = True
    trust_remote_code: bool = False

    def __post_init__(self):
        if not self.path:
            raise PolicyError("hf: policy needs a model path, e.g. hf:/models/Qwen2.5-0.5B-Instruct")
        if self.dtype not in _DTYPES:
            raise PolicyError(f"dtype must be one of {', '.join(_DTYPES)}, got {self.dtype!r}")
        if self.batch_size < 1 or self.max_new_tokens < 1:
            raise PolicyError("batch_size and max_new_tokens must be >= 1")


def pick_device(torch, requested: str = "auto") -> str:
    """``requested``, or for ``"auto"`` the first available of CUDA, Apple MPS and CPU."""
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


class HFPolicy:
    """Batched local generation; see the module docstring."""

    def __init__(self, config: HFConfig):
        try:
            import torch
            import transformers
        except ImportError as e:
            raise MissingDependencyError("transformers", "hf", "hf: policies (local models)") from e
        self.config, self._torch = config, torch
        self.device = pick_device(torch, config.device)
        if config.dtype == "auto":
            if self.device.startswith("cuda"):
                dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            else:
                dtype = torch.float32
        else:
            dtype = getattr(torch, config.dtype)
        self.dtype = dtype
        kw = dict(local_files_only=config.local_files_only, trust_remote_code=config.trust_remote_code)
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(config.path, **kw)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(config.path, dtype=dtype, **kw)
        except (OSError, ValueError) as e:
            raise PolicyError(f"cannot load hf:{config.path}: {e}") from e
        self.model.to(self.device).eval()
        tok = self.tokenizer
        tok.padding_side = "left"  # decoder-only batched generation pads on the left
        if tok.pad_token_id is None:
            if tok.eos_token_id is None:
                raise PolicyError(f"hf:{config.path}: the tokenizer has neither a pad nor an eos token")
            tok.pad_token = tok.eos_token
        self.use_chat = bool(config.chat_template and getattr(tok, "chat_template", None))
        self._non_text_ids = non_text_token_ids(tok, eos_token_ids(tok, self.model))
        self.name = f"hf:{config.path}"

    @property
    def max_batch_size(self) -> int:
        """The most prompts the async runner's dynamic batcher hands this policy at once."""
        return self.config.batch_size

    def __repr__(self) -> str:
        return f"HFPolicy(path={self.config.path!r}, device={self.device!r}, dtype={self.dtype})"

    def render(self, prompt: str) -> str:
        if not self.use_chat:
            return prompt
        msgs = ([{"role": "system", "content": self.config.system_prompt}] if self.config.system_prompt else []) + \
            [{"role": "user", "content": prompt}]
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def __call__(self, prompts: Sequence[str],
                 contexts: Sequence[PromptContext] | None = None) -> list[PolicyResponse]:
        c = self.config
        sampling = bool(c.temperature and c.temperature > 0)
        seeds = request_seeds(c.seed, prompts, contexts) if sampling and c.seed is not None else None
        out: list[PolicyResponse] = []
        bs = c.batch_size
        for start in range(0, len(prompts), bs):
            out.extend(self._generate(list(prompts[start:start + bs]),
                                      None if seeds is None else seeds[start:start + bs]))
        return out

    def _generate(self, prompts: list[str], seeds: list[int] | None) -> list[PolicyResponse]:
        torch, c = self._torch, self.config
        texts = [self.render(p) for p in prompts]
        # A chat template already holds the special tokens (BOS...); don't add them twice.
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not self.use_chat)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        gen_kw = dict(max_new_tokens=c.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id)
        if not self.use_chat and self._non_text_ids:
            # raw text (the transcript form agentgym train trains in): special tokens other than EOS are never
            # generated, as in the training rollouts (agentgym.context.non_text_token_ids): decoded text drops them
            gen_kw["suppress_tokens"] = self._non_text_ids
        if c.temperature and c.temperature > 0 and seeds is None:
            gen_kw.update(do_sample=True, temperature=c.temperature)
            if c.top_p is not None:
                gen_kw["top_p"] = c.top_p
        else:
            gen_kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            if seeds is not None:
                gen_kw["logits_processor"] = self._seeded_sampling(seeds)
        t0 = time.perf_counter()
        with torch.inference_mode():
            ids = self.model.generate(**enc, **gen_kw)
        latency = time.perf_counter() - t0
        width = enc["input_ids"].shape[1]
        new = ids[:, width:]
        eos = self.tokenizer.eos_token_id
        outs = []
        for row, mask in zip(new, enc["attention_mask"]):
            tokens = row.tolist()
            n_gen = len(tokens)
            finish = "length"
            for j, t in enumerate(tokens):
                if t == eos or (t == self.tokenizer.pad_token_id and eos is None):
                    n_gen, finish = j + 1, "stop"
                    break
            text = self.tokenizer.decode(tokens[:n_gen], skip_special_tokens=True)
            outs.append(PolicyResponse(text, {
                "prompt_tokens": int(mask.sum()), "completion_tokens": n_gen,
                "latency_s": round(latency, 6), "batch_size": len(prompts), "attempts": 1,
                "finish_reason": finish}))
        return outs

    def _seeded_sampling(self, seeds: list[int]):
        """Sampling as ``generate(do_sample=True)`` does it (temperature, the model's top-k, top-p), but each row
        draws from its own generator and keeps only the drawn token, which greedy decoding then picks."""
        import transformers

        c = self.config
        procs = [transformers.TemperatureLogitsWarper(c.temperature)]
        top_k = getattr(self.model.generation_config, "top_k", None)
        if top_k:
            procs.append(transformers.TopKLogitsWarper(top_k))
        if c.top_p is not None and c.top_p < 1.0:
            procs.append(transformers.TopPLogitsWarper(c.top_p))
        procs.append(_RowSampler(self._torch, seeds, self.device))
        return transformers.LogitsProcessorList(procs)


class _RowSampler:
    """A logits processor that draws one token per row from that row's generator and masks every other token."""

    def __init__(self, torch, seeds: list[int], device: str):
        self.torch = torch
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]

    def __call__(self, input_ids, scores):
        torch = self.torch
        probs = torch.softmax(scores.float(), dim=-1)
        picks = torch.cat([torch.multinomial(p, 1, generator=g) for p, g in zip(probs, self.generators)])
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(len(picks), device=scores.device), picks] = 0.0
        return out
