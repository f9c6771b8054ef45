"""``hf:PATH``: a batched text policy running a local Hugging Face ``transformers`` causal LM.

``PATH`` is a model directory (or a hub id already in the local cache: nothing is downloaded unless
``local_files_only=False``). Prompts are rendered with the tokenizer's chat template when it has one (``[system?,
user=prompt]``, generation prompt added), else used as plain text; they are generated in batches of ``batch_size``
with left padding. Under the episode-asynchronous runner the policy gets *dynamic* batches: the prompts waiting at
that moment, at most ``batch_size`` per ``generate`` call (``max_batch_size``); prompts that arrive while it generates
form the next batch, so an episode whose answer is done moves on instead of waiting for a whole turn's batch.
``device="auto"`` picks CUDA, then Apple MPS, then CPU; ``dtype="auto"`` is bfloat16 on CUDA
(float16 if the GPU lacks bf16) and float32 elsewhere.

Decoding is greedy unless ``temperature > 0``; sampling draws from exactly the distribution ``temperature``,
``top_k`` (default 0: no cut) and ``top_p`` (default 1.0: no cut) name (:mod:`agentgym.rollout.sampling`; nothing is
left to the model's ``generation_config``, whose ``top_k=50`` default transformers would otherwise apply). Each prompt
draws from its own stream keyed by :func:`~agentgym.rollout.policy.request_seeds` (a stable digest of ``seed`` and the
prompt's episode and turn, which the runner passes as ``contexts``), so a prompt's sample depends neither on the
call order, nor on the other prompts of its batch, nor on any global generator: with ``seed`` set a resumed eval
samples what an uninterrupted one would have (without it, the policy draws its base seed at random).

Token-exact transcripts: in raw-text mode (no chat template) the policy keeps, per episode (``contexts``), the token
ids it conditioned on and generated. When the next prompt extends that episode's last prompt and response as text
(a transcript: the observation appended), only the new text is encoded and appended to the kept ids, and the
response's ids are kept as generated (its EOS dropped, :func:`agentgym.context.response_transcript_ids`). This is how
``agentgym train``'s rollouts build their context (:mod:`adapters.episodes`), so a checkpoint is evaluated on the very
token ids it was trained on, even where a generated token string would encode otherwise. Other prompts (the rebuilt
prompt form, no ``contexts``) are encoded whole. ``transformers`` and ``torch`` are imported when the policy is
built, never by ``import agentgym``.
Every answer is a :class:`~agentgym.rollout.policy.PolicyResponse` with its token counts and latency.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

from ..context import eos_token_ids, non_text_token_ids, response_transcript_ids
from ..errors import MissingDependencyError, PolicyError
from .policy import PolicyResponse, PromptContext, request_seeds
from .sampling import Sampling, generate_kwargs

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
    top_k: int = 0  # 0: no cut
    top_p: float = 1.0  # 1.0: no cut
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
        try:
            Sampling(float(self.temperature), self.top_k, float(self.top_p))
        except ValueError as e:
            raise PolicyError(f"hf: sampling settings: {e}") from None

    def sampling(self) -> Sampling:
        """The distribution responses are drawn from (greedy at temperature 0)."""
        return Sampling(float(self.temperature), self.top_k, float(self.top_p))


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
        self._eos = eos_token_ids(tok, self.model)
        self._non_text_ids = non_text_token_ids(tok, self._eos)
        self._sampling = config.sampling()
        # without a seed, sampling is random: a base seed of its own, drawn once
        self._base_seed = config.seed if config.seed is not None else secrets.randbits(31)
        # per episode: (the text so far, its token ids), see the module docstring
        self._transcripts: OrderedDict[tuple, tuple[str, list[int]]] = OrderedDict()
        self.name = f"hf:{config.path}"

    #: the episodes whose transcript ids are kept (least recently used dropped first)
    MAX_TRANSCRIPTS = 16384

    @property
    def sampling(self) -> dict:
        """The sampling distribution as results rows record it (temperature, top_k, top_p)."""
        return self._sampling.identity()

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
        seeds = None if self._sampling.greedy else request_seeds(self._base_seed, prompts, contexts)
        keys = [None] * len(prompts) if contexts is None or self.use_chat else \
            [(c.task_id, tuple(c.episode)) for c in contexts]
        out: list[PolicyResponse] = []
        bs = self.config.batch_size
        for start in range(0, len(prompts), bs):
            out.extend(self._generate(list(prompts[start:start + bs]), keys[start:start + bs],
                                      None if seeds is None else seeds[start:start + bs]))
        return out

    def context_ids(self, prompt: str, key: tuple | None) -> list[int]:
        """The token ids the policy conditions on for ``prompt``: the kept ids of episode ``key`` with the new text
        encoded and appended when ``prompt`` extends that episode's transcript, else ``prompt`` encoded whole."""
        kept = self._transcripts.get(key) if key is not None else None
        if kept is not None and prompt.startswith(kept[0]):
            self._transcripts.move_to_end(key)
            return kept[1] + list(self.tokenizer(prompt[len(kept[0]):], add_special_tokens=False)["input_ids"])
        # A chat template already holds the special tokens (BOS...); don't add them twice.
        return list(self.tokenizer(self.render(prompt), add_special_tokens=not self.use_chat)["input_ids"])

    def _remember(self, key: tuple | None, prompt: str, context: list[int], response_ids: list[int],
                  text: str) -> None:
        if key is None:
            return
        self._transcripts[key] = (prompt + text, context + response_transcript_ids(response_ids, self._eos,
                                                                                    final=False))
        self._transcripts.move_to_end(key)
        while len(self._transcripts) > self.MAX_TRANSCRIPTS:
            self._transcripts.popitem(last=False)

    def _generate(self, prompts: list[str], keys: list, seeds: list[int] | None) -> list[PolicyResponse]:
        torch, c = self._torch, self.config
        contexts = [self.context_ids(p, k) for p, k in zip(prompts, keys)]
        width = max(len(x) for x in contexts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, x in enumerate(contexts):  # left padding
            input_ids[i, width - len(x):] = torch.as_tensor(x, dtype=torch.long)
            attention[i, width - len(x):] = 1
        gen_kw = dict(max_new_tokens=c.max_new_tokens, pad_token_id=pad, eos_token_id=list(self._eos) or None)
        if not self.use_chat and self._non_text_ids:
            # raw text (the transcript form agentgym train trains in): special tokens other than EOS are never
            # generated, as in the training rollouts (agentgym.context.non_text_token_ids): decoded text drops them
            gen_kw["suppress_tokens"] = self._non_text_ids
        gen_kw.update(generate_kwargs(self._sampling, seeds, width))
        t0 = time.perf_counter()
        with torch.inference_mode():
            ids = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                                      **gen_kw)
        latency = time.perf_counter() - t0
        new = ids[:, width:].cpu().tolist()
        eos = set(self._eos)
        outs = []
        for prompt, key, context, tokens in zip(prompts, keys, contexts, new):
            n_gen = len(tokens)
            finish = "length"
            for j, t in enumerate(tokens):
                if t in eos or (t == pad and not eos):
                    n_gen, finish = j + 1, "stop"
                    break
            text = self.tokenizer.decode(tokens[:n_gen], skip_special_tokens=True)
            self._remember(key, prompt, context, tokens[:n_gen], text)
            outs.append(PolicyResponse(text, {
                "prompt_tokens": len(context), "completion_tokens": n_gen,
                "latency_s": round(latency, 6), "batch_size": len(prompts), "attempts": 1,
                "finish_reason": finish}))
        return outs
