"""A tiny randomly initialized causal LM and a word-level tokenizer built from an env's own text, for CPU smoke
runs, tests and the learning lab (no downloads): ``agentgym train --model <dir>`` and ``agentgym eval --policy
hf:<dir>`` accept the directory :func:`save_tiny_model` writes. Also :func:`oracle_warmup`, a few behaviour-cloning
steps on the env's oracle responses so that a random model's rollouts are not all invalid (then rewards differ
inside a group and advantages are non-zero).

The model is a Llama (``LlamaForCausalLM``): transformers 5.x loads the saved tokenizer of a Llama directory as it
was saved (``TokenizersBackend``), while for some architectures (``qwen2`` among them) ``AutoTokenizer`` forces the
architecture's own tokenizer class and ignores the saved one, which mangles every text. The tokenizer is word level
with the spaces kept inside the pieces (``" craft"``, ``","``, ``"\\n"``): decoding gives back exactly the text
that was encoded (for text made of its vocabulary), so the env parses the decoded actions as written, and the
tokens of a text are the tokens of its parts one after another (training and evaluation tokenize the same context
alike).

For chat templates and tool calling (TRL's ``environment_factory``), :func:`build_chat_tokenizer` trains a small
byte-level BPE on given texts (it decodes back to the exact text, which JSON tool calls need), adds Qwen's special
tokens and loads one of the chat templates TRL ships and recognises (:func:`trl_chat_template`, e.g. ``qwen3``).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Sequence

logger = logging.getLogger(__name__)

__all__ = ["TAG_TOKENS", "PIECE_PATTERN", "env_vocabulary", "build_tokenizer", "build_char_tokenizer", "build_tiny_model",
           "save_tiny_model", "oracle_warmup",
           "trl_chat_template", "build_chat_tokenizer", "QWEN_SPECIAL_TOKENS", "QWEN_ADDED_TOKENS"]

TAG_TOKENS = ("<action>", "</action>", "<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>",
              "<information>", "</information>")
_SPECIAL = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
#: One tokenizer piece: a word or one punctuation character with at most one space before it, or a whitespace run.
PIECE_PATTERN = r" ?\w+| ?[^\w\s]|\s+"
_PIECE = re.compile(PIECE_PATTERN)
_WHITESPACE = (" ", "  ", "   ", "\n", "\n\n", " \n", "\n ", "\t")


def _episode_texts(env_id: str, n_tasks: int, env_kwargs: dict | None, max_steps: int = 16,
                   task_ids: Sequence[str] | None = None) -> list[str]:
    import agentgym

    env = agentgym.make(env_id, **dict(env_kwargs or {}))
    if task_ids is not None:
        ids = [str(t) for t in task_ids]
    else:
        ids = env.task_ids(n_tasks)  # the env contract: the first n ids, generated splits included
    import numpy as np

    texts = []
    rng = np.random.default_rng(0)
    for k, tid in enumerate(ids):
        # the env's answers to a malformed response, an unknown command and a random one (their words too)
        env.reset(seed=k, options={"task_id": tid})
        for probe in ("no action", "<action>look around</action>", _random_action(env, rng)):
            if probe is not None:
                texts += [probe, env.step(probe)[0]]
        env.reset(seed=k, options={"task_id": tid})
        texts.append(env.prompt())
        for _ in range(max_steps):
            a = env.oracle_action()
            texts.append(a)
            obs, _r, term, trunc, _i = env.step(a)
            texts.append(obs)
            texts.append(env.prompt())
            if term or trunc:
                break
    return texts


def _random_action(env, rng) -> str | None:
    try:
        return env.random_action(rng)
    except NotImplementedError:
        return None


def env_vocabulary(env_id: str, n_tasks: int = 8, *, env_kwargs: dict | None = None, max_words: int = 4000,
                   task_ids: Sequence[str] | None = None) -> list[str]:
    """The most frequent pieces (:data:`PIECE_PATTERN`: words and punctuation, a space before them kept) of
    ``n_tasks`` oracle episodes of ``env_id`` (or of the episodes of ``task_ids``): prompts, actions, observations,
    and the env's answers to a malformed, an unknown and a random action; most frequent first."""
    from collections import Counter

    counts: Counter = Counter()
    for t in _episode_texts(env_id, n_tasks, env_kwargs, task_ids=task_ids):
        for tag in TAG_TOKENS:
            t = t.replace(tag, "\n")
        counts.update(_PIECE.findall(t))
    return [w for w, _ in counts.most_common(max_words)]


