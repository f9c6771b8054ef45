"""Model-side hooks shared by the trainer adapters (torch + transformers, imported lazily).

* :func:`hidden_fingerprints`: the actor's hidden state at one layer at chosen token positions (default: the last
  non-pad token of each row), L2-normalized -- BiPACE's ``actor_hidden`` embedder (bipace.txt Sec. 4, App. H).
* :func:`calibrate_fingerprint_layer`: the App. H layer scan (cluster count, singleton fraction and linear-probe
  accuracy per layer on cached observations) and its selection rule.
* :func:`answer_probability` / :func:`information_gain`: IGPO / A2TGPO's p_k = exp(mean_j log pi(a*_j | prefix
  through turn k, a*_<j)) and IG_k = p_k - p_{k-1} (spec 4.5), without gradients, in batches.
* :func:`teacher_student_scores`: SGCD's teacher (the policy with a credit-reference context) and student (the
  policy without it) scored on the same response tokens: teacher top-K log-probs, the student's log-probs at the
  teacher's top-K ids, both at the sampled token, entropies and tail masses (spec 1.2 SGCD columns, 4.8).

Token sequences are passed as lists of token-id lists (unpadded); the functions pad them themselves (right
padding, so positions index the unpadded sequence) and run the model under ``torch.no_grad()`` in eval mode,
restoring the training flag afterwards.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from agentgym.errors import MissingDependencyError

logger = logging.getLogger(__name__)

__all__ = [
    "hidden_fingerprints", "LayerScan", "FingerprintCalibration", "calibrate_fingerprint_layer", "linear_probe_accuracy",
    "answer_probability", "information_gain", "TeacherStudentScores", "teacher_student_scores",
]


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is in the trl extra
        raise MissingDependencyError("torch", "trl", "model-side hooks") from e
    return torch


@contextmanager
def _inference(model: Any) -> Iterator[None]:
    """no_grad + eval mode (dropout off), restoring the previous training flag."""
    torch = _torch()
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training:
            model.train()


def _device(model: Any):
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return _torch().device("cpu")


def _pad_right(seqs: Sequence[Sequence[int]], pad_id: int):
    torch = _torch()
    width = max((len(s) for s in seqs), default=0)
    ids = torch.full((len(seqs), max(width, 1)), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(seqs), max(width, 1)), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
            mask[i, :len(s)] = 1
    return ids, mask


def _pad_id(model: Any) -> int:
    cfg = getattr(model, "config", None)
    for name in ("pad_token_id", "eos_token_id"):
        v = getattr(cfg, name, None)
        if isinstance(v, (list, tuple)):
            v = v[0] if v else None
        if v is not None:
            return int(v)
    return 0


def _check_seqs(seqs: Sequence[Sequence[int]], what: str) -> list[list[int]]:
    out = [list(map(int, s)) for s in seqs]
    if any(len(s) == 0 for s in out):
        raise ValueError(f"{what}: every sequence needs at least one token")
    return out


# ----------------------------------------------------------------------------------------------- fingerprints
def hidden_fingerprints(model: Any, sequences: Sequence[Sequence[int]], *, layer: int = -1,
                        positions: Sequence[Sequence[int]] | None = None, batch_size: int = 8) -> np.ndarray:
    """Unit-norm hidden states of ``model`` (float32, ``[n, D]``).

    Args:
        sequences: token-id lists (unpadded).
        layer: index into the model's ``hidden_states`` tuple (0 = embeddings, 1..L = the blocks' outputs,
            negative counts from the end, so -1 is the last block). Out-of-range raises ``IndexError``.
        positions: per sequence, the token positions to read (e.g. the last context token before each turn's
            action); default: the last token of each sequence. The result stacks them row-major, so row ``r``
            of the output is ``positions[i][j]`` in order.
        batch_size: sequences per forward pass.
    """
    torch = _torch()
    seqs = _check_seqs(sequences, "hidden_fingerprints")
    pos = [[len(s) - 1] for s in seqs] if positions is None else [list(map(int, p)) for p in positions]
    if len(pos) != len(seqs):
        raise ValueError(f"positions has {len(pos)} entries for {len(seqs)} sequences")
    for s, p in zip(seqs, pos):
        if any(q < 0 or q >= len(s) for q in p):
            raise IndexError(f"position out of range for a sequence of length {len(s)}: {p}")
    dev = _device(model)
    out: list[np.ndarray] = []
    with _inference(model):
        for start in range(0, len(seqs), batch_size):
            chunk = seqs[start:start + batch_size]
            ids, mask = _pad_right(chunk, _pad_id(model))
            res = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), output_hidden_states=True,
                        use_cache=False)
            hs = res.hidden_states
            n_hs = len(hs)
            if not -n_hs <= layer < n_hs:
                raise IndexError(f"layer {layer} out of range: the model returns {n_hs} hidden states")
            h = hs[layer]
            for i, p in enumerate(pos[start:start + len(chunk)]):
                if p:
                    out.append(h[i, p].float().cpu().numpy())
    if not out:
        return np.zeros((0, 0), dtype=np.float32)
    x = np.concatenate(out, axis=0).astype(np.float64)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    # a zero hidden state cannot be normalized; keep a deterministic unit vector instead of NaN
    zero = norm[:, 0] <= 0
    x = np.where(zero[:, None], 0.0, x / np.where(norm > 0, norm, 1.0))
    if zero.any():
        x[zero, 0] = 1.0
    return x.astype(np.float32)


def linear_probe_accuracy(x: np.ndarray, labels: Sequence[Any], *, folds: int = 2, ridge: float = 1e-2,
                          seed: int = 0) -> float:
    """Cross-validated accuracy of a ridge-regression one-vs-rest linear probe predicting ``labels`` from ``x``
    (closed form, numpy). Labels seen in only one fold can still be predicted wrongly: that is the point."""
    x = np.asarray(x, dtype=np.float64)
    _, y = np.unique(np.asarray(labels).astype(str), return_inverse=True)
    n = x.shape[0]
    if n < 2 or folds < 2:
        raise ValueError("a probe needs at least 2 samples and 2 folds")
    rng = np.random.default_rng(seed)
    fold = rng.permutation(n) % folds
    xb = np.concatenate([x, np.ones((n, 1))], axis=1)
    onehot = np.eye(int(y.max()) + 1)[y]
    correct = 0
    for f in range(folds):
        tr, te = fold != f, fold == f
        if not te.any() or not tr.any():
            continue
        a = xb[tr]
        w = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ onehot[tr])
        correct += int((np.argmax(xb[te] @ w, axis=1) == y[te]).sum())
    return correct / n


@dataclass
class LayerScan:
    layer: int
    n_clusters: int
    singleton_fraction: float  # fraction of clusters of size 1
    probe_accuracy: float
    median_cluster_size: float


@dataclass
class FingerprintCalibration:
    """The App. H scan: one :class:`LayerScan` per layer and the chosen ``layer`` (None when none qualifies)."""

    scans: list[LayerScan]
    layer: int | None
    eps: float
    reason: str = ""
    eps_calibration: Any = None
    extra: dict = field(default_factory=dict)


def calibrate_fingerprint_layer(model: Any, sequences: Sequence[Sequence[int]], labels: Sequence[Any], *,
                                layers: Sequence[int] | None = None, eps: float = 0.05, min_clusters: int = 5,
                                max_singleton_fraction: float = 0.9, batch_size: int = 8,
                                probe_folds: int = 2) -> FingerprintCalibration:
    """bipace.txt App. H: scan ``layers`` (default: every block, as negative indices) over cached observation
    prompts ``sequences`` (last-token pool), cluster them with Algorithm 1 at ``eps`` and probe ``labels``
    (task ids or task families). Pick the layer with the best probe accuracy among the non-degenerate ones:
    ``n_clusters >= min_clusters``, more than one cluster, and a singleton fraction below
    ``max_singleton_fraction`` (neither one giant cluster nor all singletons). One forward pass per batch gives
    every layer at once.
    """
    from estimators import greedy_cosine_clusters

    torch = _torch()
    seqs = _check_seqs(sequences, "calibrate_fingerprint_layer")
    if len(labels) != len(seqs):
        raise ValueError(f"{len(labels)} labels for {len(seqs)} sequences")
    dev = _device(model)
    per_layer: dict[int, list[np.ndarray]] = {}
    with _inference(model):
        for start in range(0, len(seqs), batch_size):
            chunk = seqs[start:start + batch_size]
            ids, mask = _pad_right(chunk, _pad_id(model))
            hs = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), output_hidden_states=True,
                       use_cache=False).hidden_states
            n_hs = len(hs)
            want = list(layers) if layers is not None else list(range(-(n_hs - 1), 0))
            last = torch.as_tensor([len(s) - 1 for s in chunk])
            for layer in want:
                h = hs[layer][torch.arange(len(chunk)), last].float().cpu().numpy()
                per_layer.setdefault(int(layer), []).append(h)
    scans = []
    for layer, parts in per_layer.items():
        x = np.concatenate(parts).astype(np.float64)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        lab = greedy_cosine_clusters(x, eps)
        sizes = np.bincount(lab)
        scans.append(LayerScan(layer=layer, n_clusters=int(sizes.size),
                               singleton_fraction=float(np.mean(sizes == 1)),
                               probe_accuracy=float(linear_probe_accuracy(x, labels, folds=probe_folds)),
                               median_cluster_size=float(np.median(sizes))))
    ok = [s for s in scans if s.n_clusters >= max(min_clusters, 2) and s.singleton_fraction < max_singleton_fraction]
    if not ok:
        return FingerprintCalibration(scans, None, eps, reason="no layer is non-degenerate at this eps")
    best = max(ok, key=lambda s: (s.probe_accuracy, s.n_clusters, -abs(s.layer)))
    return FingerprintCalibration(scans, best.layer, eps, reason="best probe accuracy among non-degenerate layers")


# ---------------------------------------------------------------------------------------- information gain
def answer_probability(model: Any, contexts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], *,
                       batch_size: int = 8) -> np.ndarray:
    """exp(mean_j log pi(target_j | context, target_<j)) per (context, target) pair (float64, no gradients)."""
    torch = _torch()
    ctx = _check_seqs(contexts, "answer_probability contexts")
    tgt = _check_seqs(targets, "answer_probability targets")
    if len(ctx) != len(tgt):
        raise ValueError(f"{len(ctx)} contexts for {len(tgt)} targets")
    dev = _device(model)
    out = np.zeros(len(ctx), dtype=np.float64)
    with _inference(model):
        for start in range(0, len(ctx), batch_size):
            seqs = [c + t for c, t in zip(ctx[start:start + batch_size], tgt[start:start + batch_size])]
            ids, mask = _pad_right(seqs, _pad_id(model))
            logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), use_cache=False).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            for i, (c, t) in enumerate(zip(ctx[start:start + batch_size], tgt[start:start + batch_size])):
                # token at position p is predicted by the logits at p - 1
                pos = torch.arange(len(c) - 1, len(c) + len(t) - 1, device=logp.device)
                lp = logp[i, pos, torch.as_tensor(t, device=logp.device)]
                out[start + i] = float(torch.exp(lp.double().mean()))
    return out


def information_gain(model: Any, turn_contexts: Sequence[Sequence[Sequence[int]]],
                     answers: Sequence[Sequence[Sequence[int]]], *, final_turns: Sequence[Sequence[bool]] | None = None,
                     batch_size: int = 8) -> list[np.ndarray]:
    """Per trajectory, IG_k = p_k - p_{k-1} for each turn k = 1..n (spec 4.5; IGPO / A2TGPO).

    Args:
        turn_contexts: per trajectory, ``n + 1`` token lists: ``[ctx_0, ctx_1, ..., ctx_n]`` where ``ctx_0`` is
            the query (prompt) alone and ``ctx_k`` the prefix through turn k (action and observation), each ending
            where the answer would be written (append the answer-opening text, e.g. ``<answer>``, yourself).
        answers: per trajectory, one or more gold answers as token lists (the answer body and closing text); p_k
            is the maximum over them.
        final_turns: per trajectory and turn, True where the turn is the final answer (its IG is NaN and its
            p_k is not computed). Default: the last turn of each trajectory.
    Returns one float64 array of length n per trajectory (NaN on final turns).
    """
    jobs: list[tuple[list[int], list[int]]] = []
    index: list[tuple[int, int, int]] = []
    for i, (ctxs, golds) in enumerate(zip(turn_contexts, answers)):
        n = len(ctxs) - 1
        if n < 1:
            raise ValueError(f"trajectory {i}: turn_contexts needs ctx_0 plus one context per turn")
        if not golds:
            raise ValueError(f"trajectory {i}: no gold answer")
        fin = list(final_turns[i]) if final_turns is not None else [k == n - 1 for k in range(n)]
        if len(fin) != n:
            raise ValueError(f"trajectory {i}: final_turns has {len(fin)} entries for {n} turns")
        for k in range(n + 1):
            # p_k is needed for ctx_k when turn k (1-based) is a process turn, or turn k+1 is one
            need = (k >= 1 and not fin[k - 1]) or (k < n and not fin[k])
            if need:
                for g, ans in enumerate(golds):
                    jobs.append((list(ctxs[k]), list(ans)))
                    index.append((i, k, g))
    probs = answer_probability(model, [j[0] for j in jobs], [j[1] for j in jobs], batch_size=batch_size) \
        if jobs else np.zeros(0)
    p: dict[tuple[int, int], float] = {}
    for (i, k, _g), v in zip(index, probs):
        p[(i, k)] = max(p.get((i, k), -np.inf), float(v))
    out = []
    for i, ctxs in enumerate(turn_contexts):
        n = len(ctxs) - 1
        fin = list(final_turns[i]) if final_turns is not None else [k == n - 1 for k in range(n)]
        ig = np.full(n, np.nan)
        for k in range(1, n + 1):
            if not fin[k - 1]:
                ig[k - 1] = p[(i, k)] - p[(i, k - 1)]
        out.append(ig)
    return out


# ------------------------------------------------------------------------------------ SGCD teacher/student
@dataclass
class TeacherStudentScores:
    """SGCD arrays over the response tokens, right-padded to ``[B, L]`` / ``[B, L, K]`` (L = longest response).

    ``teacher_topk_logprob`` / ``teacher_topk_ids``: the teacher's top-K; ``student_logprob_on_teacher_topk``:
    the student at those ids; ``teacher_logprob_obs`` / ``student_logprob_obs``: both at the sampled token;
    ``obs_in_topk``: the sampled token is among the teacher's top-K; ``teacher_tail`` / ``student_tail``: the
    mass outside top-K and the sampled token (the tail bucket, floored at 1e-12); entropies of the full
    distributions. Padding positions hold 0 (and ``valid`` is False there).
    """

    teacher_topk_logprob: np.ndarray
    teacher_topk_ids: np.ndarray
    student_logprob_on_teacher_topk: np.ndarray
    teacher_logprob_obs: np.ndarray
    student_logprob_obs: np.ndarray
    obs_in_topk: np.ndarray
    teacher_tail: np.ndarray
    student_tail: np.ndarray
    teacher_entropy: np.ndarray
    student_entropy: np.ndarray
    valid: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        """The :class:`estimators.TrajectoryBatch` SGCD columns."""
        return dict(teacher_topk_logprob=self.teacher_topk_logprob,
                    student_logprob_on_teacher_topk=self.student_logprob_on_teacher_topk,
                    teacher_logprob_obs=self.teacher_logprob_obs, student_logprob_obs=self.student_logprob_obs,
                    obs_in_topk=self.obs_in_topk)


def _response_logprobs(model, prompts: list[list[int]], responses: list[list[int]], batch_size: int):
    """Per row: full log-softmax over the vocabulary at each response position ``[len(resp), V]`` (float32)."""
    torch = _torch()
    dev = _device(model)
    out = []
    for start in range(0, len(prompts), batch_size):
        seqs = [p + r for p, r in zip(prompts[start:start + batch_size], responses[start:start + batch_size])]
        ids, mask = _pad_right(seqs, _pad_id(model))
        logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), use_cache=False).logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        for i, (p, r) in enumerate(zip(prompts[start:start + batch_size], responses[start:start + batch_size])):
            out.append(logp[i, len(p) - 1:len(p) + len(r) - 1])
    return out


def teacher_student_scores(model: Any, student_prompts: Sequence[Sequence[int]],
                           teacher_prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *,
                           top_k: int = 100, batch_size: int = 8) -> TeacherStudentScores:
    """Score ``responses`` under the policy twice: as the student (after ``student_prompts``) and as the teacher
    (after ``teacher_prompts``, the same prompt with the credit reference added). K is capped at the vocabulary
    size. No gradients."""
    torch = _torch()
    sp = _check_seqs(student_prompts, "teacher_student_scores student_prompts")
    tp = _check_seqs(teacher_prompts, "teacher_student_scores teacher_prompts")
    rs = [list(map(int, r)) for r in responses]
    if not len(sp) == len(tp) == len(rs):
        raise ValueError("student_prompts, teacher_prompts and responses must have the same length")
    if top_k < 1:
        raise ValueError("top_k must be >= 1")
    B = len(rs)
    L = max((len(r) for r in rs), default=0)
    with _inference(model):
        s_lp = _response_logprobs(model, sp, rs, batch_size)
        t_lp = _response_logprobs(model, tp, rs, batch_size)
    V = s_lp[0].shape[-1] if s_lp else 1
    K = min(int(top_k), int(V))
    f32 = np.float32
    arr = {name: np.zeros((B, L, K), dtype=f32) for name in ("tk", "sk")}
    ids_out = np.zeros((B, L, K), dtype=np.int64)
    flat = {name: np.zeros((B, L), dtype=f32) for name in ("to", "so", "tt", "st", "th", "sh")}
    in_topk = np.zeros((B, L), dtype=bool)
    valid = np.zeros((B, L), dtype=bool)
    for i, r in enumerate(rs):
        n = len(r)
        if n == 0:
            continue
        tl, sl = t_lp[i], s_lp[i]
        tv, ti = torch.topk(tl, K, dim=-1)
        sv = torch.gather(sl, -1, ti)
        y = torch.as_tensor(r, device=tl.device).unsqueeze(-1)
        to = torch.gather(tl, -1, y).squeeze(-1)
        so = torch.gather(sl, -1, y).squeeze(-1)
        inside = (ti == y).any(-1)
        t_mass = tv.exp().sum(-1) + torch.where(inside, torch.zeros_like(to), to.exp())
        s_mass = sv.exp().sum(-1) + torch.where(inside, torch.zeros_like(so), so.exp())
        arr["tk"][i, :n] = tv.cpu().numpy()
        arr["sk"][i, :n] = sv.cpu().numpy()
        ids_out[i, :n] = ti.cpu().numpy()
        flat["to"][i, :n] = to.cpu().numpy()
        flat["so"][i, :n] = so.cpu().numpy()
        flat["tt"][i, :n] = torch.clamp(1.0 - t_mass, min=1e-12).cpu().numpy()
        flat["st"][i, :n] = torch.clamp(1.0 - s_mass, min=1e-12).cpu().numpy()
        flat["th"][i, :n] = (-(tl.exp() * tl).sum(-1)).cpu().numpy()
        flat["sh"][i, :n] = (-(sl.exp() * sl).sum(-1)).cpu().numpy()
        in_topk[i, :n] = inside.cpu().numpy()
        valid[i, :n] = True
    return TeacherStudentScores(
        teacher_topk_logprob=arr["tk"], teacher_topk_ids=ids_out, student_logprob_on_teacher_topk=arr["sk"],
        teacher_logprob_obs=flat["to"], student_logprob_obs=flat["so"], obs_in_topk=in_topk,
        teacher_tail=flat["tt"], student_tail=flat["st"], teacher_entropy=flat["th"], student_entropy=flat["sh"],
        valid=valid)
