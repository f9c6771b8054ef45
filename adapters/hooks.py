"""Model-side hooks shared by the trainer adapters (torch + transformers, imported lazily).

* :func:`hidden_fingerprints`: the actor's hidden state at one layer at chosen token positions (default: the last
  non-pad token of each row), L2-normalized -- BiPACE's ``actor_hidden`` embedder (the BiPACE paper, Sec. 4, App. H).
* :func:`calibrate_fingerprint_layer`: the App. H scan over layers and eps in {0.05, 0.10, 0.15, 0.20} (cluster
  count, singleton fraction, median cluster size and linear-probe accuracy on cached observations), its layer
  selection rule, and App. F's median-cluster-size rule for eps.
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
    "EPS_GRID",
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
    return _unit_rows(np.concatenate(out, axis=0).astype(np.float64)).astype(np.float32)


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` (float64) scaled to unit L2 norm. A zero hidden state cannot be normalized: it becomes the
    first basis vector, a deterministic unit vector, instead of NaN (or a zero row the clustering rejects)."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    zero = norm[:, 0] <= 0
    x = np.where(zero[:, None], 0.0, x / np.where(norm > 0, norm, 1.0))
    if zero.any():
        x[zero, 0] = 1.0
    return x


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


#: App. H's threshold grid.
EPS_GRID = (0.05, 0.10, 0.15, 0.20)


@dataclass
class LayerScan:
    """One (layer, eps) cell of the App. H scan. ``singleton_fraction``: the fraction of observations alone in
    their cluster (the estimators' ``singleton_record_frac``); ``probe_accuracy`` depends on the layer only."""

    layer: int
    eps: float
    n_clusters: int
    singleton_fraction: float
    probe_accuracy: float
    median_cluster_size: float


@dataclass
class FingerprintCalibration:
    """The App. H result: ``scans`` (one :class:`LayerScan` per layer and eps of the grid), the chosen ``layer``
    and ``eps`` (None when no layer qualifies), ``eps_calibration`` (the App. F search that set ``eps``:
    :class:`estimators.bipace.CalibrationResult`) and ``reason``."""

    scans: list[LayerScan]
    layer: int | None
    eps: float | None
    reason: str = ""
    eps_calibration: Any = None
    extra: dict = field(default_factory=dict)

    def table(self) -> str:
        """The scan as a text table (layer, eps, clusters, singleton fraction, median size, probe accuracy)."""
        lines = ["layer    eps  clusters  singleton  median  probe"]
        for c in self.scans:
            mark = "  <- layer" if c.layer == self.layer else ""
            lines.append(f"{c.layer:5d}  {c.eps:5.2f}  {c.n_clusters:8d}  {c.singleton_fraction:9.3f}  "
                         f"{c.median_cluster_size:6.1f}  {c.probe_accuracy:5.3f}{mark}")
        return "\n".join(lines)


def _layer_states(model: Any, seqs: list[list[int]], layers: Sequence[int] | None,
                  batch_size: int) -> dict[int, np.ndarray]:
    """Last-token hidden states of every requested layer (all blocks by default), unit-normalized, float64."""
    torch = _torch()
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
                if not -n_hs <= int(layer) < n_hs:
                    raise IndexError(f"layer {layer} out of range: the model returns {n_hs} hidden states")
                h = hs[layer][torch.arange(len(chunk)), last].float().cpu().numpy()
                per_layer.setdefault(int(layer), []).append(h)
    out = {}
    for layer, parts in per_layer.items():
        out[layer] = _unit_rows(np.concatenate(parts).astype(np.float64))  # as hidden_fingerprints does
    return out


def _audit_batch(groups: Sequence[Any]):
    """The cached observations as a TrajectoryBatch of one-turn trajectories (clustered per group, as in training)."""
    from estimators import TrajectoryBatch

    n = len(groups)
    _, gid = np.unique(np.asarray([str(g) for g in groups], dtype=object), return_inverse=True)
    return TrajectoryBatch(group_id=gid.astype(np.int64), traj_id=np.arange(n), turn_idx=np.zeros(n, np.int32),
                           reward=np.zeros(n, np.float32), done=np.ones(n, bool))


def calibrate_fingerprint_layer(model: Any, sequences: Sequence[Sequence[int]], labels: Sequence[Any], *,
                                layers: Sequence[int] | None = None, eps_grid: Sequence[float] = EPS_GRID,
                                groups: Sequence[Any] | None = None, min_clusters: int = 5,
                                max_singleton_fraction: float = 0.9, eps_range: tuple[float, float] = (0.02, 0.40),
                                target: tuple[float, float] = (4.0, 8.0), max_probes: int = 6, batch_size: int = 8,
                                probe_folds: int = 2) -> FingerprintCalibration:
    """The BiPACE paper's App. H, then App. F.

    1. Scan: the last-token hidden state of every layer in ``layers`` (default: every block, negative indices) for
       the cached observation prompts ``sequences``; per layer, the cross-validated linear-probe accuracy of
       ``labels`` (task ids or task families); per (layer, eps) of ``eps_grid`` (App. H: 0.05, 0.10, 0.15, 0.20),
       Algorithm 1 clusters within each of ``groups`` (default: one pool) with their count, singleton fraction and
       median size.
    2. Layer: the best probe accuracy among the layers that are non-degenerate at some eps of the grid:
       ``n_clusters >= min_clusters`` (App. H: 5, to resolve ALFWorld's six families) and a singleton fraction
       below ``max_singleton_fraction`` (neither one giant cluster nor all singletons). Ties: more clusters, then
       the earlier entry of ``layers``.
    3. eps: App. F's median-cluster-size rule on that layer (:func:`estimators.calibrate_eps`: a binary search in
       ``eps_range`` for a median cluster size inside ``target`` = [4, 8], at most ``max_probes`` probes).

    One forward pass per batch gives every layer at once. Only the last-token pooling (App. H's most robust one)
    is implemented.
    """
    from estimators import calibrate_eps, greedy_cosine_clusters

    seqs = _check_seqs(sequences, "calibrate_fingerprint_layer")
    if len(labels) != len(seqs):
        raise ValueError(f"{len(labels)} labels for {len(seqs)} sequences")
    if groups is not None and len(groups) != len(seqs):
        raise ValueError(f"{len(groups)} groups for {len(seqs)} sequences")
    grid = sorted(float(e) for e in eps_grid)
    if not grid or any(not 0 <= e <= 2 for e in grid):
        raise ValueError(f"eps_grid must hold cosine distances in [0, 2], got {list(eps_grid)}")
    group_of = np.asarray([str(g) for g in (groups if groups is not None else [""] * len(seqs))], dtype=object)
    states = _layer_states(model, seqs, layers, batch_size)
    scans: list[LayerScan] = []
    probe_of: dict[int, float] = {}
    for layer, x in states.items():
        probe = probe_of[layer] = float(linear_probe_accuracy(x, labels, folds=probe_folds))
        for eps in grid:
            sizes_all: list[np.ndarray] = []
            singles = 0
            for g in dict.fromkeys(group_of.tolist()):
                sizes = np.bincount(greedy_cosine_clusters(x[group_of == g], eps))
                sizes_all.append(sizes)
                singles += int((sizes == 1).sum())
            sizes = np.concatenate(sizes_all)
            scans.append(LayerScan(layer=layer, eps=eps, n_clusters=int(sizes.size),
                                   singleton_fraction=singles / len(seqs), probe_accuracy=probe,
                                   median_cluster_size=float(np.median(sizes))))

    def ok(c: LayerScan) -> bool:
        return c.n_clusters >= max(min_clusters, 2) and c.singleton_fraction < max_singleton_fraction

    eligible = {c.layer for c in scans if ok(c)}
    if not eligible:
        return FingerprintCalibration(scans, None, None, reason=f"no layer is non-degenerate at any eps of {grid}")
    order = {layer: i for i, layer in enumerate(states)}
    best = max(eligible, key=lambda layer: (probe_of[layer],
                                            max(c.n_clusters for c in scans if c.layer == layer and ok(c)),
                                            -order[layer]))
    cal = calibrate_eps(_audit_batch(group_of.tolist()), states[best], lo=eps_range[0], hi=eps_range[1],
                        target=target, max_probes=max_probes)
    why = (f"layer {best}: best probe accuracy among the layers non-degenerate at some eps of {grid}; eps "
           f"{cal.eps:.4f} by the median-cluster-size rule ({'inside' if cal.inside_target else 'closest to'} "
           f"{list(target)} after {len(cal.probes)} probes)")
    return FingerprintCalibration(scans, best, float(cal.eps), reason=why, eps_calibration=cal)


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
            logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), use_cache=False).logits
            for i, (c, t) in enumerate(zip(ctx[start:start + batch_size], tgt[start:start + batch_size])):
                # token at position p is predicted by the logits at p - 1; only those len(t) rows are normalized
                # (logsumexp), never a float32 log-softmax over the whole [b, S, V] block
                rows = logits[i, len(c) - 1:len(c) + len(t) - 1].float()
                at = torch.gather(rows, -1, torch.as_tensor(t, device=rows.device).unsqueeze(-1)).squeeze(-1)
                lp = at - torch.logsumexp(rows, dim=-1)
                out[start + i] = float(torch.exp(lp.double().mean()))
            del logits
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


