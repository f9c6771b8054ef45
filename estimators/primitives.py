"""Shared primitives (spec section 2): group-bys, group normalization, return-to-go, broadcast to tokens.

Everything here is vectorised numpy: group statistics use ``np.bincount`` over dense labels, groupings use
``np.lexsort``; the only Python loops run over trajectory *depth* (return-to-go), never over rows.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

__all__ = [
    "group_labels",
    "pair_partition",
    "group_normalize",
    "return_to_go",
    "discounted_suffix_sum",
    "broadcast_to_tokens",
    "NormMode",
]

NormMode = Literal["mean_norm", "mean_std_norm", "loo"]


def _small_ints(k: np.ndarray) -> bool:
    """Non-negative ints below 2n + 1024: usable as ids without a sort."""
    return k.dtype.kind in "iub" and int(k.min()) >= 0 and int(k.max()) < 2 * k.shape[0] + 1024


def _dense_ids(k: np.ndarray) -> tuple[np.ndarray, int]:
    """Ids of ``k`` in sorted value order, in 0..size-1: small non-negative ints are used as they are (ids may
    have gaps), anything else is compacted by a sort."""
    if _small_ints(k):
        return k.astype(np.int64, copy=False), int(k.max()) + 1
    return _compact_by_sort(k)


def _run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """True where a run of equal values begins in a sorted (non-empty) array."""
    starts = np.empty(sorted_values.shape[0], dtype=bool)
    starts[0] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=starts[1:])
    return starts


def _compact_by_sort(k: np.ndarray) -> tuple[np.ndarray, int]:
    n = k.shape[0]
    order = np.argsort(k)
    dense_sorted = np.cumsum(_run_starts(k[order])) - 1
    out = np.empty(n, dtype=np.int64)
    out[order] = dense_sorted
    return out, int(dense_sorted[-1]) + 1


def group_labels(*keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense labels 0..U-1 for the distinct tuples of ``keys``, numbered in lexicographic key order.

    Same result as ``np.unique(np.stack(keys, 1), axis=0, return_inverse=True)``, computed by packing the dense
    ids of each key into one int64 (one or two quicksorts instead of a lexsort; a small first key and a digest
    take one quicksort and one radix pass); falls back to ``np.lexsort`` when the packed range would overflow.
    """
    n = keys[0].shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    packed, size = _dense_ids(np.asarray(keys[0]))
    if len(keys) == 2 and size <= 1 << 16 and not _small_ints(np.asarray(keys[1])):
        return _pair_labels_radix(packed, np.asarray(keys[1]))
    for k in keys[1:]:
        d, u = _dense_ids(np.asarray(k))
        if size * u >= 2**62:
            return _group_labels_lexsort(*keys)
        packed = packed * u + d
        size *= u
    if size <= 2 * n + 1024:
        present = np.zeros(size, dtype=bool)
        present[packed] = True
        ids = np.cumsum(present) - 1
        return ids[packed].astype(np.int64), int(ids[-1]) + 1
    return _compact_by_sort(packed)


def _pair_labels_radix(first: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, int]:
    """Labels of the pairs (first, k) for dense ids ``first`` < 2**16 (GiGPO's group index) and a key that needs a
    sort (64-bit digests): one sort of ``k``, then a stable sort by ``first`` as uint16, which numpy does by radix
    in linear time. Same labels as packing the pairs and sorting again, in about 60% of the time."""
    n = k.shape[0]
    order = np.argsort(k)
    k_ids = np.cumsum(_run_starts(k[order]))  # k's rank along ``order`` (non-decreasing)
    by_first = np.argsort(first[order].astype(np.uint16), kind="stable")
    perm = order[by_first]
    fs, kid = first[perm], k_ids[by_first]
    change = np.empty(n, dtype=bool)
    change[0] = True
    change[1:] = (fs[1:] != fs[:-1]) | (kid[1:] != kid[:-1])
    labels = np.empty(n, dtype=np.int64)
    labels[perm] = np.cumsum(change) - 1
    return labels, int(labels[perm[-1]]) + 1


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64: a bijection (distinct keys stay distinct) that spreads small or
    structured keys (``gid * 1000 + state``) over all 64 bits."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _radix_argsort32(packed: np.ndarray) -> np.ndarray:
    """An ``argsort`` of values below 2**32: two stable 16-bit passes, which numpy runs as radix sorts in linear
    time (about a third of the time of one comparison argsort of 64-bit keys at 100k rows)."""
    lo = (packed & np.uint64(0xFFFF)).astype(np.uint16)
    order = np.argsort(lo, kind="stable")
    hi = (packed[order] >> np.uint64(16)).astype(np.uint16)
    return order[np.argsort(hi, kind="stable")]