def build_tokenizer(words: Sequence[str]):
    """A ``PreTrainedTokenizerFast``: word level over :data:`PIECE_PATTERN` pieces (each word of ``words`` with and
    without a space before it, common whitespace runs), the ``TAG_TOKENS`` kept whole, ``[PAD] [UNK] [BOS] [EOS]``,
    left padding. Decoding joins the pieces as they are, so text made of the vocabulary decodes to itself."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    pieces: list[str] = []
    for w in words:
        bare = w[1:] if w.startswith(" ") and len(w) > 1 and not w[1:].isspace() else w
        pieces += [w] if bare.isspace() else [bare, " " + bare]
    for w in (*_SPECIAL, *TAG_TOKENS, *_WHITESPACE, *pieces):
        if w not in vocab:
            vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated")
    tk.decoder = decoders.Fuse()  # the pieces carry their own spaces
    tk.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAG_TOKENS])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]",
                                  eos_token="[EOS]", padding_side="left")
    return tok


#: The characters of :func:`build_char_tokenizer`: printable ASCII, newline and tab.
CHARACTERS = tuple(chr(c) for c in range(32, 127)) + ("\n", "\t")


def build_char_tokenizer(characters: Sequence[str] = CHARACTERS):
    """A ``PreTrainedTokenizerFast`` with one token per character (default: printable ASCII, newline, tab), the
    ``TAG_TOKENS`` kept whole, ``[PAD] [UNK] [BOS] [EOS]``, left padding. Every text made of these characters is
    representable, a name the model never saw included (a word-level vocabulary gives such a name an untrained
    embedding, or none); decoding joins the characters, so such text decodes to itself."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for w in (*_SPECIAL, *TAG_TOKENS, *characters):
        if w not in vocab:
            vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tk.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]",
                                   eos_token="[EOS]", padding_side="left")