def _response_rows(model, prompts: list[list[int]], responses: list[list[int]], batch_size: int):
    """Yields ``(row, logp)``: the float32 log-softmax over the vocabulary at each of the row's response positions
    (``[len(response), V]``). One micro-batch's logits are alive at a time and only a row's response positions are
    normalized; the caller reduces each row to O(K) numbers per position before asking for the next one."""
    torch = _torch()
    dev = _device(model)
    for start in range(0, len(prompts), batch_size):
        ps, rs = prompts[start:start + batch_size], responses[start:start + batch_size]
        ids, mask = _pad_right([p + r for p, r in zip(ps, rs)], _pad_id(model))
        logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), use_cache=False).logits
        for i, (p, r) in enumerate(zip(ps, rs)):
            yield start + i, torch.log_softmax(logits[i, len(p) - 1:len(p) + len(r) - 1].float(), dim=-1)
        del logits


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
    f32 = np.float32
    flat = {name: np.zeros((B, L), dtype=f32) for name in ("to", "so", "tt", "st", "th", "sh")}
    in_topk = np.zeros((B, L), dtype=bool)
    valid = np.zeros((B, L), dtype=bool)
    arr: dict[str, np.ndarray] = {}
    ids_out = np.zeros((B, L, 0), dtype=np.int64)

    def mass(top: "torch.Tensor", at_obs: "torch.Tensor", inside: "torch.Tensor") -> "torch.Tensor":
        # probability in the top-K plus the sampled token when it lies outside them; the tail is the rest
        return top.exp().sum(-1) + torch.where(inside, torch.zeros_like(at_obs), at_obs.exp())

    with _inference(model):
        # teacher pass first: its top-K ids are what the student is read at. Each row is reduced to K values per
        # position at once, so memory is O(B L K), not the O(B L V) of keeping log-softmax rows for both passes.
        for i, tl in _response_rows(model, tp, rs, batch_size):
            if not arr:
                K = min(int(top_k), int(tl.shape[-1]))
                arr = {name: np.zeros((B, L, K), dtype=f32) for name in ("tk", "sk")}
                ids_out = np.zeros((B, L, K), dtype=np.int64)
            n = len(rs[i])
            if n == 0:
                continue
            tv, ti = torch.topk(tl, arr["tk"].shape[-1], dim=-1)
            y = torch.as_tensor(rs[i], device=tl.device).unsqueeze(-1)
            to = torch.gather(tl, -1, y).squeeze(-1)
            inside = (ti == y).any(-1)
            arr["tk"][i, :n] = tv.cpu().numpy()
            ids_out[i, :n] = ti.cpu().numpy()
            flat["to"][i, :n] = to.cpu().numpy()
            flat["tt"][i, :n] = torch.clamp(1.0 - mass(tv, to, inside), min=1e-12).cpu().numpy()
            flat["th"][i, :n] = (-(tl.exp() * tl).sum(-1)).cpu().numpy()
            in_topk[i, :n] = inside.cpu().numpy()
            valid[i, :n] = True
        for i, sl in _response_rows(model, sp, rs, batch_size):
            n = len(rs[i])
            if n == 0:
                continue
            ti = torch.as_tensor(ids_out[i, :n], device=sl.device)
            sv = torch.gather(sl, -1, ti)
            y = torch.as_tensor(rs[i], device=sl.device).unsqueeze(-1)
            so = torch.gather(sl, -1, y).squeeze(-1)
            inside = torch.as_tensor(in_topk[i, :n], device=sl.device)
            arr["sk"][i, :n] = sv.cpu().numpy()
            flat["so"][i, :n] = so.cpu().numpy()
            flat["st"][i, :n] = torch.clamp(1.0 - mass(sv, so, inside), min=1e-12).cpu().numpy()
            flat["sh"][i, :n] = (-(sl.exp() * sl).sum(-1)).cpu().numpy()
    if not arr:  # no rows at all
        K = 1
        arr = {name: np.zeros((B, L, K), dtype=f32) for name in ("tk", "sk")}
        ids_out = np.zeros((B, L, K), dtype=np.int64)
    return TeacherStudentScores(
        teacher_topk_logprob=arr["tk"], teacher_topk_ids=ids_out, student_logprob_on_teacher_topk=arr["sk"],
        teacher_logprob_obs=flat["to"], student_logprob_obs=flat["so"], obs_in_topk=in_topk,
        teacher_tail=flat["tt"], student_tail=flat["st"], teacher_entropy=flat["th"], student_entropy=flat["sh"],
        valid=valid)