def pair_partition(first: np.ndarray, n_first: int, key: np.ndarray) -> tuple[np.ndarray, int]:
    """Labels 0..U-1 of the distinct pairs ``(first, key)``, for dense ids ``first`` in 0..n_first-1 (at most
    2**16) and any int64 ``key`` (GiGPO's step clusters: group index x ``obs_hash``).

    The same *partition* as :func:`group_labels` (labels are numbered in another order), faster: each pair is
    packed into 32 bits, ``first`` in the top bits and the top bits of a bijective mix of ``key`` below them, and
    the packed values are sorted by two 16-bit radix passes (linear time). Different keys of one group can share
    their packed bits (about u^2 / 2^(33 - bits(n_first)) per group of u distinct keys); the sorted runs are
    checked against the full keys, and the rows of a run that holds more than one key are ordered by their full
    key, so the labels are always exact."""
    n = key.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    gbits = max(1, int(max(n_first, 1) - 1).bit_length())
    if gbits > 16:
        return group_labels(first, key)
    k = np.asarray(key, dtype=np.int64)
    hbits = 32 - gbits
    packed = np.asarray(first).astype(np.uint64) << np.uint64(hbits)
    packed |= _mix64(k.view(np.uint64)) >> np.uint64(64 - hbits)
    order = _radix_argsort32(packed)
    ps = packed[order]
    same_run = ps[1:] == ps[:-1]
    ks = k[order]
    clash = same_run & (ks[1:] != ks[:-1])
    if clash.any():
        # runs whose packed value covers several keys: sort their rows by (run, key), in place
        run = np.concatenate(([0], np.cumsum(~same_run)))
        rows = np.flatnonzero(np.isin(run, run[1:][clash]))
        order[rows] = order[rows][np.lexsort((ks[rows], run[rows]))]
        ks = k[order]
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    np.logical_not(same_run & (ks[1:] == ks[:-1]), out=starts[1:])
    dense = np.cumsum(starts) - 1
    labels = np.empty(n, dtype=np.int64)
    labels[order] = dense
    return labels, int(dense[-1]) + 1


def _group_labels_lexsort(*keys: np.ndarray) -> tuple[np.ndarray, int]:
    n = keys[0].shape[0]
    order = np.lexsort(keys[::-1])
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        ks = k[order]
        change[1:] |= ks[1:] != ks[:-1]
    lab_sorted = np.cumsum(change) - 1
    labels = np.empty(n, dtype=np.int64)
    labels[order] = lab_sorted
    return labels, int(lab_sorted[-1]) + 1


def _first_value(x: np.ndarray, labels: np.ndarray, n_labels: int) -> np.ndarray:
    ref = np.zeros(n_labels, dtype=np.float64)
    # repeated fancy assignment keeps the last write; reversing makes it the first member's value
    ref[labels[::-1]] = x[::-1]
    return ref