def build_tiny_model(tokenizer: Any, *, hidden_size: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                     seed: int = 0, max_positions: int = 4096):
    """A randomly initialized ``LlamaForCausalLM`` sized for ``tokenizer`` (float32; see the module docstring for
    why Llama)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      tie_word_embeddings=True, max_position_embeddings=max_positions,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                      bos_token_id=tokenizer.bos_token_id)
    gen = torch.random.fork_rng()  # local seed: do not disturb the caller's global RNG
    with gen:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def save_tiny_model(out_dir: str, env_id: str = "TextCraft-v0", *, n_tasks: int = 64, env_kwargs: dict | None = None,
                    seed: int = 0, **model_kwargs: Any) -> str:
    """Write a tiny model + tokenizer for ``env_id`` to ``out_dir`` (``from_pretrained``-loadable, the tokenizer
    through ``AutoTokenizer`` too); the vocabulary comes from ``n_tasks`` oracle episodes of the split."""
    tok = build_tokenizer(env_vocabulary(env_id, n_tasks, env_kwargs=env_kwargs))
    model = build_tiny_model(tok, seed=seed, **model_kwargs)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def oracle_warmup(model: Any, tokenizer: Any, env_id: str, *, n_tasks: int = 4, steps: int = 30, lr: float = 3e-3,
                  env_kwargs: dict | None = None, max_prompt_tokens: int = 256, seed: int = 0,
                  invalid_response: str | None = None, valid_response: str | None = None) -> float:
    """Behaviour cloning on the env's first oracle response per task (prompt -> ``oracle_action() + EOS``),
    ``steps`` full-batch Adam steps; returns the final loss. Only the response tokens are trained on.

    ``invalid_response`` (e.g. ``"no action"``, which no env accepts) is a seeded scripted mix: each prompt is
    trained on that response as often as on the oracle's, so the model's likeliest first responses are a valid and
    an invalid action in about equal measure, whatever the CPU's arithmetic. Sampled episodes of one task then
    differ in their invalid-action penalties (a group with reward spread, non-zero advantages): the premise a
    training test needs, guaranteed by the data rather than by a lucky draw. ``valid_response``: one response every
    task accepts (e.g. TextCraft's ``<action>inventory</action>``), trained instead of each task's oracle action. Use
    it where the prompts cannot tell the tasks apart (``max_prompt_tokens`` keeps only their common tail): the model
    then blends the oracle actions of different tasks into invalid ones, and the valid half of the mix is lost."""
    import torch

    import agentgym

    env = agentgym.make(env_id, **dict(env_kwargs or {}))
    ids = env.task_ids(n_tasks)  # the env contract: the first n ids, generated splits included
    pairs = []
    for k, tid in enumerate(ids):
        env.reset(seed=seed + k, options={"task_id": tid})
        p = tokenizer(env.prompt(), add_special_tokens=False)["input_ids"][-max_prompt_tokens:]
        valid = valid_response if valid_response is not None else env.oracle_action()
        for response in [valid] + ([invalid_response] if invalid_response is not None else []):
            a = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            pairs.append((p, a))
    width = max(len(p) + len(a) for p, a in pairs)
    inp = torch.full((len(pairs), width), tokenizer.pad_token_id, dtype=torch.long)
    att = torch.zeros_like(inp)
    lab = torch.full_like(inp, -100)
    for i, (p, a) in enumerate(pairs):
        seq = p + a
        # right padding: positions then match generation's (which derives them from the attention mask)
        inp[i, :len(seq)] = torch.as_tensor(seq)
        att[i, :len(seq)] = 1
        lab[i, len(p):len(seq)] = torch.as_tensor(a)
    was = model.training
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        opt.zero_grad()
        loss = model(input_ids=inp, attention_mask=att, labels=lab).loss
        loss.backward()
        opt.step()
    model.train(was)
    return float(loss.detach())


#: Qwen's control tokens (special: skipped when decoding with ``skip_special_tokens``) and its tool / reasoning
#: markers (added whole, but ordinary text), as in Qwen3's tokenizer.
QWEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_ADDED_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")


def trl_chat_template(name: str = "qwen3") -> str:
    """The text of a chat template TRL ships (``trl/chat_templates/<name>.jinja``). TRL 1.16 recognises a tokenizer
    by its exact template text (tool-call parsing, training templates), so a local tiny tokenizer must carry one of
    these verbatim."""
    from importlib import resources

    return resources.files("trl").joinpath("chat_templates", f"{name}.jinja").read_text(encoding="utf-8")


def build_chat_tokenizer(texts: Sequence[str], *, conversations: Sequence[tuple[list, list | None]] = (),
                         vocab_size: int = 4096, template: str = "qwen3"):
    """A ``PreTrainedTokenizerFast`` for chat: a byte-level BPE trained on ``texts`` (exact round trip of any
    text), Qwen's special and added tokens (:data:`QWEN_SPECIAL_TOKENS`, :data:`QWEN_ADDED_TOKENS`; EOS
    ``<|im_end|>``, padding ``<|endoftext|>`` on the left) and TRL's ``template`` chat template. Merges may span
    spaces, so text like the training texts packs into few tokens (short sequences keep CPU tests cheap).
    ``conversations`` (``(messages, tools)`` pairs) are rendered with the template and added to the training text,
    so the template's own markup (role headers, tool boilerplate) gets merges too."""
    rendered = []
    if conversations:
        renderer = _train_chat_tokenizer([""], 300, template)  # rendering text needs the template, not a vocabulary
        rendered = [renderer.apply_chat_template(m, tools=t or None, tokenize=False) for m, t in conversations]
    return _train_chat_tokenizer(list(texts) + rendered, vocab_size, template)


def _train_chat_tokenizer(texts: list[str], vocab_size: int, template: str):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    # no word split: merges may span spaces, so the repetitive env text packs into few tokens
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(QWEN_SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(list(texts), trainer=trainer)
    tk.add_tokens([AddedToken(t, normalized=False, special=False) for t in QWEN_ADDED_TOKENS])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  padding_side="left")
    tok.chat_template = trl_chat_template(template)
    return tok