def group_normalize(
    x: np.ndarray,
    labels: np.ndarray,
    n_labels: int | None = None,
    *,
    mode: NormMode = "mean_std_norm",
    ddof: int = 1,
    delta: float = 1e-6,
    var_eps: float = 0.0,
    singleton: Literal["zero", "raw"] = "zero",
) -> np.ndarray:
    """Spec 2.1 ``norm(x; members, mode, ddof, delta)`` for every group of ``labels`` at once (float64).

    * ``mean_norm``: x - mu; ``mean_std_norm``: (x - mu) / (sqrt(var_ddof + var_eps) + delta);
      ``loo``: x - mean of the others = n/(n-1) (x - mu).
    * Singletons give 0 (``singleton="zero"``) or the raw value x (``"raw"``: verl's mean 0 / std 1 convention).
    * Means are taken after subtracting each group's first member, so a group of equal values gives exactly 0.
    """
    x = np.asarray(x, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    if x.size == 0:
        return np.zeros(0, dtype=np.float64)
    if n_labels is None:
        n_labels = int(labels.max()) + 1
    counts = np.bincount(labels, minlength=n_labels).astype(np.float64)
    ref = _first_value(x, labels, n_labels)
    y = x - ref[labels]
    safe = np.maximum(counts, 1.0)
    mean_y = np.bincount(labels, weights=y, minlength=n_labels) / safe
    dev = y - mean_y[labels]
    if mode == "mean_norm":
        out = dev
    elif mode == "mean_std_norm":
        var = np.bincount(labels, weights=dev * dev, minlength=n_labels) / np.maximum(counts - ddof, 1.0)
        std = np.sqrt(var + var_eps)
        out = dev / (std[labels] + delta)
    elif mode == "loo":
        out = dev * (counts / np.maximum(counts - 1.0, 1.0))[labels]
    else:
        raise ValueError(f"unknown normalization mode {mode!r} (expected mean_norm, mean_std_norm or loo)")
    single = counts[labels] <= 1
    if single.any():
        out = np.where(single, x if singleton == "raw" else 0.0, out)
    return out


def discounted_suffix_sum(
    values_canon: np.ndarray, seg_start: np.ndarray, seg_len: np.ndarray, gamma: float
) -> np.ndarray:
    """``out[k] = sum_{m>=k} gamma^(m-k) values[m]`` within contiguous segments (canonical layout).

    Computed backward as ``out[k] = values[k] + gamma * out[k+1]``, exactly as a per-trajectory loop would, but
    vectorised over segments: one numpy step per depth level (the loop runs ``max(seg_len)`` times).
    """
    v = np.asarray(values_canon, dtype=np.float64)
    out = v.copy()
    if v.size == 0 or seg_len.size == 0:
        return out
    order = np.argsort(-seg_len, kind="stable")
    ends = (seg_start + seg_len - 1)[order]
    lens = seg_len[order]
    max_len = int(lens[0])
    # number of segments with length > d, for every d
    n_active = np.searchsorted(-lens, -np.arange(1, max_len + 1), side="right")
    g = float(gamma)
    for d in range(1, max_len):
        idx = ends[: n_active[d]] - d
        out[idx] = v[idx] + g * out[idx + 1]
    return out


def return_to_go(
    reward: np.ndarray, traj_id: np.ndarray, turn_idx: np.ndarray, gamma: float = 0.95
) -> np.ndarray:
    """Spec 2.3: ``R_k = sum_{m=k}^{T-1} gamma^(m-k) r_m`` per trajectory, in the input row order (float64).

    ``turn_idx`` must run 0..T-1 within each trajectory (any row order).
    """
    reward = np.asarray(reward, dtype=np.float64)
    traj = np.asarray(traj_id)
    turn = np.asarray(turn_idx, dtype=np.int64)
    if reward.size == 0:
        return reward.copy()
    order = np.lexsort((turn, traj))
    ts = traj[order]
    starts = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])
    lens = np.diff(np.r_[starts, ts.size])
    out_c = discounted_suffix_sum(reward[order], starts, lens, gamma)
    out = np.empty_like(out_c)
    out[order] = out_c
    return out


def broadcast_to_tokens(token_row: Any, turn_values: np.ndarray, fill: float = 0.0,
                        dtype: type = np.float32) -> np.ndarray:
    """Spec 2.4: ``A_tok[b, l] = A_turn(row_traj_id[b], token_turn_idx[b, l])`` on response tokens, ``fill``
    elsewhere.

    ``token_row`` is a :class:`TrajectoryBatch` with a token table, or its :attr:`TrajectoryBatch.token_row`
    (the turn-table row of each token, -1 off the mask). ``turn_values`` holds one value per turn row (batch order).
    """
    if hasattr(token_row, "token_row"):
        if token_row.token_row is None:
            raise ValueError("broadcast_to_tokens: the batch has no token table")
        token_row = token_row.token_row
    turn_values = np.asarray(turn_values)
    if token_row.size == 0:
        return np.full(token_row.shape, fill, dtype=dtype)
    if turn_values.size == 0:
        return np.full(token_row.shape, fill, dtype=dtype)
    vals = turn_values[np.maximum(token_row, 0)]
    return np.where(token_row >= 0, vals, fill).astype(dtype)
